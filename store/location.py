"""Where a store lives: a folder, a zipped folder or an fsspec URL, behind one read transport.

Invariant: a `Transport` is per process. It opens files (or an fsspec filesystem)
lazily and forgets them in a child process (a new pid opens its own), so a
handle made before a fork is never used after it, and nothing it holds is
pickled. Keys are the store's posix paths relative to its root (`zarr.json`,
`volumes/case1/c/0/0/0/0`). Reads are byte ranges: a suffix (`start < 0`) for a
shard index, then `(start, length)` ranges for the chunks a region touches.
A missing key raises `FileNotFoundError`; nothing here ever returns fill bytes.
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import zarr.storage


__all__ = ["FolderTransport", "FsspecTransport", "Range", "Transport", "ZipTransport", "is_url", "open_transport",
           "store_location", "zarr_store_for"]

Range = tuple[int, int]  # (start, length); start < 0 with length 0 reads the last -start bytes


def is_url(text: str) -> bool:
    """True for an fsspec URL with a protocol other than `file` (`s3://bucket/x.zarr`)."""
    head, sep, _ = text.partition("://")
    return bool(sep) and head.isidentifier() and head != "file"


def store_location(store: Path | str) -> Path | str:
    """A URL (kept as text, trailing `/` dropped) or a local path (`file://` stripped)."""
    if isinstance(store, str) and is_url(store):
        return store.rstrip("/")
    return Path(str(store).removeprefix("file://"))


class Transport(Protocol):
    """Read access to the keys of one store, in this process."""

    @property
    def where(self) -> str:
        """The store's path or URL, for messages."""

    def read(self, key: str) -> bytes:
        """The whole object at `key`."""

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        """The bytes of each range of `key`, in order (a suffix range: the object's last bytes)."""

    def size(self, key: str) -> int:
        """The length of the object at `key`."""

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under `prefix` (all keys for "") with its length, from one listing."""

    def close(self) -> None:
        """Close what this process holds open (files, a connection); a later read opens it again."""


def _slice(data: bytes, start: int, length: int) -> bytes:
    return data[start:] if start < 0 else data[start:start + length]


@dataclass(slots=True)
class FolderTransport:
    """A store folder, read with `os.pread` on file descriptors kept open per process."""

    root: Path
    max_open: int = 256
    _fds: dict[str, int] = field(default_factory=dict, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)

    @property
    def where(self) -> str:
        return str(self.root)

    def _fd(self, key: str) -> int:
        if self._pid != os.getpid():  # a forked child: the parent's descriptors are shared offsets, not ours
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(key)
        if fd is None:
            fd = os.open(self.root / key, os.O_RDONLY | os.O_CLOEXEC)
            if len(self._fds) >= self.max_open:
                os.close(self._fds.pop(next(iter(self._fds))))
            self._fds[key] = fd
        return fd

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        fd = self._fd(key)
        out = []
        for start, length in ranges:
            if start < 0:
                size = os.fstat(fd).st_size
                start, length = max(0, size + start), min(size, -start)
            data = os.pread(fd, length, start)
            if len(data) != length:
                raise EOFError(f"{self.root / key}: {len(data)} B at offset {start:,}, expected {length:,} B")
            out.append(data)
        return out

    def size(self, key: str) -> int:
        return os.fstat(self._fd(key)).st_size

    def sizes(self, prefix: str = "") -> dict[str, int]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return {}
        return {p.relative_to(self.root).as_posix(): p.stat().st_size for p in base.rglob("*") if p.is_file()}

    def close(self) -> None:
        """Close this process's descriptors."""
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}

    def __del__(self) -> None:
        # Descriptors are plain ints, which nothing else closes: a transport dropped without close() (a reader
        # that goes out of scope) would otherwise keep its files open for the life of the process.
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "max_open": self.max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root, self.max_open, self._fds, self._pid = state["root"], state["max_open"], {}, os.getpid()


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

    @property
    def where(self) -> str:
        return str(self.path)

    def _open(self) -> tuple[int, dict[str, tuple[int, int, bool]]]:
        if self._pid != os.getpid():
            self._fd, self._members, self._pid = None, None, os.getpid()
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

    def __del__(self) -> None:
        self.close()  # as for FolderTransport

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self._fd, self._members, self._pid = state["path"], None, None, os.getpid()


@dataclass(slots=True)
class FsspecTransport:
    """A store at an fsspec URL; each range is one ranged GET (`cat_ranges` sends them together)."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict)
    _fs: Any = field(default=None, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)

    @property
    def where(self) -> str:
        return self.url

    def _filesystem(self) -> Any:
        if self._fs is None or self._pid != os.getpid():
            import fsspec  # only URL stores need it

            # Not the instance cache: an instance made before a fork holds the parent's event loop and sessions.
            self._fs = fsspec.filesystem(self.url.partition("://")[0],
                                         **{"skip_instance_cache": True, "use_listings_cache": False,
                                            **self.options})
            self._pid = os.getpid()
        return self._fs

    def _path(self, key: str) -> str:
        return f"{self.url.partition('://')[2]}/{key}"

    def read(self, key: str) -> bytes:
        return bytes(self._filesystem().cat_file(self._path(key)))

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        try:
            return self._read_ranges(key, ranges)
        except FileNotFoundError:
            raise
        except OSError as exc:
            # A range past an object's end is refused by the server (S3: 416, "not satisfiable"), not cut short
            # as a file read is: tell that apart from other failures by the object's size, asked only now.
            end = max((s + n for s, n in ranges if s >= 0), default=0)
            size = self.size(key)
            if end > size:
                raise EOFError(f"{self.url}/{key}: {size:,} B, a range ends at {end:,} B") from exc
            raise

    def _read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        if not ranges:
            return []
        fs, path = self._filesystem(), self._path(key)
        if len(ranges) == 1:
            start, length = ranges[0]
            return [bytes(fs.cat_file(path, start=start, end=None if start < 0 else start + length))]
        starts = [s for s, _ in ranges]
        ends = [None if s < 0 else s + n for s, n in ranges]
        found = fs.cat_ranges([path] * len(ranges), starts, ends, on_error="raise")
        return [bytes(b) for b in found]

    def size(self, key: str) -> int:
        return int(self._filesystem().size(self._path(key)))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        root = self.url.partition("://")[2].rstrip("/")
        try:
            found = self._filesystem().find(f"{root}/{prefix}" if prefix else root, detail=True)
        except FileNotFoundError:
            return {}
        return {name[len(root) + 1:]: int(info.get("size") or 0) for name, info in found.items()}

    def close(self) -> None:
        """Forget the filesystem."""
        self._fs = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": dict(self.options)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.options, self._fs, self._pid = state["url"], state["options"], None, os.getpid()


def _is_zipped(where: Path) -> bool:
    """True for a zipped store, False for a folder; a file that is no zip is refused."""
    if not where.is_file():
        return False
    if not zipfile.is_zipfile(where):
        raise ValueError(f"{where}: a file but not a zip; a store is a folder or a zip of one")
    return True


def open_transport(store: Path | str, storage_options: Mapping[str, Any] | None = None) -> Transport:
    """The transport for a store folder, a zipped store (recognised by content) or a URL."""
    where = store_location(store)
    if isinstance(where, str):
        return FsspecTransport(where, dict(storage_options or {}))
    if _is_zipped(where):
        return ZipTransport(where)
    return FolderTransport(where)


def zarr_store_for(store: Path | str, storage_options: Mapping[str, Any] | None = None) -> zarr.storage.StoreLike:
    """A read-only zarr-python store for the same location (the reference reader, and the fallback)."""
    import zarr.storage  # a module that only locates stores does without zarr

    where = store_location(store)
    if isinstance(where, str):
        # Listings are not cached: a store can be rewritten by a conversion while a reader lives.
        return zarr.storage.FsspecStore.from_url(where, read_only=True,
                                                 storage_options={"use_listings_cache": False,
                                                                  **(storage_options or {})})
    if _is_zipped(where):
        return zarr.storage.ZipStore(where, mode="r")
    return zarr.storage.LocalStore(where, read_only=True)
