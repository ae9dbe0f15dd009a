"""A store (or a key prefix inside one) at an fsspec URL (`s3://bucket/prefix/x.zarr`).

Invariant: a `UrlStore` answers the same questions as a `Folder` (`folder.py`)
with object-store calls. An object store has no rename, hard link, fsync or
flock, so: arrays are written at their final path (`writes_in_place`), a
"link" is a server-side copy, fsync is nothing (an object is durable once its
PUT returns), and moving a staged prefix into place copies every key but
`zarr.json`, checks they all arrived, then copies `zarr.json` last, so the node
appears whole. Listings are never cached: other processes write the same store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn

from ..format import ZARR_JSON
from .transport import Range

if TYPE_CHECKING:
    import zarr.storage
    from fsspec.spec import AbstractFileSystem

__all__ = ["FsspecTransport", "UrlStore", "is_url", "url_errors"]


# The reachability probe gives up quickly: botocore's and s3fs's default retries keep a dead endpoint waiting.
_PROBE_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    "s3": {"config_kwargs": {"retries": {"max_attempts": 2}, "connect_timeout": 10}},
}


def is_url(text: str) -> bool:
    """True for an fsspec URL with a protocol other than `file` (`s3://bucket/x.zarr`)."""
    head, sep, _ = text.partition("://")
    return bool(sep) and head.isidentifier() and head != "file"


def url_errors() -> tuple[type[BaseException], ...]:
    """What a failed request to an object store raises: OSError, and botocore's and aiohttp's own errors (a refused
    connection is not an OSError there), where those packages are installed."""
    found: list[type[BaseException]] = [OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        found += [BotoCoreError, ClientError]
    except ImportError:  # no s3fs: its errors cannot occur
        pass
    try:
        from aiohttp import ClientError as HttpError

        found.append(HttpError)
    except ImportError:
        pass
    return tuple(found)


@dataclass(frozen=True, slots=True, order=True)
class UrlStore:
    """A store (or a key prefix inside one) at an fsspec URL, with the `storage_options` fsspec gets."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    # No rename: an array is written at its final path and becomes whole when `complete` is set.
    writes_in_place: ClassVar[bool] = True
    remote: ClassVar[bool] = True
    lock_kind: ClassVar[Literal["flock", "object", "none"]] = "object"  # no flock: a conditionally created object

    def transport(self) -> FsspecTransport:
        """The read transport of this prefix (keys relative to it)."""
        return FsspecTransport(self.url, dict(self.options))

    def absolute(self) -> UrlStore:
        """Itself: a URL is absolute."""
        return self

    def local_path(self) -> NoReturn:
        raise TypeError(f"{self.url}: an object store has no local path")

    def probe(self) -> None:
        """List the bucket (the URL's first component) with quick retries; raises what fsspec raises: ImportError
        (no implementation for the protocol), FileNotFoundError, PermissionError, or the client's own errors."""
        import fsspec

        bucket = self.path.split("/", 1)[0]
        fs = fsspec.filesystem(self.protocol, **{"skip_instance_cache": True, "use_listings_cache": False,
                                                 **_PROBE_OPTIONS.get(self.protocol, {}), **self.options})
        fs.ls(bucket, detail=False)

    def check_protocol(self) -> None:
        """Raise ValueError (unknown protocol) or ImportError (its package missing) unless fsspec can open the URL's
        protocol; no I/O."""
        import fsspec

        fsspec.get_filesystem_class(self.protocol)

    def write_failure(self, exc: BaseException) -> tuple[str, str] | None:
        """(what failed, what to do): any failed request is the object store's doing."""
        if isinstance(exc, url_errors()):
            return f"{type(exc).__name__}: {exc}", "check the object store (endpoint, credentials, quota)"
        return None

    def create_exclusive(self, data: bytes) -> None:
        """Create this object holding `data`, only if it does not exist: a conditional PUT (`If-None-Match: *`),
        which S3 and moto honour; FileExistsError otherwise."""
        self.fs().pipe_file(self.path, data, mode="create")

    def __post_init__(self) -> None:
        if not is_url(self.url):
            raise ValueError(f"{self.url!r} is not a URL such as s3://bucket/x.zarr")

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, rel: str | PurePosixPath) -> UrlStore:
        rel = str(rel).strip("/")
        return UrlStore(f"{self.url}/{rel}" if rel else self.url, self.options)

    @property
    def protocol(self) -> str:
        return self.url.partition("://")[0]

    @property
    def path(self) -> str:
        """The fsspec path (the URL without its protocol): `bucket/prefix/x.zarr`."""
        return self.url.partition("://")[2]

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def parent(self) -> UrlStore:
        return UrlStore(f"{self.protocol}://{PurePosixPath(self.path).parent}", self.options)

    def fs(self) -> AbstractFileSystem:
        """The fsspec filesystem."""
        import fsspec  # a module that only locates stores (the spec, the planner) does without fsspec

        return fsspec.filesystem(self.protocol, **{"use_listings_cache": False, **self.options})

    def relative_to(self, other: UrlStore) -> PurePosixPath:
        return PurePosixPath(self.path).relative_to(other.path)

    def exists(self) -> bool:
        return bool(self.fs().exists(self.path))

    def is_file(self) -> bool:
        return bool(self.fs().isfile(self.path))

    def is_dir(self) -> bool:
        return bool(self.fs().isdir(self.path))

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: an object store has no folders, a key's prefix exists once a key under it does."""

    def read_bytes(self) -> bytes:
        return bytes(self.fs().cat_file(self.path))

    def write_bytes(self, data: bytes) -> None:
        self.fs().pipe_file(self.path, data)

    def write_atomic(self, data: bytes) -> None:
        """Write the whole object: a single PUT is atomic on an object store."""
        self.write_bytes(data)

    @contextmanager
    def write_stream(self) -> Iterator[Callable[[bytes], object]]:
        """Write this object piece by piece (the block gets an `append(bytes)`): the pieces are collected and
        sent in one PUT when the block ends without an error (a single PUT is atomic)."""
        parts: list[bytes] = []
        yield parts.append
        self.write_bytes(b"".join(parts))

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs().rm_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def iterdir(self) -> Iterator[UrlStore]:
        for entry in sorted(self.fs().ls(self.path, detail=False)):
            yield self / PurePosixPath(entry).name

    def glob(self, pattern: str) -> list[UrlStore]:
        found = sorted(self.fs().glob(f"{self.path}/{pattern}"))
        return [UrlStore(f"{self.protocol}://{p}", self.options) for p in found]

    def keys(self) -> set[str]:
        """Every object key under this prefix, relative to it (one listing)."""
        prefix = self.path.rstrip("/") + "/"
        try:
            found = self.fs().find(self.path)
        except FileNotFoundError:
            return set()
        return {p[len(prefix):] for p in found if p.startswith(prefix)}

    def sizes(self) -> dict[str, int]:
        """Every object key under this prefix, relative to it, with its size in bytes (one listing)."""
        prefix = self.path.rstrip("/") + "/"
        try:
            found = self.fs().find(self.path, detail=True)
        except FileNotFoundError:
            return {}
        return {p[len(prefix):]: int(info.get("size") or 0) for p, info in found.items() if p.startswith(prefix)}

    def zarr(self, *, read_only: bool = False) -> zarr.storage.FsspecStore:
        """This prefix as a zarr store."""
        import zarr.storage

        return zarr.storage.FsspecStore.from_url(self.url, storage_options={"use_listings_cache": False,
                                                                            **self.options},
                                                 read_only=read_only)

    def remove_tree(self, *, trash: UrlStore | None = None) -> None:
        """Delete every key under this prefix, its `zarr.json` first so the node leaves the hierarchy at once
        (no `trash` needed for that: an object store has no rename)."""
        fs = self.fs()
        try:
            fs.rm_file(f"{self.path}/{ZARR_JSON}")
        except FileNotFoundError:
            pass
        keys = sorted(self.keys())
        if keys:
            fs.rm([f"{self.path}/{k}" for k in keys])

    def partial_files(self) -> list[UrlStore]:
        """None: an object is written whole or not at all."""
        return []

    def array_nodes(self, *, skip: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(path, metadata) of every zarr array below, sorted by path, by listing one prefix per group (never the
        chunk keys below an array, nor the top-level prefix `skip`)."""
        from ..format.nodes import NodeError, parse_node  # a module that only locates stores does without zarr

        fs = self.fs()
        out: list[tuple[str, dict[str, Any]]] = []
        todo = [""]
        while todo:
            rel = todo.pop()
            here = self / rel
            try:
                entries = fs.ls(here.path, detail=True)
            except FileNotFoundError:
                continue
            names = {e["name"].rsplit("/", 1)[-1]: e["type"] for e in entries}
            if ZARR_JSON not in names:
                continue
            try:
                meta = parse_node((here / ZARR_JSON).read_bytes(), here.url)
            except (OSError, NodeError):
                continue
            if meta.get("node_type") == "array":
                out.append((rel, meta))
                continue
            todo += [f"{rel}/{n}".lstrip("/") for n, kind in names.items()
                     if kind == "directory" and not (rel == "" and n == skip)]
        return sorted(out, key=lambda node: node[0])

    def share_as(self, dest: UrlStore) -> None:
        """Copy this object to `dest` server-side (an object store has no links)."""
        self.fs().copy(self.path, dest.path)

    def tree_bytes(self) -> int:
        """Bytes stored under this prefix."""
        try:
            return int(self.fs().du(self.path, total=True))
        except FileNotFoundError:
            return 0

    def fsync_tree(self, files: Sequence[str] | None = None, *, also: Sequence[UrlStore] = ()) -> None:
        """Nothing to do: an object is durable once its PUT returns."""

    def move_into_place(self, dest: UrlStore, trash: UrlStore, *, sync: bool = True) -> None:
        """Replace `dest` by this staged prefix: every key but `zarr.json` copied server-side and checked present,
        then `zarr.json` last (the node appears whole), then the staged keys deleted. `trash` and `sync` are not
        needed (an object is durable once written)."""
        if dest.url == self.url:  # written in place
            return
        fs = self.fs()
        staged = self.keys()
        dest.remove_tree()
        for key in sorted(staged - {ZARR_JSON}):
            fs.copy(f"{self.path}/{key}", f"{dest.path}/{key}")
        missing = sorted(staged - {ZARR_JSON} - dest.keys())
        if missing:
            raise RuntimeError(f"{dest}: {len(missing)} object(s) missing after copying, first {missing[0]}")
        if ZARR_JSON in staged:
            fs.copy(f"{self.path}/{ZARR_JSON}", f"{dest.path}/{ZARR_JSON}")
        self.remove_tree()

    def transport_errors(self) -> tuple[type[BaseException], ...]:
        """What a failed request here raises."""
        return url_errors()

    def shown(self, cwd: object) -> str:
        """The URL, as the user wrote it."""
        return self.url


@dataclass(slots=True)
class FsspecTransport:
    """A store at an fsspec URL; each range is one ranged GET (`cat_ranges` sends them together)."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict)
    _fs: Any = field(default=None, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)
    # The first of several reading threads makes the filesystem; the others wait for it rather than make their own.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def where(self) -> str:
        return self.url

    def _filesystem(self) -> Any:
        if self._pid != os.getpid():  # a forked child: a lock no parent thread holds
            self._fs, self._pid, self._lock = None, os.getpid(), threading.Lock()
        if self._fs is not None:
            return self._fs
        with self._lock:
            return self._made()

    def _made(self) -> Any:
        if self._fs is None:
            import fsspec  # only URL stores need it

            # Not the instance cache: an instance made before a fork holds the parent's event loop and sessions.
            self._fs = fsspec.filesystem(self.url.partition("://")[0],
                                         **{"skip_instance_cache": True, "use_listings_cache": False,
                                            **self.options})
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

    def descriptors(self) -> None:
        """None: an object store's keys are no local files."""
        return None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": dict(self.options)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.options, self._fs, self._pid = state["url"], state["options"], None, os.getpid()
        self._lock = threading.Lock()
