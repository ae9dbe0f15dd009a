"""A zipped store (a zip of a store folder's contents): read-only, read in place.

Invariant: a `Zipped` location answers every reading question a `Folder` answers (its keys and their sizes,
node documents, the zarr store, the read transport) from the zip's central directory and members; every write
verb raises `ReadOnlyStore`, naming the zip and how to change it (convert or repair the folder it was made
from, then zip that again). Stored members are read with `os.pread` at their offset, never inflated whole.
"""

from __future__ import annotations

import os
import struct
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn

from .transport import Range

if TYPE_CHECKING:
    import zarr.storage

__all__ = ["ReadOnlyStore", "ZipTransport", "Zipped"]


def _slice(data: bytes, start: int, length: int) -> bytes:
    return data[start:] if start < 0 else data[start:start + length]


class ReadOnlyStore(OSError):
    """A write to a store that cannot be written (a zipped store)."""


_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # a zip member's local header, before its name and extra field
_LOCAL_MAGIC = 0x04034B50


@dataclass(slots=True)
class ZipTransport:
    """A zip of a store folder's contents. Stored (uncompressed) members are read in place with `os.pread`;
    a compressed member is inflated whole through `zipfile`, then sliced."""

    path: Path
    _fd: int | None = field(default=None, repr=False)
    _members: dict[str, tuple[int, int, bool]] | None = field(default=None, repr=False)  # offset, size, stored
    _pid: int = field(default_factory=os.getpid, repr=False)
    # Threads of one process share the descriptor; the first to read opens it, the others wait for it.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def where(self) -> str:
        return str(self.path)

    def _open(self) -> tuple[int, dict[str, tuple[int, int, bool]]]:
        if self._pid != os.getpid():  # a forked child: a new descriptor, and a lock no parent thread holds
            self._fd, self._members, self._pid, self._lock = None, None, os.getpid(), threading.Lock()
        fd, members = self._fd, self._members
        if fd is not None and members is not None:
            return fd, members
        with self._lock:
            return self._opened()

    def _opened(self) -> tuple[int, dict[str, tuple[int, int, bool]]]:
        if self._fd is None or self._members is None:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            members = {}
            with zipfile.ZipFile(self.path) as zf:
                for info in zf.infolist():
                    head = os.pread(fd, _LOCAL_HEADER.size, info.header_offset)
                    fields = _LOCAL_HEADER.unpack(head)
                    if fields[0] != _LOCAL_MAGIC:
                        raise ValueError(f"{self.path}: member {info.filename!r} has no local header")
                    data = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
                    members[info.filename] = (data, info.file_size, info.compress_type == zipfile.ZIP_STORED)
            self._fd, self._members = fd, members
        return self._fd, self._members

    def _member(self, key: str) -> tuple[int, int, int, bool]:
        fd, members = self._open()
        if key not in members:
            raise FileNotFoundError(f"{self.path}: no member {key!r}")
        return (fd, *members[key])

    def read(self, key: str) -> bytes:
        fd, offset, size, stored = self._member(key)
        if not stored:
            with zipfile.ZipFile(self.path) as zf:
                return zf.read(key)
        return os.pread(fd, size, offset)

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        fd, offset, size, stored = self._member(key)
        if not stored:
            whole = self.read(key)
            return [_slice(whole, s, n) for s, n in ranges]
        out = []
        for start, length in ranges:
            if start < 0:
                start, length = max(0, size + start), min(size, -start)
            if start + length > size:
                raise EOFError(f"{self.path}:{key}: range {start:,}+{length:,} past its {size:,} B")
            out.append(os.pread(fd, length, offset + start))
        return out

    def size(self, key: str) -> int:
        return self._member(key)[2]

    def sizes(self, prefix: str = "") -> dict[str, int]:
        _, members = self._open()
        base = f"{prefix.strip('/')}/" if prefix else ""
        return {k: n for k, (_, n, _) in members.items() if k.startswith(base) and not k.endswith("/")}

    def close(self) -> None:
        """Close this process's descriptor."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd, self._members = None, None

    def descriptors(self) -> None:
        """None: a member is a byte range of the zip (possibly deflated), not a file of its own."""
        return None

    def __del__(self) -> None:
        self.close()  # as for FolderTransport

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self._fd, self._members, self._pid = state["path"], None, None, os.getpid()
        self._lock = threading.Lock()


def _refuse(where: object) -> NoReturn:
    raise ReadOnlyStore(f"{where}: a zipped store is read-only; convert (or `labzarr verify --repair`) the store "
                        "folder it was zipped from, then zip that folder again")


@dataclass(frozen=True, slots=True)
class Zipped:
    """A zipped store, or a key prefix inside one: every reading verb of a `Folder`, no writing verb."""

    zip: Path
    prefix: str = ""  # a key prefix inside the zip ("" for the store's root)
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False, hash=False)

    writes_in_place: ClassVar[bool] = False
    remote: ClassVar[bool] = False
    protocol: ClassVar[str] = "zip"
    lock_kind: ClassVar[Literal["flock", "object", "none"]] = "none"

    def check_protocol(self) -> None:
        """Nothing to check: a local file."""

    def __str__(self) -> str:
        return f"{self.zip}/{self.prefix}" if self.prefix else str(self.zip)

    def __fspath__(self) -> str:
        return str(self)

    def __truediv__(self, rel: str | PurePath) -> Zipped:
        rel = str(rel).strip("/")
        return Zipped(self.zip, f"{self.prefix}/{rel}".strip("/") if rel else self.prefix)

    @property
    def name(self) -> str:
        return PurePosixPath(self.prefix).name if self.prefix else self.zip.name

    @property
    def parent(self) -> Zipped:
        return Zipped(self.zip, str(PurePosixPath(self.prefix).parent).strip(".")) if self.prefix else self

    def _members(self) -> dict[str, int]:
        return self.transport().sizes()

    def transport(self) -> ZipTransport:
        """The read transport of the whole zip (keys relative to the store's root)."""
        return ZipTransport(self.zip)

    def _key(self, rel: str = "") -> str:
        return f"{self.prefix}/{rel}".strip("/")

    def absolute(self) -> Zipped:
        return Zipped(self.zip.absolute(), self.prefix)

    def local_path(self) -> Path:
        """The zip file."""
        return self.zip

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_file(self) -> bool:
        return bool(self.prefix) and self.prefix in self._members()

    def is_dir(self) -> bool:
        base = f"{self.prefix}/" if self.prefix else ""
        return any(k.startswith(base) for k in self._members())

    def read_bytes(self) -> bytes:
        return self.transport().read(self.prefix)

    def keys(self) -> set[str]:
        """Every member under this prefix, relative to it."""
        return set(self.sizes())

    def sizes(self) -> dict[str, int]:
        """Every member under this prefix, relative to it, with its size in bytes."""
        return self.transport().sizes(self.prefix) if not self.prefix else {
            k[len(self.prefix) + 1:]: n for k, n in self.transport().sizes(self.prefix).items()}

    def iterdir(self) -> Iterator[Zipped]:
        base = f"{self.prefix}/" if self.prefix else ""
        names = sorted({k[len(base):].split("/", 1)[0] for k in self._members() if k.startswith(base)})
        return iter([self / n for n in names])

    def glob(self, pattern: str) -> list[Zipped]:
        return sorted((p for p in self.iterdir() if PurePosixPath(p.name).match(pattern)), key=lambda p: p.name)

    def zarr(self, *, read_only: bool = True) -> zarr.storage.ZipStore:
        """The zip as a read-only zarr store (its root: zarr paths are relative to the store's root)."""
        import zarr.storage

        if not read_only:
            _refuse(self)
        return zarr.storage.ZipStore(self.zip, mode="r")

    def array_nodes(self, *, skip: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(path, metadata) of every zarr array below, in path order (the top-level folder `skip` left out)."""
        from ..format.nodes import array_nodes

        transport = self.transport()
        base = f"{self.prefix}/" if self.prefix else ""
        found = array_nodes(transport, [k for k in transport.sizes(self.prefix)], skip=self._key(skip) if skip else "")
        return [(path[len(base):], doc) for path, doc in found if path.startswith(base) or not base]

    def partial_files(self) -> list[Zipped]:
        """None: nothing writes inside a zip."""
        return []

    def tree_bytes(self) -> int:
        """Bytes stored under this prefix (uncompressed member sizes)."""
        return sum(self.sizes().values())

    def transport_errors(self) -> tuple[type[BaseException], ...]:
        return (OSError,)

    def shown(self, cwd: PurePath) -> str:
        """The zip's path relative to `cwd` when it lies below it, else as it is."""
        try:
            return str(self.zip.resolve().relative_to(Path(cwd).resolve()))
        except ValueError:
            return str(self)

    def probe(self) -> None:
        """Nothing to check: a local file."""

    def write_failure(self, exc: BaseException) -> tuple[str, str] | None:
        """A write to a zip is always refused: what was refused, and how to change the store instead."""
        return (str(exc), "convert into the store folder, then zip it again") if isinstance(exc, OSError) else None

    # Writing: refused, each with the same message.
    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        _refuse(self)

    def write_bytes(self, data: bytes) -> None:
        _refuse(self)

    def write_atomic(self, data: bytes) -> None:
        _refuse(self)

    def write_stream(self) -> NoReturn:
        _refuse(self)

    def unlink(self, missing_ok: bool = False) -> None:
        _refuse(self)

    def remove_tree(self, *, trash: Zipped | None = None) -> None:
        _refuse(self)

    def share_as(self, dest: Zipped) -> None:
        _refuse(self)

    def fsync_tree(self, files: Sequence[str] | None = None, *, also: Sequence[Zipped] = ()) -> None:
        _refuse(self)

    def move_into_place(self, dest: Zipped, trash: Zipped, *, sync: bool = True) -> None:
        _refuse(self)

    def create_exclusive(self, data: bytes) -> None:
        _refuse(self)
