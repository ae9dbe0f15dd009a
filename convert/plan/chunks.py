"""Chunk shapes: a pure function of the array's shape, the patch size, the voxel size and the stream axis.

Invariant: one channel per chunk; spatial chunks are the spec's patch-sized
`chunks` clipped to the extent, except along the axis a source streams in
file order, where the chunk is thinned (by powers of two, down to one plane)
until one chunk-row of the volume -- the slab a worker holds in memory --
fits the slab budget. Writing whole chunk-rows means no chunk is ever read
back, re-encoded, or written by two slabs or two tasks. A sharded array streams
one shard-row per slab, so its shards are thinned along that axis the same way;
their other extents cost no memory, since the writer encodes a shard chunk by
chunk straight from the slab (`write/_shard.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from labzarr.store.content import chunk_grid  # re-exported: the grid is the store format's

__all__ = ["SLAB_BYTES", "chunk_grid", "plan_chunks", "plan_shards", "slab_bytes"]

# Memory one worker holds for the slab being converted (the source's `voxel_bytes`
# per voxel of one chunk-row, or shard-row when sharded), before the writer's few
# chunks in flight. 128 MiB keeps a 1024 x 1024 int16 plane at 64-plane chunks and
# a worker's peak well inside the 256 MB target.
SLAB_BYTES = 128 << 20


def plan_chunks(shape: Sequence[int], patch: Sequence[int], *, voxel_bytes: int, stream_axis: int | None,
                budget: int = SLAB_BYTES) -> tuple[int, ...]:
    """Chunk shape for a (C, *spatial) array: `patch` clipped, thinned along `stream_axis` to fit `budget`.

    A single plane larger than `budget` still gets one-plane chunks: the bound is then one plane.
    """
    chunks = [1, *(max(1, min(int(c), int(n))) for c, n in zip(patch, shape[1:]))]
    if stream_axis is None:
        return tuple(chunks)
    plane = voxel_bytes * math.prod(int(n) for i, n in enumerate(shape) if i not in (0, stream_axis))
    fit = max(1, budget // max(1, plane))
    if chunks[stream_axis] > fit:
        chunks[stream_axis] = 1 << (fit.bit_length() - 1)  # the largest power of two that fits
    return tuple(chunks)


def plan_shards(shape: Sequence[int], chunks: Sequence[int], shards: Sequence[int] | None, *, voxel_bytes: int,
                stream_axis: int | None, budget: int = SLAB_BYTES) -> tuple[int, ...] | None:
    """Shard shape for a (C, *spatial) array of `chunks`, or None (no sharding): the spec's `shards` in whole
    chunks, no more chunks than an axis has, and along `stream_axis` no thicker than a slab `budget` allows.

    A source streams one shard-row per slab and the writer writes whole shards, so no shard is read back to
    be patched (zarr rewrites the whole shard file on a partial write).
    """
    if shards is None:
        return None
    out = [1]
    for s, c, n in zip(shards, chunks[1:], shape[1:]):
        per = max(1, int(s) // int(c))
        out.append(min(per, -(-int(n) // int(c))) * int(c))
    if stream_axis is not None:
        plane = voxel_bytes * math.prod(int(n) for i, n in enumerate(shape) if i not in (0, stream_axis))
        c = int(chunks[stream_axis])
        fit = max(1, budget // max(1, plane * c))  # whole chunks of the stream axis a slab may hold
        out[stream_axis] = min(out[stream_axis] // c, fit) * c
    return tuple(out)


def slab_bytes(shape: Sequence[int], chunks: Sequence[int], *, voxel_bytes: int, stream_axis: int | None) -> int:
    """Bytes of one chunk-row slab (one channel) along `stream_axis`: what a worker holds per slab."""
    if stream_axis is None:
        return voxel_bytes * math.prod(int(n) for n in shape)
    rest = math.prod(int(n) for i, n in enumerate(shape) if i not in (0, stream_axis))
    return voxel_bytes * rest * int(chunks[stream_axis])
