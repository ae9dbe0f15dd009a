"""The store layer: the store format, where a store lives, and the one read path every process uses.

Depends on zarr, numcodecs, numpy and fsspec only (never torch, dask, readers or convert). Names are imported
on first use (PEP 562), so a module that needs only a store's location (the spec, the pure planner) does not
load zarr or fsspec.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aggregate import ClassFrequency, DatasetStats, Geometry, IntensityStats, Spread, dataset_stats
    from .folder import Folder, atomic_write
    from .format import (
        COMPLETE,
        CONTENT_SHA256,
        FORMAT_VERSION,
        INDEX_KEY,
        STATE,
        STATISTICS,
        STATS,
        ClassInfo,
        FormatError,
        IndexItem,
        StoreIndex,
        VolumeAttrs,
        class_names,
        stack_slots,
    )
    from .locate import Location, as_location, sorted_glob
    from .location import Transport, is_url, open_transport, store_location, zarr_store_for
    from .reader import ArrayReader, ChecksumError, StoreReader, UncheckedStoreWarning
    from .stats import ChannelStats, Histogram, ItemStats
    from .url import UrlStore, url_errors
    from .view import StoreView, open_store, read_index, read_statistics

__all__ = [
    "COMPLETE",
    "CONTENT_SHA256",
    "FORMAT_VERSION",
    "INDEX_KEY",
    "STATE",
    "STATISTICS",
    "STATS",
    "ArrayReader",
    "ChannelStats",
    "ChecksumError",
    "ClassFrequency",
    "ClassInfo",
    "DatasetStats",
    "Folder",
    "FormatError",
    "Geometry",
    "Histogram",
    "IndexItem",
    "IntensityStats",
    "ItemStats",
    "Location",
    "StoreIndex",
    "StoreReader",
    "Spread",
    "StoreView",
    "Transport",
    "UncheckedStoreWarning",
    "UrlStore",
    "VolumeAttrs",
    "as_location",
    "atomic_write",
    "class_names",
    "dataset_stats",
    "is_url",
    "open_store",
    "open_transport",
    "read_index",
    "read_statistics",
    "sorted_glob",
    "stack_slots",
    "store_location",
    "url_errors",
    "zarr_store_for",
]

_WHERE = {
    "Folder": "folder",
    "atomic_write": "folder",
    "ArrayReader": "reader",
    "ChannelStats": "stats",
    "ClassFrequency": "aggregate",
    "DatasetStats": "aggregate",
    "Geometry": "aggregate",
    "Histogram": "stats",
    "IntensityStats": "aggregate",
    "ItemStats": "stats",
    "STATISTICS": "format",
    "STATS": "format",
    "Spread": "aggregate",
    "dataset_stats": "aggregate",
    "COMPLETE": "format",
    "CONTENT_SHA256": "format",
    "ChecksumError": "reader",
    "ClassInfo": "format",
    "FORMAT_VERSION": "format",
    "FormatError": "format",
    "INDEX_KEY": "format",
    "STATE": "format",
    "IndexItem": "format",
    "Location": "locate",
    "StoreIndex": "format",
    "StoreReader": "reader",
    "StoreView": "view",
    "UncheckedStoreWarning": "reader",
    "stack_slots": "format",
    "Transport": "location",
    "UrlStore": "url",
    "VolumeAttrs": "format",
    "as_location": "locate",
    "class_names": "format",
    "is_url": "location",
    "open_store": "view",
    "open_transport": "location",
    "read_index": "view",
    "read_statistics": "view",
    "sorted_glob": "locate",
    "store_location": "location",
    "url_errors": "url",
    "zarr_store_for": "location",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
