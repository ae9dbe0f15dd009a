"""Writing the zarr v3 store: one array per ok volume, codecs from the spec, `complete` last.

Invariant: an array whose `complete` attr equals its source sha256 holds the
whole converted item; any other array is unfinished and is redone or removed.
The root's `labzarr` attr is the store's own index of ok items, written once
the run's rows are final, so a Dataset needs nothing but the store's path.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs
from zarr.abc.codec import BytesBytesCodec

from labzarr.readers import MemorySource, Volume

from .chunks import plan_chunks
from .manifest import Row
from .spec import StoreSpec
from .writer import AXES, VolumeWriter

__all__ = ["FORMAT_VERSION", "INDEX_KEY", "array_paths", "codecs", "open_root", "remove_array",
           "set_array_labels", "write_index", "write_volume"]

FORMAT_VERSION = 1
INDEX_KEY = "labzarr"


def codecs(spec: StoreSpec) -> tuple[BytesBytesCodec, ...]:
    """The bytes-to-bytes codecs for `spec`: the compressor, then crc32c over the compressed bytes."""
    out: list[BytesBytesCodec] = []
    if spec.compressor == "zstd":
        out.append(zarr.codecs.ZstdCodec(level=spec.level))
    elif spec.compressor in ("blosc-zstd", "blosc-lz4"):
        out.append(zarr.codecs.BloscCodec(cname=spec.compressor.removeprefix("blosc-"), clevel=spec.level,
                                          shuffle=zarr.codecs.BloscShuffle.shuffle))
    if spec.checksum:
        out.append(zarr.codecs.Crc32cCodec())
    return tuple(out)


def open_root(store: Path, *, mode: str = "a") -> zarr.Group:
    """Open (or create) the store's root group."""
    return zarr.open_group(zarr.storage.LocalStore(store), mode=mode, zarr_format=3)  # type: ignore[arg-type]


def write_volume(store: Path, name: str, volume: Volume, *, spec: StoreSpec, attrs: Mapping[str, Any],
                 complete: str) -> None:
    """Write an in-memory `volume` as array `name`, replacing any earlier one; `complete` is set last."""
    source = MemorySource(volume)
    chunks = plan_chunks(volume.data.shape, spec.chunks, voxel_bytes=volume.data.dtype.itemsize, stream_axis=None)
    writer = VolumeWriter(store, name, source.header, chunks=chunks, codecs=codecs(spec), attrs=attrs)
    try:
        for slab in source.slabs(chunks):
            writer.write(slab)
        writer.finish(complete=complete)
    finally:
        writer.close()


def array_paths(store: Path, group: str) -> list[str]:
    """Paths (`group/name`) of the arrays under `group`, sorted; empty when there is none."""
    root = open_root(store)
    if group not in root:
        return []
    sub = root[group]
    assert isinstance(sub, zarr.Group)
    return sorted(f"{group}/{name}" for name, _ in sub.arrays())


def remove_array(store: Path, path: str) -> None:
    """Delete one array and its chunks."""
    shutil.rmtree(store / path, ignore_errors=True)


def set_array_labels(store: str, items: Sequence[tuple[str, Mapping[str, str]]]) -> int:
    """Set each array's `labels` attr (array path, labels) where it differs; returns how many changed.

    Labels are joined once the run's rows are final, so they are written after `complete`; a
    rerun with an edited workbook updates them here even for arrays it did not convert again.
    """
    changed = 0
    for path, labels in items:
        arr = zarr.open_array(zarr.storage.LocalStore(Path(store)), path=path, mode="r+", zarr_format=3)
        if arr.attrs.get("labels") != dict(labels):
            arr.attrs["labels"] = dict(labels)
            changed += 1
    return changed


def write_index(store: Path, *, rows: Sequence[Row], root_attrs: Mapping[str, Any]) -> None:
    """Record the ok rows, in manifest order, as the store's own index (root attr `labzarr`)."""
    items = [
        {
            "item_id": r.item_id, "array": r.array, "slot": r.slot, "kind": r.kind, "source": r.source,
            "shape": list(r.shape), "dtype": r.dtype, "spacing": list(r.spacing), "labels": dict(r.labels),
        }
        for r in rows if r.status == "ok"
    ]
    root = open_root(store)
    root.attrs[INDEX_KEY] = {**root_attrs, "format_version": FORMAT_VERSION, "items": items}
