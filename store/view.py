"""A read-only view of a converted store: its index of ok items, their labels, and their voxels.

Works on a store folder, a zipped store (a zip of the folder's contents) and a
store at an fsspec URL (`s3://bucket/x.zarr`; credentials and endpoint from the
standard environment or `storage_options`). Opening reads only the root's
`zarr.json` and the index's columns (`format/items.py`); voxels are read on demand through the store's one read path
(`reader.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .aggregate import DatasetStats
from .aggregate_table import table_stats
from .format.index import INDEX_KEY, STATISTICS, FormatError, IndexItem, StoreIndex, class_names
from .format.items import IndexItems
from .format.nodes import node_key, parse_node
from .format.stats import ItemStats
from .format.stats_table import RecordTable, read_record_table
from .location import Location, Transport, as_location, open_transport, store_location
from .read import ArrayReader, StoreReader

__all__ = ["StoreView", "open_store", "read_index", "read_statistics", "read_statistics_table"]


def read_index(path: Path | str, storage_options: Mapping[str, Any] | None = None) -> StoreIndex:
    """The store's index, from its root `zarr.json` alone; raises FileNotFoundError, ValueError (`FormatError`),
    and ConnectionError for a URL store that cannot be read (endpoint, credentials)."""
    where = store_location(path)
    if isinstance(where, Path) and not where.exists():
        raise FileNotFoundError(f"{where}: no such store; run `labzarr convert` first")
    transport = open_transport(where, storage_options)
    meta = _root_meta(transport, where)
    return StoreIndex.decode(meta.get("attributes", {}).get(INDEX_KEY), where=str(where), transport=transport)


def read_statistics(path: Path | str, storage_options: Mapping[str, Any] | None = None) -> dict[str, ItemStats]:
    """Every ok item's full statistics record by `IndexItem.key`, from the store's `statistics` table; empty for a
    store converted without statistics. Raises like `read_index`; `FormatError` on a damaged record."""
    table = read_statistics_table(path, storage_options)
    return {} if table is None else table.records()


def read_statistics_table(path: Path | str, storage_options: Mapping[str, Any] | None = None) -> RecordTable | None:
    """The store's `statistics` table, its columns read and no record built (what `table_stats` merges); None for
    a store converted without statistics. Raises like `read_statistics`."""
    where = store_location(path)
    transport = open_transport(where, storage_options)
    try:
        _root_meta(transport, where, STATISTICS)
    except FileNotFoundError:
        return None
    try:
        return read_record_table(transport)
    except (FileNotFoundError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FormatError(f"{where}/{STATISTICS}: damaged statistics ({type(exc).__name__}: {exc}); convert the "
                          "delivery again") from exc


def _root_meta(transport: Transport, where: Path | str, path: str = "") -> dict[str, Any]:
    key = node_key(path)
    try:
        blob = transport.read(key)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{where}: no such store (no {key}); run `labzarr convert` first") from exc
    except PermissionError as exc:
        raise ConnectionError(f"{where}: access denied ({exc}); check the credentials") from exc
    except (OSError, ValueError):
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's connection errors share no base class with OSError
        raise ConnectionError(f"{where}: cannot read the store ({type(exc).__name__}: {exc}); check the endpoint "
                              "(AWS_ENDPOINT_URL or storage_options) and the network") from exc
    return parse_node(blob, f"{where}/{key}")


@dataclass(frozen=True, slots=True)
class StoreView:
    """A read-only view of a store: `items` in manifest order, `attrs` of the root, voxels on demand."""

    path: Path | str  # a folder or zip, or a URL
    index: StoreIndex
    storage_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec's, for a URL store
    reader: StoreReader = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The view's reader (per process: it reopens its files in a child); opening it reads nothing.
        object.__setattr__(self, "reader", StoreReader(self.path, storage_options=self.storage_options,
                                                       slots=self.index.stack_slots()))

    @property
    def attrs(self) -> Mapping[str, Any]:
        """The index's root-level fields: delivery, spec and manifest sha256, tool and format version."""
        return self.index.attrs()

    @property
    def items(self) -> Sequence[IndexItem]:
        """The ok items, in manifest order."""
        return self.index.items

    def array(self, item: IndexItem | str) -> ArrayReader:
        """One array (by IndexItem, or by array path) for region reads: `shape`, `dtype`, `attrs`, `read(sel)`."""
        return self.reader.array(item.array if isinstance(item, IndexItem) else item)

    def read(self, item: IndexItem | str) -> npt.NDArray[Any]:
        """One item's voxels, `(C, *spatial)` (its own image, for an item of a 2D stack); by IndexItem or item_id."""
        if isinstance(item, str):
            item = self.item(item)
        return self.reader.read(item.array, (item.slot,) if item.slot is not None else ())

    def item(self, item_id: str) -> IndexItem:
        """The item with this ID; KeyError names a few known IDs."""
        items = IndexItems.of(self.items)
        codes, ids = items.text("item_id")  # found in the column: no item is built but the one returned
        if item_id in ids:
            at = np.flatnonzero(codes == ids.index(item_id))
            if at.size:
                return items[int(at[0])]
        raise KeyError(f"{self.path}: no ok item {item_id!r}; items are e.g. "
                       f"{', '.join(i.item_id for i in self.items[:5])}")

    def labels(self, name: str) -> list[str]:
        """The label `name` of every item, in index order ('' where missing)."""
        codes, values = IndexItems.of(self.items).label(name)
        return [(values[c] if c >= 0 else "") for c in codes.tolist()]

    def label_names(self) -> tuple[str, ...]:
        """Every label name some item carries, sorted."""
        items = IndexItems.of(self.items)
        return tuple(sorted(k for k in items.label_names if bool(np.any(items.label(k)[0] >= 0))))

    def classes(self, name: str) -> tuple[str, ...]:
        """The distinct values of label `name` in the order PatchDataset numbers them."""
        return class_names(v for v in self.labels(name) if v)

    def stats(self, items: Sequence[IndexItem] | None = None) -> DatasetStats:
        """The statistics of `items` (default: every ok item), merged from their full records: intensity per
        channel, kind and mask class, geometry, class frequencies (`labzarr.store.DatasetStats`)."""
        return table_stats(self.items if items is None else items,
                           read_statistics_table(self.path, self.storage_options))


def open_store(path: Path | str | Location, *, storage_options: Mapping[str, Any] | None = None) -> StoreView:
    """Open a converted store for inspection.

    Parameters
    ----------
    path:
        A store folder (``data/stores/x.zarr``), a zipped store (``x.zarr.zip``) or a URL
        (``s3://bucket/x.zarr``).
    storage_options:
        For a URL: options for its fsspec filesystem (e.g. ``{"endpoint_url": ...}``); credentials and
        endpoint otherwise come from the standard environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``).

    Raises
    ------
    FileNotFoundError
        No store at ``path``.
    ValueError
        ``path`` is a zarr group but not a labzarr store (or one of another format version).
    ConnectionError
        A URL store that cannot be read (endpoint unreachable, access denied).
    """
    located = as_location(path, storage_options)  # a location the converter made keeps its own options
    storage_options = {**located.options, **(storage_options or {})}
    where = store_location(str(located))
    return StoreView(path=where, index=read_index(where, storage_options),
                     storage_options=dict(storage_options or {}))
