"""Writing the zarr v3 store: one array per ok volume, codecs from the spec, `complete` last.

Invariant: an array whose `complete` attr equals its source sha256 holds the
whole converted item; any other array is unfinished and is redone or removed.
The root's `labzarr` attr is the store's own index of ok items, written once
the run's rows are final, so a Dataset needs nothing but the store's path.
A stack array (2D images, see `stacks`) is created by the driver before any
task runs; tasks then write only whole slot ranges of the shards they own.
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
from .stacks import Stack
from .writer import VolumeWriter

__all__ = ["FORMAT_VERSION", "INDEX_KEY", "STACK_AXES", "array_paths", "clear_slot", "codecs", "create_stack",
           "finish_stack", "group_paths", "open_root", "remove_array", "set_array_labels", "write_index", "write_slots",
           "write_volume"]

FORMAT_VERSION = 1
INDEX_KEY = "labzarr"
STACK_AXES = ("n", "c", "y", "x")


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


def create_stack(store: Path, stack: Stack, *, spec: StoreSpec) -> None:
    """Create (replacing any earlier one) the empty stack array; done once, by the driver, before any task."""
    zarr.create_array(
        zarr.storage.LocalStore(store),
        name=stack.array,
        shape=stack.shape,
        dtype=stack.plane.dtype,
        chunks=stack.chunks,
        shards=stack.shards,
        compressors=codecs(spec),
        fill_value=np.zeros((), dtype=stack.plane.dtype).item(),
        dimension_names=STACK_AXES,
        attributes={"kind": "stack", "axes": list(STACK_AXES), "per_shard": stack.per_shard},
        overwrite=True,
    )


def _open_stack(store: Path, name: str, *, write_empty_chunks: bool) -> zarr.Array:
    arr = zarr.open_array(zarr.storage.LocalStore(store), path=name, mode="r+", zarr_format=3,
                          config={"write_empty_chunks": write_empty_chunks})
    assert isinstance(arr, zarr.Array)
    return arr


def write_slots(store: Path, name: str, first: int, images: np.ndarray) -> None:
    """Write `images` (n, C, H, W) into slots first..first+n-1 in one call: a whole shard is written, not patched.

    Every chunk is stored, even an all-zero one, so an ok image is never a missing chunk.
    """
    _open_stack(store, name, write_empty_chunks=True)[first : first + len(images)] = images


def clear_slot(store: Path, name: str, slot: int) -> None:
    """Empty one slot of a stack (its chunk is dropped from the shard); the driver does this after all tasks."""
    arr = _open_stack(store, name, write_empty_chunks=False)
    arr[slot : slot + 1] = arr.fill_value


def finish_stack(store: Path, name: str, *, complete: str, ok: int) -> None:
    """Mark a stack written: `complete` is a digest of its ok slots' sources, set last, by the driver."""
    arr = _open_stack(store, name, write_empty_chunks=False)
    arr.attrs.update({"ok": ok, "complete": complete})


def array_paths(store: Path, group: str) -> list[str]:
    """Paths (`group/name`) of the arrays under `group`, sorted; empty when there is none."""
    root = open_root(store)
    if group not in root:
        return []
    sub = root[group]
    assert isinstance(sub, zarr.Group)
    return sorted(f"{group}/{name}" for name, _ in sub.arrays())


def group_paths(store: Path, group: str) -> list[str]:
    """Paths (`group/name`) of the groups under `group` (samples), sorted; empty when there is none."""
    root = open_root(store)
    if group not in root:
        return []
    sub = root[group]
    assert isinstance(sub, zarr.Group)
    return sorted(f"{group}/{name}" for name, _ in sub.groups())


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


def _sample_entry(r: Row) -> dict[str, Any]:
    """A sample's role arrays, mask classes (voxels, rows of `locations`) and its locations array."""
    if not r.roles:
        return {}
    entry: dict[str, Any] = {"roles": {x.role: x.array for x in r.roles}}
    if r.classes:
        entry["classes"] = {str(c.value): {"voxels": c.voxels, "locations": [c.start, c.stop]} for c in r.classes}
        entry["locations"] = f"{r.group}/locations"
    return entry


def write_index(store: Path, *, rows: Sequence[Row], root_attrs: Mapping[str, Any]) -> None:
    """Record the ok rows, in manifest order, as the store's own index (root attr `labzarr`)."""
    items = [
        {
            "item_id": r.item_id, "array": r.array, "slot": r.slot, "kind": r.kind, "source": r.source,
            "shape": list(r.shape), "dtype": r.dtype, "spacing": list(r.spacing), "labels": dict(r.labels),
            **_sample_entry(r),
        }
        for r in rows if r.status == "ok"
    ]
    root = open_root(store)
    root.attrs[INDEX_KEY] = {**root_attrs, "format_version": FORMAT_VERSION, "items": items}
