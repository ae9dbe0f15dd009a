"""Counting 8- and 16-bit codes into a dense histogram: `count_into(codes, dense)` adds what `np.bincount` would.

Why not `np.bincount`: it first copies its input to intp (8 bytes a value) and
then counts, and on CT-like data (long runs of one air value) it is several
times slower than a plain compiled loop over the codes in place; the
statistics group of `make bench` (bench/convert.py) measures both on the same
slab, and docs/benchmarks.md keeps the figures. Statistics are taken from every
slab a worker writes, so this loop is on the conversion's critical path.

The loop is compiled by numba for exactly two signatures (uint8 and uint16
codes, any strides, into a C-contiguous int64 array), at import, cached on disk
beside this file when that is writable. It is tested value for value against
`np.bincount` (tests/convert/test_counting.py).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["count_into"]


@numba.njit(["void(uint8[:], int64[::1])", "void(uint16[:], int64[::1])"], nogil=True, cache=True)
def _count(codes: Any, dense: Any) -> None:  # pragma: no cover - compiled; covered through count_into
    for i in range(codes.size):
        dense[codes[i]] += 1


def count_into(codes: npt.NDArray[Any], dense: npt.NDArray[np.int64]) -> None:
    """Add the number of times each code occurs in the 1-D `codes` to `dense[code]` (len(dense) > every code)."""
    if codes.ndim != 1 or codes.dtype.kind != "u" or codes.dtype.itemsize > 2:
        raise TypeError(f"count_into takes 1-D uint8 or uint16 codes, not {codes.ndim}-D {codes.dtype}")
    if dense.dtype != np.int64 or not dense.flags.c_contiguous or len(dense) < (1 << (8 * codes.dtype.itemsize)):
        raise TypeError(f"count_into counts into a C-contiguous int64 array of {1 << (8 * codes.dtype.itemsize)} "
                        f"bins, not {dense.dtype} of {len(dense)}")
    if not codes.dtype.isnative:  # count values, as bincount does, not their swapped bytes
        codes = codes.astype(codes.dtype.newbyteorder("="))
    _count(codes, dense)
