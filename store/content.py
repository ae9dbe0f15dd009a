"""The content hash of a stored array, defined over its chunk grid so it can be computed while streaming.

`content_sha256` = sha256 of a line naming the dtype, shape and chunk shape,
followed by the sha256 digest of every chunk's C-order voxels (edge chunks
trimmed to the array), in C order of the chunk grid. Writers hash each chunk as
it is written, in any order; `array_content_sha256` recomputes it from a
stored array (what `verify` compares).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .format.layout import storage_keys

if TYPE_CHECKING:
    import zarr

__all__ = ["ChunkDigests", "array_content_sha256", "block_digests", "chunk_digest", "chunk_grid", "combine_digests",
           "missing_chunk_files", "stored_files"]

ChunkDigests = dict[tuple[int, ...], bytes]


def chunk_grid(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """Chunks per axis."""
    return tuple(-(-int(n) // int(c)) for n, c in zip(shape, chunks))


def chunk_digest(block: npt.NDArray[Any]) -> bytes:
    """sha256 of one chunk's voxels in C order."""
    return hashlib.sha256(np.ascontiguousarray(block).data).digest()


def block_digests(block: npt.NDArray[Any], origin: Sequence[int], chunks: Sequence[int]) -> ChunkDigests:
    """Digests of the whole chunks inside `block`, which starts at `origin` (chunk-aligned) of the array."""
    out: ChunkDigests = {}
    ranges = [range(0, n, c) for n, c in zip(block.shape, chunks)]
    for starts in itertools.product(*ranges):
        sel = tuple(slice(s, s + c) for s, c in zip(starts, chunks))
        index = tuple((o + s) // c for o, s, c in zip(origin, starts, chunks))
        out[index] = chunk_digest(block[sel])
    return out


def combine_digests(shape: Sequence[int], dtype: np.dtype[Any], chunks: Sequence[int],
                    digests: Mapping[tuple[int, ...], bytes]) -> str:
    """The array's content hash from every chunk's digest; raises ValueError when a chunk is missing."""
    grid = chunk_grid(shape, chunks)
    h = hashlib.sha256(f"labzarr-chunks-v1 {np.dtype(dtype).str} {list(shape)} {list(chunks)}\n".encode())
    for index in itertools.product(*(range(n) for n in grid)):
        if index not in digests:
            raise ValueError(f"chunk {index} of grid {grid} was never written")
        h.update(digests[index])
    return h.hexdigest()


def array_content_sha256(arr: zarr.Array[Any]) -> str:
    """Recompute `content_sha256` by reading every chunk of a stored array."""
    shape, chunks = tuple(arr.shape), tuple(arr.chunks)
    digests: ChunkDigests = {}
    for index in itertools.product(*(range(n) for n in chunk_grid(shape, chunks))):
        sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks))
        digests[index] = chunk_digest(np.asarray(arr[sel]))
    return combine_digests(shape, arr.dtype, chunks, digests)


def missing_chunk_files(keys: set[str] | frozenset[str], array: zarr.Array[Any]) -> list[str]:
    """Storage keys (chunk or shard files) of `array` that are not among `keys`, its folder's listing."""
    grid = itertools.product(*(range(n) for n in chunk_grid(array.shape, array.shards or array.chunks)))
    return [key for coords in grid if (key := array.metadata.encode_chunk_key(coords)) not in keys]


def stored_files(meta: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(key, grid coordinates) of every storage file (chunk, or shard when sharded) an array's parsed
    `zarr.json` implies, from its shape, grid and key encoding alone: no zarr array is opened, nothing listed or
    read. Raises `ValueError` (`UnsupportedLayout`) for metadata that does not say them.
    """
    return storage_keys(meta)
