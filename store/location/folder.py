"""A store (or a key prefix inside one) in a local folder: a `pathlib.Path` that also speaks the store's verbs.

Invariant: a `Folder` and a `UrlStore` (`url.py`) answer the same questions
(`keys`, `zarr`, `write_atomic`, `remove_tree`, `share_as`, `move_into_place`,
`fsync_tree`, `tree_bytes`, `transport_errors`), so the converter writes
either kind through one set of calls. Where a filesystem and an object store
commit differently, the difference lives in these two classes, and
`writes_in_place` says which protocol a location follows.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PosixPath, PurePath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, Literal

from .transport import Range

if TYPE_CHECKING:
    import zarr.storage

__all__ = ["Folder", "FolderTransport", "atomic_write", "put_in_place", "temp_beside"]

_PARALLEL_FSYNC = 8  # from this many files on, `fsync_tree` syncs them from this many threads at once


def _fsync(path: PurePath) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Folder(PosixPath):
    """A local store folder, or a path inside one; `/`, `parent` and listings stay `Folder`s."""

    # A rename makes an array appear whole, so arrays are staged elsewhere and renamed into place.
    writes_in_place: ClassVar[bool] = False
    options: ClassVar[Mapping[str, Any]] = MappingProxyType({})  # a URL store's fsspec options; a folder has none
    remote: ClassVar[bool] = False
    protocol: ClassVar[str] = "file"
    lock_kind: ClassVar[Literal["flock", "object", "none"]] = "flock"  # the kernel drops it when its holder dies

    def check_protocol(self) -> None:
        """Nothing to check: a folder needs no fsspec implementation."""

    def transport(self) -> FolderTransport:
        """The read transport of this folder (keys relative to it); ValueError for a file (that is not a zip)."""
        if self.is_file():
            raise ValueError(f"{self}: a file but not a zip; a store is a folder or a zip of one")
        return FolderTransport(PosixPath(self))

    def local_path(self) -> Path:
        """This folder as a plain path."""
        return PosixPath(self)

    def probe(self) -> None:
        """Nothing to check here: a folder problem is reported by the first write."""

    def write_failure(self, exc: BaseException) -> tuple[str, str] | None:
        """(what failed, what to do) when `exc` is the disk's doing (full, over quota, read-only, no permission);
        None for any other error, which is a bug to report as it is."""
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            return str(exc), "free space (or fix permissions)"
        return None

    def create_exclusive(self, data: bytes) -> None:
        """Create this file holding `data`, only if it does not exist (FileExistsError otherwise)."""
        fd = os.open(self, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def zarr(self, *, read_only: bool = False) -> zarr.storage.LocalStore:
        """This folder as a zarr store."""
        import zarr.storage  # a module that only locates stores (the spec, the planner) does without zarr

        return zarr.storage.LocalStore(PosixPath(self), read_only=read_only)

    def keys(self) -> set[str]:
        """Every file under this folder, relative to it."""
        if not self.is_dir():
            return set()
        # os.walk's scandir tells files from folders without a stat per entry: half the time of rglob + is_file
        # + relative_to (10,000 one-shard volumes: 0.9 s against 1.8 s).
        base = os.fspath(self)
        out: set[str] = set()
        for here, _, files in os.walk(base):
            rel = os.path.relpath(here, base)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            out.update(prefix + name for name in files)
        return out

    def sizes(self) -> dict[str, int]:
        """Every file under this folder, relative to it, with its size in bytes."""
        if not self.is_dir():
            return {}
        base = os.fspath(self)
        out: dict[str, int] = {}
        for here, _, files in os.walk(base):
            rel = os.path.relpath(here, base)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in files:
                out[prefix + name] = os.stat(os.path.join(here, name)).st_size
        return out

    def write_atomic(self, data: bytes) -> None:
        """Write the whole file through a temporary file and a rename, so readers never see half of it."""
        atomic_write(self, data)

    @contextmanager
    def write_stream(self) -> Iterator[Callable[[bytes], object]]:
        """Write this file piece by piece (the block gets an `append(bytes)`): into a `.partial` file beside it,
        renamed into place when the block ends without an error, so the file appears whole or not at all."""
        self.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.with_name(f"{self.name}.{uuid.uuid4().hex}.partial")
        try:
            with tmp.open("wb") as out:
                yield out.write
            os.replace(tmp, self)
        finally:
            tmp.unlink(missing_ok=True)

    def remove_tree(self, *, trash: Folder | None = None) -> None:
        """Delete this folder (or file) and everything below; nothing there is no error. With `trash`, it is
        first renamed there, so it leaves the hierarchy at once (a rename is atomic, a recursive delete is not)."""
        target: PosixPath = self
        if trash is not None and self.exists():
            target = trash / f"{self.name}.{uuid.uuid4().hex}"
            trash.mkdir(parents=True, exist_ok=True)
            self.rename(target)
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=trash is None)
        else:
            target.unlink(missing_ok=True)

    def partial_files(self) -> list[Folder]:
        """The temporary `*.partial` files a killed zarr write left below."""
        return sorted(self.rglob("*.partial")) if self.is_dir() else []

    def array_nodes(self, *, skip: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(path, metadata) of every zarr array below, in path order; never descends into an array's chunk
        folders, a folder that is no zarr node, or the top-level folder `skip`."""
        from ..format.nodes import ZARR_JSON, NodeError, parse_node

        out: list[tuple[str, dict[str, Any]]] = []
        for here, dirs, files in os.walk(self):
            at_root = PosixPath(here) == self
            dirs[:] = sorted(d for d in dirs if not (at_root and d == skip))
            if ZARR_JSON not in files:
                if not at_root:
                    dirs.clear()  # not a zarr node: nothing of the hierarchy below
                continue
            try:
                meta = parse_node((PosixPath(here) / ZARR_JSON).read_bytes(), here)
            except (OSError, NodeError):
                dirs.clear()
                continue
            if meta.get("node_type") == "array":
                dirs.clear()
                out.append((PosixPath(here).relative_to(self).as_posix(), meta))
        return out

    def share_as(self, dest: Folder) -> None:
        """Make `dest` name this file too (a hard link: installed files are never written again)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(self, dest)

    def tree_bytes(self) -> int:
        """Bytes stored here (a file's size, or a folder's files)."""
        if self.is_file():
            return self.stat().st_size
        return sum(p.stat().st_size for p in self.rglob("*") if p.is_file())

    def fsync_tree(self, files: Sequence[str] | None = None, *, also: Sequence[Folder] = ()) -> None:
        """fsync files (all below, or just `files`) and their folders: zarr never fsyncs. `also`: other folders
        whose whole trees are synced in the same pass (many small trees: their fsyncs then share commits)."""
        paths = [self / f for f in files] if files is not None else [p for p in self.rglob("*") if p.is_file()]
        paths += [p for other in also for p in other.rglob("*") if p.is_file()]
        dirs = {self, *also} | {p.parent for p in paths}
        if len(paths) < _PARALLEL_FSYNC:
            for path in [*paths, *sorted(dirs, key=lambda d: len(d.parts), reverse=True)]:
                _fsync(path)
            return
        # Concurrent fsyncs share the filesystem's journal commits: several times faster than one after another
        # on many files (a volume's shards), and all are done before this returns, which is all a caller needs.
        with ThreadPoolExecutor(max_workers=_PARALLEL_FSYNC) as pool:
            list(pool.map(_fsync, paths))
            list(pool.map(_fsync, dirs))

    def move_into_place(self, dest: Folder, trash: Folder, *, sync: bool = True) -> None:
        """Rename this staged folder to `dest`, first moving any existing `dest` aside into `trash`; `sync`: fsync
        `dest`'s folder then, so the rename is durable (else the caller syncs it, once for many)."""
        trash.mkdir(parents=True, exist_ok=True)
        for _ in range(10):  # a retried task of this run may be installing the same array at the same moment
            aside = trash / f"{dest.name}.{uuid.uuid4().hex}"
            try:
                dest.rename(aside)
            except FileNotFoundError:
                pass
            else:
                shutil.rmtree(aside, ignore_errors=True)
            try:
                self.rename(dest)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    continue
                raise
            if sync:
                dest.parent.fsync_tree(files=())
            return
        raise RuntimeError(f"{dest}: could not move the staged array into place (another writer keeps replacing it)")

    def transport_errors(self) -> tuple[type[BaseException], ...]:
        """What a failed write here raises."""
        return (OSError,)

    def shown(self, cwd: PurePath) -> str:
        """This path relative to `cwd` when it lies below it (what the user typed), else as it is."""
        try:
            return str(self.resolve().relative_to(Path(cwd).resolve()))
        except ValueError:
            return str(self)


def temp_beside(path: Path) -> tuple[BinaryIO, Path]:
    """A new temporary file beside `path`, open for writing, with the mode of the file it will replace (else the
    usual 0644); `put_in_place` makes it `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; keep the mode of the file being replaced, else the usual 0644.
        os.fchmod(fd, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        return os.fdopen(fd, "wb"), Path(tmp)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise


def put_in_place(file: BinaryIO, tmp: Path, path: Path) -> None:
    """Sync and close `file` (written to `tmp`, from `temp_beside`), then rename it to `path`, durably."""
    file.flush()
    os.fsync(file.fileno())
    file.close()
    os.replace(tmp, path)
    # The rename is durable only once the folder is synced too.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file and rename, so readers never see half a file."""
    file, tmp = temp_beside(path)
    try:
        file.write(data)
        put_in_place(file, tmp, path)
    except BaseException:
        file.close()
        tmp.unlink(missing_ok=True)
        raise


@dataclass(slots=True)
class FolderTransport:
    """A store folder, read with `os.pread` on file descriptors kept open per process.

    At most `max_open` descriptors stay open, the oldest closed first; one that a read in another thread still
    uses is closed when that read ends (`_busy`), never under it: a closed descriptor's number can be reused by
    the next open, and a read on it would then return another file's bytes."""

    root: Path
    max_open: int = 256
    _fds: dict[str, int] = field(default_factory=dict, repr=False)
    _busy: dict[int, int] = field(default_factory=dict, repr=False)  # fd -> reads in flight on it
    _retired: set[int] = field(default_factory=set, repr=False)  # dropped from `_fds` while busy: closed when idle
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)

    @property
    def where(self) -> str:
        return str(self.root)

    def descriptors(self) -> FolderTransport:
        """This transport: its `take` and `give` hand out the descriptors it keeps open."""
        return self

    def take(self, key: str) -> int:
        """The open descriptor of `key`, counted busy until `give` (a pair, not a context manager: a read task
        takes one per file, and a generator's frame per task is Python the read threads contend for)."""
        self._own()
        with self._lock:
            fd = self._fds.get(key)
            if fd is None:
                fd = os.open(self.root / key, os.O_RDONLY | os.O_CLOEXEC)
                if len(self._fds) >= self.max_open:
                    self._drop(self._fds.pop(next(iter(self._fds))))
                self._fds[key] = fd
            self._busy[fd] = self._busy.get(fd, 0) + 1
        return fd

    def give(self, fd: int) -> None:
        """The end of a read on `fd` from `take`: a descriptor dropped meanwhile is closed once no read uses it."""
        with self._lock:
            self._busy[fd] -= 1
            if not self._busy[fd]:
                del self._busy[fd]
                if fd in self._retired:
                    self._retired.discard(fd)
                    os.close(fd)

    def _own(self) -> None:
        """In a forked child, forget the parent's descriptors (shared offsets, not ours) and its lock (which a
        thread of the parent may have held at the fork, and nothing here would ever release)."""
        if self._pid != os.getpid():
            self._fds, self._busy, self._retired, self._pid = {}, {}, set(), os.getpid()
            self._lock = threading.Lock()

    def _drop(self, fd: int) -> None:
        """Close `fd`, now or, while a read uses it, when that read ends (the lock is held)."""
        if fd in self._busy:
            self._retired.add(fd)
        else:
            os.close(fd)

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        out = []
        fd = self.take(key)
        try:
            for start, length in ranges:
                if start < 0:
                    size = os.fstat(fd).st_size
                    start, length = max(0, size + start), min(size, -start)
                data = os.pread(fd, length, start)
                if len(data) != length:
                    raise EOFError(f"{self.root / key}: {len(data)} B at offset {start:,}, expected {length:,} B")
                out.append(data)
        finally:
            self.give(fd)
        return out

    def size(self, key: str) -> int:
        fd = self.take(key)
        try:
            return os.fstat(fd).st_size
        finally:
            self.give(fd)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return {}
        return {p.relative_to(self.root).as_posix(): p.stat().st_size for p in base.rglob("*") if p.is_file()}

    def close(self) -> None:
        """Close this process's descriptors (one still being read from when its read ends)."""
        self._own()
        with self._lock:
            for fd in self._fds.values():
                self._drop(fd)
            self._fds = {}

    def __del__(self) -> None:
        # Descriptors are plain ints, which nothing else closes: a transport dropped without close() (a reader
        # that goes out of scope) would otherwise keep its files open for the life of the process.
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "max_open": self.max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root, self.max_open, self._fds, self._pid = state["root"], state["max_open"], {}, os.getpid()
        self._busy, self._retired, self._lock = {}, set(), threading.Lock()
