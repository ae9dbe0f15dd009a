"""The downsampled levels of an image (`[store] pyramid`), written from its level 0 once level 0 is whole.

Invariant: level k is computed from level k-1 alone, one write unit (a shard, or a chunk when unsharded) at a
time, each unit from its 2x2x2 source block read chunk-sized piece by piece, so a worker holds one shard of the
new level and a few chunks, never the volume. Every chunk file is written and `content_sha256` recorded, so
`verify` and the cheap damage check treat a level like any array. The levels are written inside the image group
being staged (or, for a sample, into its group before the group's `complete`): they are part of the item, not
an afterthought a crash could leave half-done beside a complete level 0.

An image level is the mean of each block (integers rounded half to even, so the dtype is kept); a label level
is the block's most frequent value, the smallest on a tie: always one of the block's own values, never a class
the mask does not hold (a mean would invent one between two classes). Edge blocks of an odd-sized axis are
partial and use the voxels they have.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from labzarr.store import Location
from labzarr.store.content import ChunkDigests, block_digests, combine_digests
from labzarr.store.format.ngff import Pyramid, level_shape
from labzarr.store.format.written import STORED, StoredFiles

__all__ = ["downsample", "level_layout", "write_levels"]


def downsample(block: npt.NDArray[Any], method: str) -> npt.NDArray[Any]:
    """One level down from `block` (channels first): every spatial axis longer than 1 halved, rounding up."""
    spatial = block.shape[1:]
    out_shape = (block.shape[0], *(-(-n // 2) for n in spatial))
    steps = [(0, 1) if n > 1 else (0,) for n in spatial]
    parts: list[tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]] = []
    for offset in itertools.product(*steps):
        sel = (slice(None), *(slice(o, None, 2 if n > 1 else 1) for o, n in zip(offset, spatial)))
        part = block[sel]
        # An odd axis gives the second offset one voxel fewer: pad it and mark the pad invalid.
        pad = [(0, 0)] + [(0, want - have) for want, have in zip(out_shape[1:], part.shape[1:])]
        valid = np.pad(np.ones(part.shape, dtype=bool), pad)
        parts.append((np.pad(part, pad), valid))
    if method == "mean":
        total = np.zeros(out_shape, dtype=np.float64)
        count = np.zeros(out_shape, dtype=np.int64)
        for part, valid in parts:
            total += np.where(valid, part, 0)
            count += valid
        mean = total / count
        if np.issubdtype(block.dtype, np.integer):
            return np.rint(mean).astype(block.dtype)
        return mean.astype(block.dtype)
    if method != "mode":
        raise ValueError(f"unknown downsampling method {method!r}")
    best = parts[0][0].copy()
    best_count = np.zeros(out_shape, dtype=np.int64)
    for value, valid in parts:
        votes = sum(((other == value) & ok).astype(np.int64) for other, ok in parts)
        # Ties go to the smaller value: a block half background, half class stays background, as in any order.
        better = valid & ((votes > best_count) | ((votes == best_count) & (value < best)))
        best = np.where(better, value, best)
        best_count = np.where(better, votes, best_count)
    return best


def level_layout(shape: Sequence[int], chunks: Sequence[int],
                 shards: Sequence[int] | None) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The (chunks, shards) of a level of `shape`: level 0's, clipped to the level's extent (shards a multiple of
    chunks), so a level's files are as few and as readable as level 0's."""
    level_chunks = tuple(min(int(c), int(n)) for c, n in zip(chunks, shape))
    if shards is None:
        return level_chunks, None
    return level_chunks, tuple(min(int(s), -(-int(n) // c) * c) for s, c, n in zip(shards, level_chunks, shape))


def write_levels(group: Location, level0: zarr.Array[Any], pyramid: Pyramid, *,
                 attrs: dict[str, Any]) -> list[zarr.Array[Any]]:
    """Write levels 1..`pyramid.levels` into the image group at `group` from its `level0` array; returns them.

    Each gets `attrs` (who it belongs to, its `complete`), its level number and its `content_sha256`.
    """
    out: list[zarr.Array[Any]] = []
    src = level0
    for level in range(1, pyramid.levels + 1):
        shape = level_shape(level0.shape, level)
        chunks, shards = level_layout(shape, level0.chunks, level0.shards)
        arr = zarr.create_array(
            (group / str(level)).zarr(), shape=shape, dtype=level0.dtype, chunks=chunks, shards=shards,
            compressors=level0.compressors, fill_value=np.zeros((), dtype=level0.dtype).item(),
            dimension_names=level0.metadata.dimension_names,  # type: ignore[union-attr]
            attributes={**attrs, "level": level}, config={"write_empty_chunks": True})
        digests = _fill(arr, src, pyramid.method)
        record = StoredFiles.of_array(arr, (group / str(level)).sizes())
        missing = record.missing(arr)
        if missing:
            raise RuntimeError(f"{group}/{level}: {len(missing)} chunk file(s) missing after writing, first "
                               f"{missing[0]}")
        arr.update_attributes({"content_sha256": combine_digests(arr.shape, arr.dtype, arr.chunks, digests),
                               STORED: record.encode()})
        out.append(arr)
        src = arr
    return out


def _fill(arr: zarr.Array[Any], src: zarr.Array[Any], method: str) -> ChunkDigests:
    """Write every write unit of `arr` from `src` one level up; returns each chunk's digest."""
    unit = tuple(arr.shards or arr.chunks)
    digests: ChunkDigests = {}
    for coords in itertools.product(*(range(-(-n // u)) for n, u in zip(arr.shape, unit))):
        region = tuple(slice(k * u, min((k + 1) * u, n)) for k, u, n in zip(coords, unit, arr.shape))
        block = np.empty(tuple(r.stop - r.start for r in region), dtype=arr.dtype)
        # Chunk-sized pieces of the unit, each from its own source block: the float temporaries stay small.
        for piece in itertools.product(*(range(r.start, r.stop, c) for r, c in zip(region, arr.chunks))):
            dest = tuple(slice(p, min(p + c, r.stop)) for p, c, r in zip(piece, arr.chunks, region))
            source = (dest[0], *(slice(d.start * 2, min(d.stop * 2, n)) if n > 1 else d
                                 for d, n in zip(dest[1:], src.shape[1:])))
            local = tuple(slice(d.start - r.start, d.stop - r.start) for d, r in zip(dest, region))
            block[local] = downsample(np.asarray(src[source]), method)
        arr[region] = block
        digests.update(block_digests(block, [r.start for r in region], arr.chunks))
    return digests
