"""Statistics checks shared by the store and conversion tests: CT-like volumes and numpy as the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labzarr.store import ChannelStats
from labzarr.store.format.stats import bin_edges, ordinals

QS = (0.0, 0.5, 1.0, 25.0, 50.0, 75.0, 99.0, 99.5, 100.0)


def ct_like(seed: int, shape: tuple[int, ...] = (40, 36, 28)) -> np.ndarray:
    """A CT-like int16 volume: air at -1000, soft tissue near 40 HU, bone up to 1900 HU."""
    rng = np.random.default_rng(seed)
    v = np.full(shape, -1000, np.int16)
    body = rng.normal(40, 60, shape).round().astype(np.int16)
    v[4:-4, 4:-4, 2:-2] = body[4:-4, 4:-4, 2:-2]
    x, y, z = (n // 3 for n in shape)
    v[x : x + 4, y : 2 * y, z : 2 * z] = rng.integers(700, 1900, (4, y, z))  # bone
    return v


def bin_low(value: float) -> float:
    return float(bin_edges(ordinals([value]))[0][0])


def bin_high(value: float) -> float:
    return float(bin_edges(ordinals([value]))[1][0])


def assert_matches(s: ChannelStats, values: np.ndarray) -> None:
    """Moments to float64 rounding, extremes exact, every percentile within the bin holding numpy's value."""
    finite = values[np.isfinite(values)].astype(np.float64)
    assert s.count == finite.size
    assert s.min == finite.min() and s.max == finite.max()
    exact_mean = math.fsum(finite.tolist()) / finite.size
    assert s.mean == pytest.approx(exact_mean, rel=1e-14, abs=1e-12)
    assert s.std == pytest.approx(finite.std(), rel=1e-12, abs=1e-12)
    assert s.histogram.total == finite.size
    ordered = np.sort(finite)
    for q, got in zip(QS, s.percentiles(QS)):
        # numpy's linear percentile lies between the order statistics either side of its rank; the histogram's
        # lies in the bin of the rank, so within the bins holding those two values
        rank = q / 100 * (finite.size - 1)
        below, above = float(ordered[math.floor(rank)]), float(ordered[math.ceil(rank)])
        assert bin_low(below) <= got <= bin_high(above), (q, got, float(np.percentile(finite, q)))
