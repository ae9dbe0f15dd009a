"""A chunk's C-order copy straight out of a reoriented slab, by a compiled transposition of square tiles in
vector registers: what the shard writer's `gather_copy` + `copy_into` do with numpy, in one pass.

Why hand-written: a slab arrives x fastest in memory and the store wants z fastest, so every chunk is a 3-D
transposition. numpy copies it element by element with one side strided, in two passes (a memory-order gather,
then the transposition from cache: about 1.2 GB per CPU-s together). Here each N x N tile of a chunk's (z, x)
plane (N x-runs of N voxels, one per z) is loaded as N vectors, transposed by log2(N) rounds of two-vector
shuffles (LLVM `shufflevector`, emitted through llvmlite in a numba intrinsic: numba has no shuffle of its own,
and a plain numba loop over the same tiles stays scalar) and stored as N z-runs of the chunk: about 1.7x the
rate of numpy's two passes (`python bench/convert.py --copy`, the group "the same slab's 32^3 chunks made
C-contiguous"; the figures are in docs/benchmarks.md). tests/convert/test_transpose.py checks it against
numpy's copy for every flip, axis order and element size.

What it takes (`fits`): a 4-D (c, x, y, z) view whose x axis is contiguous (stride +-itemsize: x flipped is read
forwards and its rows written backwards), into a C-contiguous `out` of its shape and dtype, x and z multiples of
the tile edge; the writer copies anything else (an edge chunk, a cast, another memory order) with numpy.

When (`wanted`): numba costs a process 0.4-0.5 CPU-s to import, so, as the statistics' counting loop
(convert/_counting.py), the kernel is loaded for an item of at least `COMPILED_FROM` voxels, and from then on
used for every item in that process. The kernel is `_tiles.py`, imported at the first call (it imports numba);
its four element widths are compiled once and cached on disk beside it when that is writable.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from labzarr.convert._counting import COMPILED_FROM

__all__ = ["MAX_EDGE", "VECTOR_BYTES", "fits", "tile_edge", "transposed", "wanted"]

VECTOR_BYTES = 64  # one tile row per vector register (AVX-512; LLVM splits it where registers are narrower)
MAX_EDGE = 32  # a tile of 32 x 32 keeps its rows in the 32 vector registers AVX-512 has


_RAW = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}  # each width is copied as its bits


def tile_edge(itemsize: int) -> int:
    """The tile's edge, in voxels, for elements of `itemsize` bytes."""
    return min(MAX_EDGE, VECTOR_BYTES // itemsize)


def wanted(values: int) -> bool:
    """Whether an item of `values` voxels is copied by the compiled kernel: a large one, or any once numba is
    loaded in this process (its import then paid)."""
    return values >= COMPILED_FROM or "numba" in sys.modules


def fits(view: npt.NDArray[Any], out: npt.NDArray[Any]) -> bool:
    """Whether `transposed` copies `view` into `out`: same shape and dtype (numbers, copied as their bits)."""
    if view.ndim != 4 or out.shape != view.shape or out.dtype != view.dtype or not out.flags.c_contiguous \
            or view.dtype.kind not in "biufc":
        return False
    size = view.dtype.itemsize
    edge = tile_edge(size) if size in _RAW else 0
    return edge > 0 and abs(view.strides[1]) == size and view.shape[1] % edge == 0 and view.shape[3] % edge == 0


def transposed(view: npt.NDArray[Any], out: npt.NDArray[Any]) -> bool:
    """Where `view` `fits`, copy it into `out` by the compiled kernel (numba is imported at the first call) and
    return True; else return False, `out` untouched. One check per chunk: the shard writer calls this for every
    chunk, and the checks cost about a sixth of the kernel."""
    if not fits(view, out):
        return False
    raw = _RAW[view.dtype.itemsize]
    _kernel()(view.view(raw), out.view(raw))
    return True


@functools.cache
def _kernel() -> Callable[[npt.NDArray[Any], npt.NDArray[Any]], None]:
    from . import _tiles  # imports numba

    kernel: Callable[[npt.NDArray[Any], npt.NDArray[Any]], None] = _tiles.transpose
    return kernel
