"""Stores at an fsspec URL (`s3://bucket/prefix/x.zarr`): the object-store commit protocol.

A filesystem store commits an array by renaming a staged folder into place
(`store.py`). Object stores have no rename, hard link, fsync or flock, so a
URL store commits differently, and this module owns that protocol:

1. A volume (or a sample's role) is written directly at its final path, after
   every key of an older version under that path is deleted. Until step 3 the
   array has no `complete` attr, so neither resume nor `verify` trusts it.
2. Once written, every chunk (shard) object is checked present by listing the
   array's prefix (every chunk is written, also all-fill ones, as on disk).
3. `content_sha256`, then `complete` are set (one PUT of `zarr.json` each, an
   atomic replace on S3): the array is whole. A task of a dead run never gets
   here (the lock object no longer names its run).
4. A stack of 2D images is staged under `.labzarr/staging/` (shards carried
   from the installed stack are copied server-side instead of hard-linked), and
   installed by deleting the old version, copying every key but `zarr.json`
   server-side, checking every shard present at the final path, and copying the
   staged `zarr.json` (with `complete`) last.
5. The root's index is written last, once the run's rows are final: a reader
   that goes through the index and checks `complete` sees only whole arrays of
   a finished run.

What is weaker than on a filesystem: while a rerun replaces an array, that
array is missing or partial (a filesystem swaps it in one rename), so a store
should not be read while it is being converted. The lock is an object created
with a conditional PUT (`If-None-Match: *`), which S3 and moto honour: a second
run is refused at once. Nothing drops it when its holder dies, so a lock left
by a dead run on this host is taken over (the pid is checked), but one left by
a run on another host must be deleted by hand (the error names the object).
Sweeping leftovers (staged stacks) works by listing `.labzarr/staging/`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec
import zarr
import zarr.storage
from fsspec.spec import AbstractFileSystem

from .errors import UsageError

__all__ = ["StoreRef", "UrlStore", "check_reachable", "copy_object", "copy_tree", "is_url", "remove_tree",
           "transport_errors",
           "sorted_glob", "store_ref", "tree_bytes", "view_args", "write_object", "zarr_store"]

log = logging.getLogger(__name__)


def transport_errors(store: object) -> tuple[type[BaseException], ...]:
    """What a failed request to `store` raises: OSError for a folder; for a URL store also botocore's and
    aiohttp's own errors (a refused connection is not an OSError there), where those packages are installed."""
    if not isinstance(store, UrlStore):
        return (OSError,)
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


def is_url(text: str) -> bool:
    """True for an fsspec URL with a protocol other than `file` (`s3://bucket/x.zarr`)."""
    head, sep, _ = text.partition("://")
    return bool(sep) and head.isidentifier() and head != "file"


@dataclass(frozen=True, slots=True, order=True)
class UrlStore:
    """A store (or a key prefix inside one) at an fsspec URL, with the `storage_options` fsspec gets.

    It answers the few `pathlib.Path` questions the store code asks (`/`, `name`, `exists`, `read_bytes`,
    `iterdir`, ...) with object-store calls, so code that only reads and writes whole objects works on
    both; what needs rename, links, fsync or flock is done by this module's own functions instead.
    """

    url: str
    options: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

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
        """The fsspec filesystem; listings are never cached (other processes write the same store)."""
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

    def zarr(self, *, read_only: bool = False) -> zarr.storage.FsspecStore:
        """This prefix as a zarr store."""
        return zarr.storage.FsspecStore.from_url(self.url, storage_options={"use_listings_cache": False,
                                                                            **self.options},
                                                 read_only=read_only)


StoreRef = Path | UrlStore


def store_ref(text: str, options: Mapping[str, Any] | None = None) -> StoreRef:
    """A URL store for an fsspec URL (trailing `/` dropped), else the local path (`file://` stripped)."""
    if is_url(text):
        return UrlStore(text.rstrip("/"), dict(options or {}))
    return Path(text.removeprefix("file://"))


def view_args(store: StoreRef) -> tuple[Path | str, dict[str, Any]]:
    """`open_store`'s arguments for `store`: its path or URL, and its storage options."""
    if isinstance(store, UrlStore):
        return store.url, dict(store.options)
    return store, {}


def zarr_store(where: StoreRef, *, read_only: bool = False) -> zarr.storage.StoreLike:
    """`where` as a zarr store: a `LocalStore` for a folder, an `FsspecStore` for a URL."""
    if isinstance(where, UrlStore):
        return where.zarr(read_only=read_only)
    return zarr.storage.LocalStore(where, read_only=read_only)


def sorted_glob(folder: StoreRef, pattern: str) -> list[StoreRef]:
    """`folder`'s entries matching `pattern`, ordered by name (a directory lists in no set order)."""
    # Spelled per kind so each glob keeps its own element type (Path, UrlStore).
    found: list[StoreRef] = list(folder.glob(pattern)) if isinstance(folder, Path) else list(folder.glob(pattern))
    return sorted(found, key=lambda p: p.name)


def remove_tree(where: UrlStore) -> None:
    """Delete every key under `where`, its `zarr.json` first so the node leaves the hierarchy at once."""
    fs = where.fs()
    try:
        fs.rm_file(f"{where.path}/zarr.json")
    except FileNotFoundError:
        pass
    keys = sorted(where.keys())
    if keys:
        fs.rm([f"{where.path}/{k}" for k in keys])


def copy_object(src: UrlStore, dest: UrlStore) -> None:
    """Copy one object server-side (where the store supports it, as S3 does)."""
    src.fs().copy(src.path, dest.path)


def copy_tree(src: UrlStore, dest: UrlStore, *, skip: frozenset[str] = frozenset()) -> None:
    """Copy every key under `src` (but those in `skip`) to the same key under `dest`, server-side."""
    fs = src.fs()
    for key in sorted(src.keys() - skip):
        fs.copy(f"{src.path}/{key}", f"{dest.path}/{key}")


def write_object(path: StoreRef, blob: bytes) -> None:
    """Write one whole object: a single PUT is atomic on an object store (a file goes through a temp + rename)."""
    if isinstance(path, UrlStore):
        path.write_bytes(blob)
        return
    from .manifest import atomic_write  # manifest.py is the filesystem's atomic writer

    atomic_write(path, blob)


def tree_bytes(where: StoreRef) -> int:
    """Bytes stored under `where` (a folder's files, or a prefix's objects)."""
    if isinstance(where, UrlStore):
        try:
            return int(where.fs().du(where.path, total=True))
        except FileNotFoundError:
            return 0
    if where.is_file():
        return where.stat().st_size
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


# The reachability probe gives up quickly: botocore's and s3fs's retries would take ~10 s on a dead endpoint.
_PROBE_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    "s3": {"config_kwargs": {"retries": {"max_attempts": 2}, "connect_timeout": 10}},
}


def check_reachable(store: UrlStore) -> None:
    """Raise one `UsageError` unless `store`'s bucket (or the URL's first component) can be listed."""
    bucket = store.path.split("/", 1)[0]
    try:
        fs = fsspec.filesystem(store.protocol, **{"skip_instance_cache": True, "use_listings_cache": False,
                                                  **_PROBE_OPTIONS.get(store.protocol, {}), **store.options})
        fs.ls(bucket, detail=False)
    except ImportError as exc:
        raise UsageError(f"{store}: no fsspec implementation for {store.protocol}:// ({exc})",
                         "install it, e.g. pip install 'labzarr[s3]' for s3://") from exc
    except FileNotFoundError as exc:
        raise UsageError(f"{store}: bucket {bucket!r} not found ({exc})",
                         "create the bucket first, or fix [delivery] store") from exc
    except PermissionError as exc:
        raise UsageError(f"{store}: access denied ({exc})",
                         "check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or [store] "
                         "storage_options)") from exc
    except Exception as exc:  # noqa: BLE001 - botocore's connection errors share no base class with OSError
        raise UsageError(f"{store}: cannot reach the object store ({type(exc).__name__}: {exc})",
                         "check the endpoint (AWS_ENDPOINT_URL, or [store] storage_options endpoint_url) "
                         "and the network") from exc
