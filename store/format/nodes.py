"""Zarr v3 node documents (`zarr.json`): the one place they are read and written.

Invariant: every caller that needs a node's metadata or attributes (the reader, `verify`, the converter's
bookkeeping) gets it from `read_node`/`parse_node`, a plain dict checked to be a JSON object; every document
labzarr writes itself goes through `create_array`, `update_attributes` or `create_group`, unindented. Nothing
else calls `json.loads` on a `zarr.json` or writes one.

Why the writers write by hand: a zarr-python call from synchronous code is a round trip to zarr's event-loop
thread, and on a dask worker, whose own event loop and threads compete for the GIL, that round trip, not the
write, is most of what a metadata write costs (`bench/dicom.py`'s per-series rows; docs/benchmarks.md has the
figures). What is not by hand: the documents. They are zarr's own metadata records (`ArrayV3Metadata`,
`GroupMetadata`), encoded by their own `to_buffer_dict`, and an array's codecs and chunk grid are those
`zarr.create_array` builds for the same arguments, built once per layout in memory. tests/convert/test_nodes.py
checks each document against the one zarr writes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from . import ZARR_JSON

if TYPE_CHECKING:
    import zarr
    from zarr.core.array_spec import ArrayConfigParams
    from zarr.core.metadata.v3 import ArrayV3Metadata

    from ..location import Location, Transport

# zarr is imported by the writers alone: reading a node document needs only json, and the conversion driver reads
# them (a stack's shards, the store's earlier arrays) before it writes any (docs/benchmarks.md, "Fixed cost").

__all__ = ["ZARR_JSON", "NodeError", "array_nodes", "create_array", "create_group", "node_key", "node_type",
           "parse_node", "read_node", "read_node_at", "update_attributes"]



class NodeError(ValueError):
    """A `zarr.json` that is not a JSON object."""


def node_key(path: str) -> str:
    """The key of the node document of the node at `path` ("" for the root)."""
    path = path.strip("/")
    return f"{path}/{ZARR_JSON}" if path else ZARR_JSON


def parse_node(blob: bytes, where: str) -> dict[str, Any]:
    """The document in `blob` (the bytes of the `zarr.json` at `where`); raises NodeError."""
    try:
        doc = json.loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NodeError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise NodeError(f"{where}: not a JSON object")
    return doc


def read_node(transport: Transport, path: str) -> dict[str, Any]:
    """The document of the node at `path`; raises FileNotFoundError (no node there), NodeError."""
    key = node_key(path)
    return parse_node(transport.read(key), f"{transport.where}/{key}")


def array_nodes(transport: Transport, keys: Iterable[str], *, skip: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(path, document) of every array among the node documents in `keys` (a store's listing), by path; nodes
    below an array or below the top-level folder `skip`, and documents that do not parse, are left out."""
    found = sorted(k[: -len(ZARR_JSON)].rstrip("/") for k in keys
                   if k.rsplit("/", 1)[-1] == ZARR_JSON and not (skip and k.startswith(f"{skip}/")))
    out: list[tuple[str, dict[str, Any]]] = []
    arrays: set[str] = set()
    for path in found:
        parts = path.split("/")
        if any("/".join(parts[:n]) in arrays for n in range(1, len(parts))):
            continue  # below an array: its chunk folders hold no nodes of the hierarchy
        try:
            doc = read_node(transport, path)
        except (OSError, NodeError):
            continue
        if doc.get("node_type") == "array":
            out.append((path, doc))
            arrays.add(path)
    return out


def read_node_at(folder: Location) -> dict[str, Any]:
    """The document of the node at `folder` (a location); raises FileNotFoundError (none there), NodeError."""
    return parse_node((folder / ZARR_JSON).read_bytes(), f"{folder}/{ZARR_JSON}")


def node_type(folder: Location) -> str | None:
    """What the zarr node at `folder` is ("array", "group"); None where there is none, or it does not parse."""
    try:
        found = read_node_at(folder).get("node_type")
    except (OSError, NodeError):
        return None
    return found if isinstance(found, str) else None


def create_array(folder: Location, *, shape: Sequence[int], dtype: np.dtype[Any], chunks: Sequence[int],
                 shards: Sequence[int] | None, codecs: Sequence[Any], dimension_names: Sequence[str] | None,
                 attributes: Mapping[str, Any], config: ArrayConfigParams) -> zarr.Array[Any]:
    """Write the node of a new, empty array at `folder` (zero fill value) and return it open for writing, as
    `zarr.create_array(folder.zarr(), ...)` with these arguments would; `folder` is assumed fresh."""
    import zarr
    from zarr.storage import StorePath

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
    from zarr.core.metadata.v3 import ArrayV3Metadata

    meta = array.metadata
    assert isinstance(meta, ArrayV3Metadata)
    meta.attributes.update(attrs)  # in place, as zarr's own update does: the frozen record's dict is the array's
    _put(folder, _array_doc(meta))


def create_group(folder: Location, attributes: Mapping[str, Any], *, atomic: bool = False) -> None:
    """Write the node of a group with `attributes` at `folder`, as `zarr.create_group(folder.zarr(), ...)` (or
    `attrs.put` on an existing group) would; `atomic`: through a temporary file, for a node readers may be
    reading (a group of the published store, not of a staging folder)."""
    import zarr
    from zarr.core.group import GroupMetadata

    folder.mkdir(parents=True, exist_ok=True)
    # zarr's own document but for the attributes, which `GroupMetadata.to_dict` deep-copies (`dataclasses.asdict`):
    # for a store's statistics, every item's histograms, that copy took far longer than encoding them.
    doc = {**GroupMetadata(zarr_format=3).to_dict(), "attributes": attributes}
    _put(folder, json.dumps(doc, indent=zarr.config.get("json_indent"), allow_nan=True).encode(), atomic=atomic)


def _array_doc(meta: ArrayV3Metadata) -> bytes:
    from zarr.core.buffer import default_buffer_prototype

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
    import zarr
    from zarr.core.metadata.v3 import ArrayV3Metadata
    from zarr.storage import MemoryStore

    array = zarr.create_array(MemoryStore(), shape=shards or chunks, dtype=dtype, chunks=chunks, shards=shards,
                              compressors=codecs.codecs, fill_value=np.zeros((), dtype=dtype).item())
    meta = array.metadata
    assert isinstance(meta, ArrayV3Metadata)
    return meta
