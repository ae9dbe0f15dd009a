"""The store layer: every byte of a store. `location/` (where it lives: folder, zip, URL), `format/` (the
index, `zarr.json` nodes, NGFF, statistics, the record of stored files), `chunks/` (codec chains and the shard
layout, each both ways), and `read` (the one read path every process uses) with `view` on top.

Depends on zarr, numcodecs, numpy and fsspec only (never torch, dask, readers or convert). Names are imported
on first use (PEP 562), so a module that needs only a store's location (the spec, the pure planner) does not
load zarr or fsspec.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aggregate import ClassFrequency, DatasetStats, Geometry, IntensityStats, Spread, dataset_stats
    from .aggregate_table import table_stats
    from .format.annotations import ANNOTATIONS, Annotation
    from .format.index import (
        COMPLETE,
        CONTENT_SHA256,
        FORMAT_VERSION,
        INDEX,
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
    from .format.stats import ChannelStats, Histogram, ItemStats
    from .format.stats_table import RecordTable
    from .location import (
        Folder,
        Location,
        ReadOnlyStore,
        Transport,
        UrlStore,
        Zipped,
        as_location,
        atomic_write,
        is_url,
        open_transport,
        sorted_glob,
        store_location,
        url_errors,
        zarr_store_for,
    )
    from .read import ArrayReader, ChecksumError, StoreReader, UncheckedStoreWarning
    from .view import StoreView, open_store, read_index, read_statistics, read_statistics_table

__all__ = [
    "ANNOTATIONS",
    "COMPLETE",
    "CONTENT_SHA256",
    "FORMAT_VERSION",
    "INDEX",
    "INDEX_KEY",
    "STATE",
    "STATISTICS",
    "STATS",
    "Annotation",
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
    "ReadOnlyStore",
    "RecordTable",
    "StoreIndex",
    "StoreReader",
    "Spread",
    "StoreView",
    "Transport",
    "UncheckedStoreWarning",
    "UrlStore",
    "VolumeAttrs",
    "Zipped",
    "as_location",
    "atomic_write",
    "class_names",
    "dataset_stats",
    "is_url",
    "open_store",
    "open_transport",
    "read_index",
    "read_statistics",
    "read_statistics_table",
    "sorted_glob",
    "stack_slots",
    "store_location",
    "table_stats",
    "url_errors",
    "zarr_store_for",
]

_WHERE = {
    "ANNOTATIONS": "format.annotations",
    "Annotation": "format.annotations",
    "ArrayReader": "read",
    "COMPLETE": "format.index",
    "CONTENT_SHA256": "format.index",
    "ChannelStats": "format.stats",
    "ChecksumError": "read",
    "ClassFrequency": "aggregate",
    "ClassInfo": "format.index",
    "DatasetStats": "aggregate",
    "FORMAT_VERSION": "format.index",
    "Folder": "location",
    "FormatError": "format.index",
    "Geometry": "aggregate",
    "Histogram": "format.stats",
    "INDEX": "format.index",
    "INDEX_KEY": "format.index",
    "IndexItem": "format.index",
    "IntensityStats": "aggregate",
    "ItemStats": "format.stats",
    "Location": "location",
    "ReadOnlyStore": "location",
    "RecordTable": "format.stats_table",
    "STATE": "format.index",
    "STATISTICS": "format.index",
    "STATS": "format.index",
    "Spread": "aggregate",
    "StoreIndex": "format.index",
    "StoreReader": "read",
    "StoreView": "view",
    "Transport": "location",
    "UncheckedStoreWarning": "read",
    "UrlStore": "location",
    "VolumeAttrs": "format.index",
    "Zipped": "location",
    "as_location": "location",
    "atomic_write": "location",
    "class_names": "format.index",
    "dataset_stats": "aggregate",
    "is_url": "location",
    "open_store": "view",
    "open_transport": "location",
    "read_index": "view",
    "read_statistics": "view",
    "read_statistics_table": "view",
    "sorted_glob": "location",
    "stack_slots": "format.index",
    "store_location": "location",
    "table_stats": "aggregate_table",
    "url_errors": "location",
    "zarr_store_for": "location",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
