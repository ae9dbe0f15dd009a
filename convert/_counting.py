"""Counting 8- and 16-bit codes into a dense histogram: what `np.bincount` adds, by the cheaper of two ways.

Why not always `np.bincount`: it first copies its input to intp (8 bytes a value) and then counts, and on
CT-like data (long runs of one air value) it is several times slower than a plain compiled loop over the codes
in place; the statistics group of `make bench` (bench/convert.py) measures both on the same slab, and
docs/benchmarks.md keeps the figures. Statistics are taken from every slab a worker writes, so for a large
volume this loop is on the conversion's critical path.

Why not always the compiled loop: it is compiled by numba, and importing numba and loading the cached loop
costs a process 0.4-0.5 CPU-s, as much as the loop saves on some 2^28 to 2^29 16-bit values (docs/benchmarks.md,
"Statistics on and off"). So `counter(n)` hands out numpy's bincount for an item (a whole array) of under
`COMPILED_FROM` values and the compiled loop from there on, importing numba at the first such item only: a
delivery of small series (the dcm2niix QA corpora's are all under 2^24 values) never loads it, and one of large
volumes loads it at the first, where the volumes after it repay it. A worker that has loaded it counts every
slab with it.

The loop is compiled for exactly two signatures (uint8 and uint16 codes, any strides, into a C-contiguous
int64 array), cached on disk beside this file when that is writable; `_compiled` keeps the one loaded copy a
process needs (a memo of a pure function, not configuration). Both ways are tested value for value against
`np.bincount` (tests/convert/test_counting.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["COMPILED_FROM", "Count", "bincount_into", "count_into", "counter"]

COMPILED_FROM = 1 << 26  # values in one item (a 512x512x256 volume) from which the compiled loop is loaded

Count = Callable[[npt.NDArray[Any], npt.NDArray[np.int64]], None]


def counter(values: int) -> Count:
    """How to count the codes of an item of `values` codes in all: `bincount_into` below `COMPILED_FROM`, else
    `count_into`; and `count_into` whatever the size once this process has loaded the loop (the cost is then
    already paid)."""
    return count_into if values >= COMPILED_FROM or _compiled.cache_info().currsize else bincount_into


def bincount_into(codes: npt.NDArray[Any], dense: npt.NDArray[np.int64]) -> None:
    """`count_into` by numpy's bincount (an intp copy of `codes`, then the count)."""
    bins = _check(codes, dense)
    dense[:bins] += np.bincount(codes.reshape(-1), minlength=bins)


def count_into(codes: npt.NDArray[Any], dense: npt.NDArray[np.int64]) -> None:
    """Add the number of times each code occurs in the 1-D `codes` to `dense[code]` (len(dense) > every code),
    by the compiled loop (numba is imported on the first call)."""
    _check(codes, dense)
    if not codes.dtype.isnative:  # count values, as bincount does, not their swapped bytes
        codes = codes.astype(codes.dtype.newbyteorder("="))
    _compiled()(codes, dense)


def _check(codes: npt.NDArray[Any], dense: npt.NDArray[np.int64]) -> int:
    """The bins `codes` can fall in; TypeError for what would be counted out of `dense`'s bounds."""
    if codes.ndim != 1 or codes.dtype.kind != "u" or codes.dtype.itemsize > 2:
        raise TypeError(f"count_into takes 1-D uint8 or uint16 codes, not {codes.ndim}-D {codes.dtype}")
    bins = 1 << (8 * codes.dtype.itemsize)
    if dense.dtype != np.int64 or not dense.flags.c_contiguous or len(dense) < bins:
        raise TypeError(f"count_into counts into a C-contiguous int64 array of {bins} bins, not {dense.dtype} "
                        f"of {len(dense)}")
    return bins


@functools.cache
def _compiled() -> Count:
    import numba

    @numba.njit(["void(uint8[:], int64[::1])", "void(uint16[:], int64[::1])"], nogil=True, cache=True)
    def count(codes: Any, dense: Any) -> None:  # pragma: no cover - compiled
        for i in range(codes.size):
            dense[codes[i]] += 1

    loop: Count = count
    return loop
