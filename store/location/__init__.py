"""Where a store lives: a local folder, a zip of one, or an fsspec URL (`s3://bucket/x.zarr`).

Invariant: this package is the only place that tells the three apart. `as_location` picks the kind once (a URL
by its protocol, a zip by its content, anything else a folder), and every caller then goes through the verbs all
three kinds answer: reading (`transport()`, `keys`, `sizes`, `array_nodes`, `zarr`), writing and committing
(`write_atomic`, `write_stream`, `move_into_place`, `share_as`, `fsync_tree`, `create_exclusive`, ...; a zip
refuses each with `ReadOnlyStore`), and the few facts a caller must act on (`writes_in_place`: no rename, so
arrays are written where they end up; `remote`: a store on another machine; `lock_kind`: how a run holds it).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .folder import Folder, FolderTransport, atomic_write
from .transport import Range, Transport
from .url import FsspecTransport, UrlStore, is_url, url_errors
from .zipped import ReadOnlyStore, Zipped, ZipTransport

if TYPE_CHECKING:
    import zarr.storage

__all__ = ["Folder", "FolderTransport", "FsspecTransport", "Location", "Range", "ReadOnlyStore", "Transport",
           "UrlStore", "ZipTransport", "Zipped", "as_location", "atomic_write", "is_url", "open_transport",
           "sorted_glob", "store_location", "url_errors", "zarr_store_for"]

Location = Folder | UrlStore | Zipped


def as_location(store: str | os.PathLike[str] | Location, options: Mapping[str, Any] | None = None, *,
                base: Path | None = None) -> Location:
    """The location of `store`: a URL store for an fsspec URL (trailing `/` dropped, with `options`), a zipped
    store for a zip file (recognised by content), else a folder (`file://` stripped; a relative path taken from
    `base` when given; a file that is no zip is a folder too, which reading refuses)."""
    if isinstance(store, Folder | UrlStore | Zipped):
        return store
    text = os.fspath(store)
    if is_url(text):
        return UrlStore(text.rstrip("/"), dict(options or {}))
    path = Path(text.removeprefix("file://"))
    if base is not None and not path.is_absolute():
        path = base / path
    if path.is_file() and zipfile.is_zipfile(path):
        return Zipped(path)
    return Folder(path)


def store_location(store: Path | str) -> Path | str:
    """A URL (kept as text, trailing `/` dropped) or a local path (`file://` stripped): what a reader keeps and
    pickles to name a store."""
    if isinstance(store, str) and is_url(store):
        return store.rstrip("/")
    return Path(str(store).removeprefix("file://"))


def open_transport(store: Path | str | Location, storage_options: Mapping[str, Any] | None = None) -> Transport:
    """The read transport of a store folder, a zipped store or a URL."""
    return as_location(store, storage_options).transport()


def zarr_store_for(store: Path | str | Location,
                   storage_options: Mapping[str, Any] | None = None) -> zarr.storage.StoreLike:
    """A read-only zarr-python store for the same location (the reference reader, and the fallback)."""
    return as_location(store, storage_options).zarr(read_only=True)


def sorted_glob(where: Location, pattern: str) -> list[Location]:
    """`where`'s entries matching `pattern`, ordered by name (a directory lists in no set order)."""
    found: list[Location] = [*where.glob(pattern)]
    return sorted(found, key=lambda p: p.name)
