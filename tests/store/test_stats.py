"""Intensity statistics against numpy: exact moments, percentiles within one histogram bin, order-free merges."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from labzarr.convert.intensity import BLOCK, Accumulator, ClassAccumulator, measure
from labzarr.readers import Slab
from labzarr.store import ChannelStats, ItemStats
from labzarr.store.format.index import decode_stats, encode_stats

from ..intensities import assert_matches, ct_like


def slabs_of(data: np.ndarray, step: int) -> list[Slab]:
    """`data` (C, X, Y, Z) as slabs along z of `step` planes, as a reader streams it (x fastest in memory)."""
    f = np.asfortranarray(data)
    z = data.shape[-1]
    return [Slab(region=(slice(0, data.shape[0]), slice(0, data.shape[1]), slice(0, data.shape[2]),
                         slice(lo, min(z, lo + step))), data=f[..., lo : lo + step]) for lo in range(0, z, step)]


def accumulate(data: np.ndarray, step: int = 7) -> tuple[ChannelStats, ...]:
    acc = Accumulator(data.dtype)
    for slab in slabs_of(data, step):
        acc.update(slab)
    return acc.result(data.shape[0])


@pytest.mark.parametrize("seed", range(20))
def test_ct_like_volumes_match_numpy(seed: int) -> None:
    v = ct_like(seed)[None]
    (s,) = accumulate(v)
    assert_matches(s, v)
    assert s.integral
    # int16 counts are exact: the mean is the exactly rounded sum over the count
    assert s.mean == math.fsum(v.ravel().tolist()) / v.size


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int32", "float32", "float64"])
def test_every_dtype_matches_numpy(dtype: str) -> None:
    rng = np.random.default_rng(1)
    if np.dtype(dtype).kind == "f":
        data = (rng.lognormal(0, 2, (2, 30, 20, 17)) * rng.choice([-1, 1], (2, 30, 20, 17))).astype(dtype)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(max(info.min, -40000), min(info.max, 70000), (2, 30, 20, 17), endpoint=True).astype(dtype)
    stats = accumulate(data)
    assert len(stats) == 2
    for c in range(2):
        assert_matches(stats[c], data[c])


def test_uint8_percentiles_are_exact() -> None:
    """Every 8-bit value has a bin of its own, so every percentile is numpy's, to the bit."""
    data = np.random.default_rng(2).integers(0, 256, (1, 64, 64, 9), dtype=np.uint8)
    (s,) = accumulate(data)
    qs = (1, 10, 50, 90, 99)
    assert s.percentiles(qs) == tuple(np.percentile(data, qs).tolist())


# Every percentile a summary lists, the extremes, and ranks that fall between two values (numpy interpolates).
_QS = (0.0, 0.5, 1.0, 5.0, 25.0, 33.3, 49.99, 50.0, 50.01, 66.7, 75.0, 95.0, 99.0, 99.5, 100.0)


def _half_zeros(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Zeros for the first half of the voxels (a volume's background), then values of both signs."""
    if np.dtype(dtype).kind == "f":
        rest = rng.lognormal(3, 1, shape) * rng.choice([-1, 1], shape)
    else:
        rest = rng.integers(-200 if np.dtype(dtype).kind == "i" else 1, 256, shape)
    flat = rest.ravel()
    flat[: flat.size // 2 + 1] = 0
    return flat.reshape(shape).astype(dtype)


def _bimodal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Two clusters far apart (background and tissue, say), two thirds of the voxels in the first."""
    v = np.where(rng.random(shape) < 2 / 3, rng.normal(30, 10, shape), rng.normal(200, 20, shape))
    return (v.round() if np.dtype(dtype).kind in "iu" else v).clip(0, 255).astype(dtype)


def _constant(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.full(shape, 37 if np.dtype(dtype).kind in "iu" else 3.7, dtype=dtype)


@pytest.mark.parametrize("dtype", ["int16", "uint8", "int32"])
@pytest.mark.parametrize("make", [_half_zeros, _bimodal, _constant])
def test_integer_percentiles_equal_numpy(make, dtype: str) -> None:
    """Integers of one bin each give numpy's linear percentile exactly, ranks between two values included."""
    data = make(np.random.default_rng(5), (1, 31, 20, 11), dtype)
    for s in (accumulate(data)[0], ChannelStats.merge([accumulate(data[..., :4])[0], accumulate(data[..., 4:])[0]])):
        assert s.integral
        assert s.percentiles(_QS) == tuple(np.percentile(data, _QS).tolist())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_percentiles_hold_only_values_a_bin_can_hold(dtype: str) -> None:
    """Over data that is half zeros, a percentile whose ranks fall on zeros is 0.0, not a value just above it
    that no voxel holds; a constant is itself; two exact modes give numpy's values; every percentile lies in
    the bins of numpy's order statistics."""
    rng = np.random.default_rng(6)
    half = _half_zeros(rng, (1, 31, 20, 11), dtype)
    (s,) = accumulate(half)
    ordered = np.sort(half.ravel())
    for q, got in zip(_QS, s.percentiles(_QS)):
        rank = q / 100 * (ordered.size - 1)
        if ordered[math.floor(rank)] == ordered[math.ceil(rank)] == 0:
            assert got == 0.0, (q, got)
    assert s.percentile(50) == np.percentile(half, 50) == 0.0
    assert_matches(s, half)

    (c,) = accumulate(_constant(rng, (1, 9, 8, 7), dtype))
    assert c.percentiles(_QS) == (float(np.asarray(3.7, dtype)),) * len(_QS)

    modes = np.where(rng.random((1, 31, 20, 11)) < 0.3, -1.5, 2.25).astype(dtype)
    (m,) = accumulate(modes)
    assert m.percentiles(_QS) == tuple(np.percentile(modes, _QS).tolist())
    bimodal = _bimodal(rng, (1, 31, 20, 11), dtype)
    assert_matches(accumulate(bimodal)[0], bimodal)


def test_non_finite_counted_apart() -> None:
    data = np.random.default_rng(3).normal(5, 2, (1, 20, 20, 20)).astype(np.float32)
    data[0, 1, 2, 3] = np.nan
    data[0, 4, 5, 6] = np.inf
    data[0, 7, 8, 9] = -np.inf
    data[0, 0, 0, :5] = np.nan
    (s,) = accumulate(data)
    assert (s.nan, s.inf) == (6, 2)
    assert_matches(s, data)


def test_float64_beyond_float32_range() -> None:
    data = np.array([[[[1e300, -1e300, 2.0, 3.0]]]])
    (s,) = accumulate(data, step=1)
    assert (s.min, s.max, s.count) == (-1e300, 1e300, 4)
    assert s.percentile(100) == 1e300 and s.percentile(0) == -1e300


def test_slab_shape_and_strides_do_not_change_the_result() -> None:
    """The same voxels cut into other slabs, or laid out transposed, give the same counts and extremes, and
    moments equal to rounding; blocks smaller than a slab are walked without copies of the whole slab."""
    v = ct_like(7, (70, 80, 90))[None].astype(np.float32)
    assert v.size > BLOCK
    a, b = accumulate(v, 1)[0], accumulate(v, 90)[0]
    assert (a.count, a.min, a.max, a.histogram) == (b.count, b.min, b.max, b.histogram)
    assert a.mean == pytest.approx(b.mean, rel=1e-15) and a.m2 == pytest.approx(b.m2, rel=1e-13)
    c = Accumulator(v.dtype)
    c.add(0, np.ascontiguousarray(v[0].transpose(2, 0, 1))[::-1])
    assert c.result(1)[0].histogram == a.histogram


def test_parts_absorbed_in_order_equal_the_whole() -> None:
    """A volume written in parts (on several workers, `absorb`ed in file order) records exactly the statistics of the
    volume converted by one task, floats included."""
    for v in (ct_like(4)[None], ct_like(5)[None].astype(np.float32) / 7):
        whole = accumulate(v, 4)
        slabs = slabs_of(v, 4)
        merged = Accumulator(v.dtype)
        for part in (slabs[:3], slabs[3:5], slabs[5:]):
            acc = Accumulator(v.dtype)
            for slab in part:
                acc.update(slab)
            merged.absorb(acc.partial())
        assert merged.result(1) == whole


def test_merge_is_exact_and_independent_of_order() -> None:
    parts = [accumulate(ct_like(s)[None].astype(np.float64) / 3)[0] for s in range(8)]
    merged = ChannelStats.merge(parts)
    shuffled = parts[:]
    random.Random(0).shuffle(shuffled)
    assert ChannelStats.merge(shuffled) == merged
    everything = np.concatenate([ct_like(s).ravel().astype(np.float64) / 3 for s in range(8)])
    assert_matches(merged, everything)


def test_per_class_statistics_and_ignore_label() -> None:
    """Per mask class the image voxels of that class; the foreground leaves out 0 and an ignore label."""
    image = ct_like(9)
    classes = np.zeros(image.shape, np.uint8)
    classes[image > 0] = 1
    classes[image > 600] = 2
    classes[:6, :6, :] = 255  # an ignore region
    acc = ClassAccumulator(image.dtype)
    for z in range(0, image.shape[2], 5):
        acc.add(0, image[:, :, z : z + 5], classes[:, :, z : z + 5])
    stats = ItemStats(channels=accumulate(image[None]), classes=acc.result(1))
    assert sorted(stats.classes) == [0, 1, 2, 255]
    for k in (0, 1, 2, 255):
        assert_matches(stats.classes[k][0], image[classes == k])
    (fg,) = stats.foreground(ignore=(255,))
    assert_matches(fg, image[(classes == 1) | (classes == 2)])
    (with_ignored,) = stats.foreground()
    assert with_ignored.count == int(np.count_nonzero(classes))


def test_measure_a_whole_image() -> None:
    rgb = np.random.default_rng(5).integers(0, 256, (3, 48, 64), dtype=np.uint8)
    stats = measure(rgb)
    for c in range(3):
        assert_matches(stats.channels[c], rgb[c])


def test_records_survive_json_exactly() -> None:
    image = ct_like(11)
    classes = (image > 100).astype(np.uint8)
    acc = ClassAccumulator(np.dtype(np.float32))
    acc.add(0, image.astype(np.float32) / 3, classes)
    stats = ItemStats(channels=accumulate(image[None].astype(np.float32) / 3), classes=acc.result(1))
    assert decode_stats(json.loads(json.dumps(encode_stats(stats)))) == stats
    bare = stats.moments()
    assert decode_stats(json.loads(json.dumps(encode_stats(bare)))) == bare
    assert not bare.channels[0].histogram.runs and bare.channels[0].mean == stats.channels[0].mean
    assert len(json.dumps(encode_stats(bare))) < 1000


def test_merge_sums_past_the_largest_float() -> None:
    """Finite parts whose sums pass the largest float merge (`math.fsum` alone raises OverflowError): a mean
    within range comes out exact, one beyond it is inf, as float arithmetic overflows."""
    big = float(np.finfo(np.float64).max) / 2
    parts = [ChannelStats(count=2, mean=big, m2=0.0, min=big, max=big) for _ in range(3)]
    with pytest.raises(OverflowError):
        math.fsum(p.count * p.mean for p in parts)
    merged = ChannelStats.merge(parts)
    assert (merged.count, merged.mean, merged.m2, merged.min, merged.max) == (6, big, 0.0, big, big)
    spread = ChannelStats.merge([*parts, ChannelStats(count=2, mean=-big, m2=0.0, min=-big, max=-big)])
    assert spread.mean == big / 2 and spread.m2 == math.inf  # the squared deviations overflow, as `*` does
    top = float(np.finfo(np.float64).max)
    assert ChannelStats.merge([ChannelStats(count=1, mean=top, m2=0.0, min=top, max=top)] * 3).mean == top
