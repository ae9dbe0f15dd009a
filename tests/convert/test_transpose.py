"""The compiled tile transposition (`convert/write/transpose.py`) against numpy's copy: the same bytes for every
flip, axis order and element size it takes, and what it does not take left to numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from labzarr.convert.write.transpose import fits, tile_edge, transposed
from labzarr.convert.write.writer import slab_copy_into

DTYPES = ["u1", "<i2", ">i2", "<f4", "f8", "c8", "?"]


def _buffers(dtype: str, shape: tuple[int, ...]) -> list[np.ndarray]:
    """The same values in memory in several axis orders (x fastest, as a slab arrives, among them)."""
    values = np.random.default_rng(5).integers(-3000, 3000, shape).astype(dtype)
    return [np.ascontiguousarray(values.transpose(order)).transpose(np.argsort(order))
            for order in ((0, 1, 2, 3), (3, 2, 1, 0), (0, 3, 2, 1), (2, 0, 3, 1))]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_flip_and_order_copies_as_numpy(dtype: str) -> None:
    edge = tile_edge(np.dtype(dtype).itemsize)
    shape = (3, 2 * edge, 37, 2 * edge)  # y need not be a multiple of the tile
    used = 0
    for buffer in _buffers(dtype, (3, 2 * edge + 5, 40, 2 * edge + 3)):
        for flips in itertools.product((1, -1), repeat=4):
            view = buffer[tuple(slice(None, None, f) for f in flips)][:, 3:3 + shape[1], 1:38, 2:2 + shape[3]]
            out = np.empty(shape, view.dtype)
            got = slab_copy_into(view, out)
            used += fits(view, out)
            assert got is out and out.tobytes() == np.ascontiguousarray(view).tobytes()
    assert used == 2 * 16  # the two orders with x contiguous in memory (the last two), every flip


def test_what_does_not_fit_is_refused_and_copied_by_numpy() -> None:
    buffer = _buffers("<i2", (1, 70, 40, 70))[1]  # x fastest
    view = buffer[:, :64, :, :64]
    cases = {"z not a multiple of the tile": (view[..., :40], np.empty((1, 64, 40, 40), "<i2")),
             "a cast": (view, np.empty(view.shape, "<f4")),
             "x not contiguous": (buffer[:, :64:2, :, :64], np.empty((1, 32, 40, 64), "<i2")),
             "out not C-contiguous": (view, np.empty(view.shape[::-1], "<i2").T)}
    for name, (source, out) in cases.items():
        out[...] = 7
        assert not fits(source, out) and not transposed(source, out), name
        assert (out == 7).all(), name  # left untouched
        slab_copy_into(source, out)
        np.testing.assert_array_equal(out, source, err_msg=name)
