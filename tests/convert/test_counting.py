"""The statistics' two ways of counting against numpy's bincount: the same counts for every code width, stride and
order; and the compiled loop loaded only for a large item."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from labzarr.convert._counting import bincount_into, count_into


def _codes(dtype: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    # runs of one value (CT air), the extremes and uniform noise: every bin edge case bincount meets
    return np.concatenate([np.full(n // 3, top // 7), [0, top, top, 0], rng.integers(0, top, n, endpoint=True)]
                          ).astype(dtype)


@pytest.mark.parametrize("count", [count_into, bincount_into], ids=["compiled", "numpy"])
@pytest.mark.parametrize("dtype", ["u1", "<u2", ">u2"])
@pytest.mark.parametrize("step", [1, 3, -2], ids=["contiguous", "strided", "reversed"])
def test_counts_equal_bincount(count, dtype: str, step: int) -> None:
    codes = _codes(dtype, 50_000, seed=abs(step))[::step]
    bins = 1 << (8 * codes.dtype.itemsize)
    dense = np.arange(bins, dtype=np.int64)  # counts are added to what is there
    count(codes, dense)
    expected = np.arange(bins, dtype=np.int64) + np.bincount(codes.astype(np.int64), minlength=bins)
    np.testing.assert_array_equal(dense, expected)


def test_empty_codes_add_nothing() -> None:
    dense = np.ones(256, np.int64)
    count_into(np.zeros(0, np.uint8), dense)
    assert dense.tolist() == [1] * 256


@pytest.mark.parametrize(("codes", "dense", "match"), [
    (np.zeros((2, 2), np.uint8), np.zeros(256, np.int64), "1-D uint8 or uint16 codes, not 2-D"),
    (np.zeros(4, np.int16), np.zeros(1 << 16, np.int64), "not 1-D int16"),
    (np.zeros(4, np.uint16), np.zeros(256, np.int64), "65536 bins, not int64 of 256"),
    (np.zeros(4, np.uint8), np.zeros(256, np.int32), "256 bins, not int32 of 256"),
    (np.zeros(4, np.uint8), np.zeros(512, np.int64)[::2], "C-contiguous"),
], ids=["2d", "signed", "too-few-bins", "int32-counts", "strided-counts"])
def test_refuses_what_it_would_count_out_of_bounds(codes: np.ndarray, dense: np.ndarray, match: str) -> None:
    for count in (count_into, bincount_into):
        with pytest.raises(TypeError, match=match):
            count(codes, dense)


def test_the_compiled_loop_is_for_large_items_until_a_process_has_loaded_it() -> None:
    """In a fresh process: bincount below COMPILED_FROM values, the loop from there on; once loaded, the loop."""
    code = ("from labzarr.convert._counting import COMPILED_FROM, _compiled, bincount_into, count_into, counter\n"
            "print(counter(COMPILED_FROM - 1) is bincount_into, counter(COMPILED_FROM) is count_into, end=' ')\n"
            "_compiled()\n"
            "print(counter(1) is count_into)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


def test_statistics_of_small_items_never_load_numba() -> None:
    """Loading numba costs a worker more than the loop saves on small items: a run of them never loads it."""
    code = ("import sys, numpy as np\n"
            "from labzarr.convert.intensity import measure\n"
            "s = measure(np.arange(-500, 500, dtype=np.int16).reshape(1, 10, 10, 10))\n"
            "assert s.channels[0].count == 1000 and s.channels[0].min == -500\n"
            "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_whether_the_loop_loads_follows_the_items_size_not_its_slabs() -> None:
    """An item of fewer than COMPILED_FROM values is counted by bincount however its slabs are cut (a small series
    never pays numba's load); one of COMPILED_FROM values loads the loop at its first slab, however small."""
    code = ("import sys\nimport numpy as np\n"
            "from labzarr.convert._counting import COMPILED_FROM\n"
            "from labzarr.convert.intensity import Accumulator\n"
            "slab = np.arange(1 << 16, dtype=np.uint16)\n"
            "Accumulator(np.uint16, values=COMPILED_FROM - 1).add(0, slab)\n"
            "print('numba' in sys.modules, end=' ')\n"
            "Accumulator(np.uint16, values=COMPILED_FROM).add(0, slab)\n"
            "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
