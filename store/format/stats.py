"""Intensity statistics of one array, and of many merged: exact moments and a fixed-bin histogram.

Invariant: every histogram has the same bins, whatever the item, its dtype or
its delivery, so histograms merge by adding counts. A value's bin is given by
the top 16 bits of its float32 representation (its bfloat16 truncation toward
zero): 128 bins per octave on both sides of zero, each 1/128 of its magnitude
wide at most, so integers up to 256 in magnitude (every 8-bit value) have a bin
of their own, int16 CT values bins of 8 HU around 1000 HU, and floats of any
range a relative resolution of 0.8 %. Bins are numbered by a signed *ordinal*
that increases with the value (`ordinals`); non-finite values are counted
apart (`nan`, `inf`), never binned. A percentile is numpy's linear one between
the order statistics either side of its rank, each read from the histogram within
the values its bin can hold (`ChannelStats.percentiles`).

Moments are the count, mean and M2 (the sum of squared deviations from the
mean) of the finite values. `ChannelStats.merge` combines any number of them at
once with the parallel formula of Chan et al., each sum taken with `math.fsum`
(exactly rounded; `exact_sum`, which also sums past the largest float), so the merged
moments do not depend on the order of the parts: an incremental rerun and a full
recompute agree to the last bit.

Only numpy: the store layer's encoding of these records is `format.py`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from .pickling import fast_pickling

__all__ = ["BINS", "ChannelStats", "Histogram", "ItemStats", "bin_edges", "codes_to_ordinals", "exact_sum",
           "merge_channels", "ordinals"]

BINS = 1 << 16  # bfloat16 codes: every bin a value can fall in
NONFINITE = 0x7F80  # a code's exponent bits all set: NaN or infinity (with either sign)
_GAP = 3  # a run of the encoded histogram spans at most this many empty bins (fewer, longer runs)

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


def codes_to_ordinals(codes: npt.NDArray[Any]) -> Ints:
    """The ordinal of each bfloat16 code (finite ones): ordinals increase with the value, -0.0's bin is -1."""
    c = codes.astype(np.int64)
    out: Ints = np.where(c < 0x8000, c, 0x7FFF - c)
    return out


def ordinals(values: npt.ArrayLike) -> Ints:
    """The bin ordinal of each finite value (of its float32 rounding)."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    return codes_to_ordinals(v.view(np.uint32) >> 16)


def bin_edges(ords: npt.ArrayLike) -> tuple[Floats, Floats]:
    """(low, high) edges of each bin: a positive bin holds [low, high), a negative one (low, high]."""
    o = np.asarray(ords, dtype=np.int64)
    magnitude = np.where(o >= 0, o, -1 - o).astype(np.uint32)
    lo = (magnitude << 16).view(np.float32).astype(np.float64)
    hi = ((magnitude + 1) << 16).view(np.float32).astype(np.float64)
    return np.where(o >= 0, lo, -hi), np.where(o >= 0, hi, -lo)


def _frozen(a: npt.ArrayLike, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """`a` as a read-only array of `dtype` that nothing else can write (a copy unless it already is one)."""
    if isinstance(a, np.ndarray) and a.dtype == dtype and not a.flags.writeable and a.flags.c_contiguous:
        return a
    out = np.array(a, dtype=dtype)
    out.flags.writeable = False
    return out


_EMPTY_ORDS = _frozen(np.zeros(0, np.int16), np.int16)
_EMPTY_COUNTS = _frozen(np.zeros(0, np.int64), np.int64)
_LOWEST = -(BINS // 2)  # the lowest ordinal (-0x8000): ordinals fit int16 exactly
_INT32 = 1 << 31  # counts below this are held as int32
_MERGE_BATCH = 4096  # histograms added at a time by `Histogram.merge`


class Histogram:
    """Voxels per bin, sparse: the non-empty bins' `ordinals` (int16, ascending, distinct) and their `counts`
    (positive; int32 where every count fits, else int64), two read-only numpy arrays. Immutable: equal histograms
    compare equal and hash alike.

    Why arrays, not Python ints: a driver holds one per item and channel until the run's statistics are written;
    as tuples it held a Python int object per bin, as arrays 2 bytes of ordinal and 4 (or 8) of count."""

    __slots__ = ("ordinals", "counts")
    ordinals: npt.NDArray[np.int16]
    counts: npt.NDArray[np.int32] | Ints

    def __init__(self, ordinals: npt.ArrayLike = _EMPTY_ORDS, counts: npt.ArrayLike = _EMPTY_COUNTS) -> None:
        """A histogram of already canonical arrays (what `of` and the store's decoders give); `of` for any pairs."""
        o, n = _frozen(ordinals, np.int16), _frozen(counts, np.int64)
        if n.size and int(n.max()) < _INT32:  # one dtype for the same counts, so equal histograms hash alike
            n = _frozen(n, np.int32)
        if o.shape != n.shape or o.ndim != 1:
            raise ValueError(f"histogram ordinals {o.shape} and counts {n.shape} differ in shape")
        object.__setattr__(self, "ordinals", o)
        object.__setattr__(self, "counts", n)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Histogram is immutable ({name})")

    def __reduce__(self) -> tuple[type[Histogram], tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
        return (Histogram, (np.array(self.ordinals), np.array(self.counts)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return bool(np.array_equal(self.ordinals, other.ordinals) and np.array_equal(self.counts, other.counts))

    def __hash__(self) -> int:
        return hash((self.ordinals.tobytes(), self.counts.tobytes()))

    def __repr__(self) -> str:
        return f"Histogram({len(self.ordinals)} bins, {self.total} voxels)"

    def __bool__(self) -> bool:
        return bool(self.ordinals.size)

    @classmethod
    def of(cls, ords: npt.ArrayLike, counts: npt.ArrayLike) -> Histogram:
        """The histogram of (ordinal, count) pairs; ordinals may repeat and come in any order."""
        o = np.asarray(ords, dtype=np.int64).ravel()
        n = np.asarray(counts, dtype=np.int64).ravel()
        if o.size == 0:
            return cls()
        if o.min() < _LOWEST or o.max() >= BINS // 2:
            raise ValueError(f"histogram ordinals {o.min()}..{o.max()} outside {_LOWEST}..{BINS // 2 - 1}")
        if o.size > BINS // 4:  # many pairs (a merge): one dense pass, no sort
            dense = np.zeros(BINS, dtype=np.int64)
            np.add.at(dense, o - _LOWEST, n)
            keep = np.flatnonzero(dense > 0)
            return cls(keep + _LOWEST, dense[keep])
        uniq, inverse = np.unique(o, return_inverse=True)
        summed = np.zeros(len(uniq), dtype=np.int64)
        np.add.at(summed, inverse, n)
        positive = summed > 0
        return cls(uniq[positive], summed[positive])

    def arrays(self) -> tuple[Ints, Ints]:
        """(ordinals, counts) of the non-empty bins, ascending, as int64."""
        return self.ordinals.astype(np.int64), self.counts.astype(np.int64)

    @property
    def total(self) -> int:
        """Voxels counted."""
        return int(self.counts.sum(dtype=np.int64))

    @property
    def runs(self) -> tuple[tuple[int, ...], ...]:
        """The bins as runs of adjacent ones, each ``(first ordinal, count, count, ...)``, ascending, a run spanning
        at most `_GAP` empty bins (the JSON form an array's attributes hold)."""
        o, n = self.arrays()
        if not o.size:
            return ()
        breaks = np.flatnonzero(np.diff(o) > _GAP + 1) + 1
        out = []
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, len(o)]):
            first = int(o[lo])
            dense = np.zeros(int(o[hi - 1]) - first + 1, dtype=np.int64)
            dense[o[lo:hi] - first] = n[lo:hi]
            out.append((first, *dense.tolist()))
        return tuple(out)

    @classmethod
    def from_runs(cls, runs: Iterable[Sequence[int]]) -> Histogram:
        """The histogram `runs()` describes."""
        parts = [(np.arange(r[0], r[0] + len(r) - 1, dtype=np.int64), np.asarray(r[1:], dtype=np.int64))
                 for r in runs if len(r) > 1]
        if not parts:
            return cls()
        return cls.of(np.concatenate([o for o, _ in parts]), np.concatenate([n for _, n in parts]))

    @classmethod
    def merge(cls, parts: Iterable[Histogram]) -> Histogram:
        """The sum of `parts` (bins are the same for every histogram)."""
        full = [p for p in parts if p.ordinals.size]
        if not full:
            return cls()
        if len(full) == 1:
            return full[0]
        # Into one dense array of every bin, a batch of parts at a time: no concatenation of all of them.
        dense = np.zeros(BINS, dtype=np.int64)
        for lo in range(0, len(full), _MERGE_BATCH):
            batch = full[lo:lo + _MERGE_BATCH]
            np.add.at(dense, np.concatenate([p.ordinals for p in batch]).astype(np.intp) - _LOWEST,
                      np.concatenate([p.counts for p in batch]).astype(np.int64))
        keep = np.flatnonzero(dense)
        return cls(keep + _LOWEST, dense[keep])


def exact_sum(terms: Sequence[float], divisor: int = 1) -> float:
    """`math.fsum(terms) / divisor`: the exactly rounded sum, then one division.

    Also where finite terms sum past the largest float, where `math.fsum` raises OverflowError: the sum is then
    taken of the terms scaled down by a power of two (exact) and scaled back after the division, so the result is
    finite wherever the quotient is, and +-inf where it is not, as float arithmetic overflows. +inf and -inf
    together give nan, as their float sum does (`math.fsum` raises ValueError)."""
    try:
        return math.fsum(terms) / divisor
    except OverflowError:
        scale = 2.0 ** len(terms).bit_length()  # the partial sums of the scaled terms stay below the largest float
        return math.fsum(t / scale for t in terms) / divisor * scale
    except ValueError:
        return math.nan


_NO_BINS = Histogram()  # one object for every histogram-less record (`ItemStats.moments`): it is immutable


@fast_pickling
@dataclass(frozen=True, slots=True)
class ChannelStats:
    """Statistics of one channel's voxels (of one item, or merged over many): moments of the finite values,
    their histogram, and the non-finite values counted apart. `integral`: every value is an integer
    (an integer dtype), so a percentile is read as one of the integers in its bin."""

    count: int
    mean: float
    m2: float
    min: float
    max: float
    histogram: Histogram = field(default_factory=Histogram)
    nan: int = 0
    inf: int = 0
    integral: bool = False

    @property
    def var(self) -> float:
        """Population variance of the finite values (0 when there are none)."""
        return self.m2 / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        """Population standard deviation of the finite values."""
        return math.sqrt(max(self.var, 0.0))

    def percentile(self, q: float) -> float:
        """The `q`-th percentile (0..100) of the finite values, within the bin that holds it."""
        return self.percentiles((q,))[0]

    def percentiles(self, qs: Sequence[float]) -> tuple[float, ...]:
        """`percentile` for each of `qs`, as numpy's default ('linear') computes it: the order statistics either
        side of the rank ``q / 100 * (count - 1)``, interpolated as numpy does. Each order statistic is read
        from its bin (`_order_statistics`), so where those bins hold one value each the result is numpy's to the
        bit: every integer up to 256 in magnitude, and a bin holding the minimum or the maximum alone."""
        if any(not 0 <= q <= 100 for q in qs):
            raise ValueError(f"percentiles {list(qs)}: each must be within 0..100")
        ords, counts = self.histogram.arrays()
        if not self.count or not counts.size:
            return tuple(math.nan for _ in qs)
        cum = np.cumsum(counts)
        top = int(cum[-1]) - 1
        ranks = [q / 100 * top for q in qs]
        below = [math.floor(r) for r in ranks]
        wanted = sorted({*below, *(min(k + 1, top) for k in below)})
        value = dict(zip(wanted, self._order_statistics(wanted, ords, counts, cum)))
        out = []
        for rank, k in zip(ranks, below):
            a, b, t = value[k], value[min(k + 1, top)], rank - k
            # numpy's _lerp (from the nearer end); a rank on a value is that value, even where b - a overflows
            x = a if t == 0 else b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t
            out.append(float(min(max(x, self.min), self.max)))
        return tuple(out)

    def _order_statistics(self, ks: Sequence[int], ords: Ints, counts: Ints, cum: Ints) -> list[float]:
        """The `ks`-th smallest finite values (0-based), each within the values its bin can hold.

        The first and last are `min` and `max`. Any other is the bin's values spread evenly: over the integers
        in the bin when `integral`, else over the bin, clipped to [min, max]. The two bins of zero (±0 and
        float32 subnormals below 2**-133) are the exception: the only bins not a fraction of their magnitude
        wide, so spreading over them invents values near 1e-41 that no image holds, where nearly every voxel
        they count is an exact zero (a background); they read as 0."""
        top = int(cum[-1]) - 1
        bins = np.minimum(np.searchsorted(cum, ks, side="right"), len(cum) - 1)
        lows, highs = bin_edges(ords[bins])
        out = []
        for k, i, lo_e, hi_e in zip(ks, bins.tolist(), lows.tolist(), highs.tolist()):
            if k <= 0 or k >= top:  # the extremes are known exactly
                out.append(self.min if k <= 0 else self.max)
                continue
            j, n, o = k - int(cum[i] - counts[i]), int(counts[i]), int(ords[i])
            if self.integral:  # the integers in the bin ([lo, hi) when positive, (lo, hi] when negative)
                if o >= 0:
                    first, last = math.ceil(lo_e), math.ceil(hi_e) - 1 if math.isfinite(hi_e) else math.floor(self.max)
                else:
                    first, last = math.floor(lo_e) + 1 if math.isfinite(lo_e) else math.ceil(self.min), math.floor(hi_e)
                first, last = max(first, math.ceil(self.min)), min(last, math.floor(self.max))
                width = max(1, last - first + 1)
                value = float(first + min(width - 1, (2 * j + 1) * width // (2 * n)))
            elif o in (0, -1):
                value = 0.0
            else:
                lo, hi = max(lo_e, self.min), min(hi_e, self.max)
                value = lo + (hi - lo) * (j + 0.5) / n
            out.append(float(min(max(value, self.min), self.max)))
        return out

    @classmethod
    def merge(cls, parts: Sequence[ChannelStats]) -> ChannelStats:
        """All of `parts` as one: exact counts and histogram sums; moments by Chan et al.'s parallel formula with
        exactly rounded sums, so the result does not depend on the order of `parts`."""
        full = [p for p in parts if p.count]
        n = sum(p.count for p in full)
        nan, inf = sum(p.nan for p in parts), sum(p.inf for p in parts)
        integral = all(p.integral for p in parts) and bool(parts)
        if not n:
            return cls(count=0, mean=0.0, m2=0.0, min=0.0, max=0.0, nan=nan, inf=inf, integral=integral)
        if len(full) == 1:
            p = full[0]
            return cls(count=p.count, mean=p.mean, m2=p.m2, min=p.min, max=p.max, histogram=p.histogram, nan=nan,
                       inf=inf, integral=integral)
        mean = exact_sum([p.count * p.mean for p in full], n)
        # `*`, not `**`: a float64 beyond 1e154 then squares to inf instead of raising OverflowError
        m2 = exact_sum([p.m2 for p in full]) + exact_sum([p.count * (p.mean - mean) * (p.mean - mean) for p in full])
        return cls(count=n, mean=mean, m2=m2, min=min(p.min for p in full), max=max(p.max for p in full),
                   histogram=Histogram.merge(p.histogram for p in full), nan=nan, inf=inf, integral=integral)


def merge_channels(items: Iterable[Sequence[ChannelStats]]) -> tuple[ChannelStats, ...]:
    """Channel `c` of the result merges channel `c` of every item that has one (items may differ in channels)."""
    by_channel: list[list[ChannelStats]] = []
    for channels in items:
        for c, s in enumerate(channels):
            if c == len(by_channel):
                by_channel.append([])
            by_channel[c].append(s)
    return tuple(ChannelStats.merge(parts) for parts in by_channel)


@fast_pickling
@dataclass(frozen=True, slots=True)
class ItemStats:
    """One array's statistics per channel, and for a sample with a mask the same per mask class (0 included)."""

    channels: tuple[ChannelStats, ...]
    classes: Mapping[int, tuple[ChannelStats, ...]] = field(default_factory=dict)

    def foreground(self, *, ignore: Collection[int] = ()) -> tuple[ChannelStats, ...]:
        """The voxels of every class but 0 and `ignore` (an ignore label), per channel; () without a mask."""
        return merge_channels(s for k, s in sorted(self.classes.items()) if k != 0 and k not in ignore)

    def moments(self) -> ItemStats:
        """The same without histograms: what the store's index keeps of every item (its full record, histograms
        and all, is in the item's array attributes and the store's `statistics` group)."""
        def bare(cs: tuple[ChannelStats, ...]) -> tuple[ChannelStats, ...]:
            return tuple(replace(c, histogram=_NO_BINS) for c in cs)
        return ItemStats(channels=bare(self.channels), classes={k: bare(v) for k, v in self.classes.items()})
