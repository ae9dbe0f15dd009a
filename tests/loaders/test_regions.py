from __future__ import annotations

import numpy as np
import pytest

from labzarr.loaders._regions import grid_axis, grid_origins, random_origin, region


@pytest.mark.parametrize(("n", "p", "overlap"), [(10, 4, 0), (10, 4, 1), (10, 4, 3), (4, 4, 0), (3, 8, 0),
                                                 (300, 64, 16), (65, 64, 0), (1, 1, 0)])
def test_grid_axis_covers_the_axis_inside_it(n: int, p: int, overlap: int) -> None:
    starts = grid_axis(n, p, overlap)
    covered = np.zeros(n, int)
    for s in starts:
        covered[max(s, 0):min(s + p, n)] += 1
        if n >= p:
            assert 0 <= s <= n - p  # tiles stay inside an item at least as long as the patch
    assert (covered >= 1).all()
    steps = np.diff(starts)
    assert (steps <= p - overlap).all() and (steps > 0).all()


def test_grid_origins_are_the_product_of_the_axes() -> None:
    origins = grid_origins((10, 3), (4, 4), (0, 0))
    assert origins == [(x, y) for x in grid_axis(10, 4, 0) for y in grid_axis(3, 4, 0)]


def test_region_names_the_padding() -> None:
    r = region((5, 10), (-2, 7), (8, 4))
    assert r.source == (slice(0, 5), slice(7, 10))
    assert r.valid == (slice(2, 7), slice(0, 3))
    assert r.padded
    inside = region((5, 10), (0, 2), (5, 4))
    assert not inside.padded and inside.valid == (slice(0, 5), slice(0, 4))


def test_random_origin_keeps_the_patch_inside_or_centres_it() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        o = random_origin(rng, (70, 64, 10), (64, 64, 16))
        assert 0 <= o[0] <= 6 and o[1] == 0 and o[2] == -3
