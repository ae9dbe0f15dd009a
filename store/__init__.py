"""The store layer: the store format, where a store lives, and the one read path every process uses.

Depends on zarr, numcodecs, numpy and fsspec only (never torch, dask, readers or convert).
"""

from .folder import Folder, atomic_write
from .format import (
    COMPLETE,
    CONTENT_SHA256,
    FORMAT_VERSION,
    INDEX_KEY,
    ClassInfo,
    FormatError,
    IndexItem,
    StoreIndex,
    VolumeAttrs,
    class_names,
)
from .locate import Location, as_location, sorted_glob
from .location import Transport, is_url, open_transport, store_location, zarr_store_for
from .reader import ArrayReader, ChecksumError, StoreReader
from .url import UrlStore, url_errors
from .view import StoreView, open_store, read_index

__all__ = [
    "COMPLETE",
    "CONTENT_SHA256",
    "FORMAT_VERSION",
    "INDEX_KEY",
    "ArrayReader",
    "ChecksumError",
    "ClassInfo",
    "Folder",
    "FormatError",
    "IndexItem",
    "Location",
    "StoreIndex",
    "StoreReader",
    "StoreView",
    "Transport",
    "UrlStore",
    "VolumeAttrs",
    "as_location",
    "atomic_write",
    "class_names",
    "is_url",
    "open_store",
    "open_transport",
    "read_index",
    "sorted_glob",
    "store_location",
    "url_errors",
    "zarr_store_for",
]
