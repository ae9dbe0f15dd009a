"""A volume's zarr nodes (`zarr.json`), written by this process in one file write each, not through zarr's API.

Why by hand: a zarr-python call from synchronous code is a round trip to zarr's event-loop thread, and on a dask
worker, whose own event loop and threads compete for the GIL, that round trip, not the write, is most of what a
metadata write costs (`bench/dicom.py`'s per-series rows; docs/benchmarks.md has the figures). An item writes
three documents (its array's at creation, its array's again with `complete`, its image group's), so on a delivery
of many small series they were the largest share of each item's time.

What is not by hand: the documents. They are zarr's own metadata records (`ArrayV3Metadata`, `GroupMetadata`),
encoded by their own `to_buffer_dict` (which follows zarr's `json_indent` setting, as `compact_metadata` sets
it), and an array's codecs and chunk grid are those `zarr.create_array` builds for the same arguments, built
once per layout in memory. tests/convert/test_nodes.py checks each document against the one zarr writes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import zarr
from zarr.core.array_spec import ArrayConfigParams
from zarr.core.buffer import default_buffer_prototype
from zarr.core.group import GroupMetadata
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import MemoryStore, StorePath

from labzarr.store import Location

__all__ = ["create_array", "create_group", "update_attributes"]

ZARR_JSON = "zarr.json"


def create_array(folder: Location, *, shape: Sequence[int], dtype: np.dtype[Any], chunks: Sequence[int],
                 shards: Sequence[int] | None, codecs: Sequence[Any], dimension_names: Sequence[str] | None,
                 attributes: Mapping[str, Any], config: ArrayConfigParams) -> zarr.Array[Any]:
    """Write the node of a new, empty array at `folder` (zero fill value) and return it open for writing, as
    `zarr.create_array(folder.zarr(), ...)` with these arguments would; `folder` is assumed fresh."""
    layout = _layout(np.dtype(dtype).str, tuple(int(c) for c in chunks),
                     None if shards is None else tuple(int(s) for s in shards), _Codecs(tuple(codecs)))
    meta = replace(layout, shape=tuple(int(n) for n in shape), attributes=dict(attributes),
                   dimension_names=None if dimension_names is None else tuple(dimension_names))
    folder.mkdir(parents=True, exist_ok=True)
    _put(folder, _array_doc(meta))
    return zarr.Array(zarr.AsyncArray(meta, StorePath(folder.zarr()), config=config))


def update_attributes(folder: Location, array: zarr.Array[Any], attrs: Mapping[str, Any]) -> None:
    """Merge `attrs` into the attributes of `array` (whose node lies at `folder`) and rewrite its node, as
    `array.update_attributes(attrs)` does (the open array sees them too)."""
    meta = array.metadata
    assert isinstance(meta, ArrayV3Metadata)
    meta.attributes.update(attrs)  # in place, as zarr's own update does: the frozen record's dict is the array's
    _put(folder, _array_doc(meta))


def create_group(folder: Location, attributes: Mapping[str, Any], *, atomic: bool = False) -> None:
    """Write the node of a group with `attributes` at `folder`, as `zarr.create_group(folder.zarr(), ...)` (or
    `attrs.put` on an existing group) would; `atomic`: through a temporary file, for a node readers may be
    reading (a group of the published store, not of a staging folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    # zarr's own document but for the attributes, which `GroupMetadata.to_dict` deep-copies (`dataclasses.asdict`):
    # for a store's statistics, every item's histograms, that copy took far longer than encoding them.
    doc = {**GroupMetadata(zarr_format=3).to_dict(), "attributes": attributes}
    _put(folder, json.dumps(doc, indent=zarr.config.get("json_indent"), allow_nan=True).encode(), atomic=atomic)


def _array_doc(meta: ArrayV3Metadata) -> bytes:
    return meta.to_buffer_dict(default_buffer_prototype())[ZARR_JSON].to_bytes()


def _put(folder: Location, data: bytes, *, atomic: bool = False) -> None:
    if atomic:
        (folder / ZARR_JSON).write_atomic(data)
    else:
        (folder / ZARR_JSON).write_bytes(data)


@dataclass(frozen=True)
class _Codecs:
    """Codecs as a cache key: zarr's codecs are dataclasses, some holding a set, so not hashable themselves;
    their repr names every field."""

    codecs: tuple[Any, ...] = field(compare=False)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", repr(self.codecs))


@functools.lru_cache(maxsize=64)
def _layout(dtype: str, chunks: tuple[int, ...], shards: tuple[int, ...] | None, codecs: _Codecs) -> ArrayV3Metadata:
    """The metadata zarr gives an array of this layout (shape and attributes to be replaced): its chunk grid and
    its codecs, each evolved to the dtype and the chunk shape, as `zarr.create_array` builds them."""
    array = zarr.create_array(MemoryStore(), shape=shards or chunks, dtype=dtype, chunks=chunks, shards=shards,
                              compressors=codecs.codecs, fill_value=np.zeros((), dtype=dtype).item())
    meta = array.metadata
    assert isinstance(meta, ArrayV3Metadata)
    return meta
