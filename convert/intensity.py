"""Intensity statistics of an array, accumulated from the slabs it is written from: nothing is decoded twice.

Invariant: what `Accumulator` records depends only on the voxel values and on
how the item is cut into slabs, which is the same for one task and for the
parts of a volume written in parts (`plan/parts.py`): a part hands its `partial()` to the
driver, which `absorb`s them in file order, so a volume in parts records exactly
the statistics of the same volume converted whole.

- 8- and 16-bit integers (and booleans) are counted per value (`_counting`:
  a compiled loop for large slabs, numpy's bincount for small ones); count,
  mean and M2 then follow exactly from the counts in integer
  arithmetic, correctly rounded once at the end.
- Anything else is counted in the histogram's bins (the top 16 bits of each
  value's float32), and its moments are taken in float64 per slab (blocks
  merged by Chan et al.'s update), the slabs' moments combined at the end with
  exactly rounded sums (`labzarr.store.ChannelStats.merge`).

Memory: a slab is walked in blocks of at most `BLOCK` voxels, in its own memory
order, so no temporary is larger than a block (a few MB) whatever the slab's
size or strides; between slabs a channel keeps only its non-empty bins.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from labzarr.readers import Slab
from labzarr.store import ChannelStats, Histogram, ItemStats
from labzarr.store.format.stats import BINS, NONFINITE, codes_to_ordinals, ordinals

from ._counting import counter

__all__ = ["BLOCK", "Accumulator", "ChannelPartial", "ClassAccumulator", "PartialStats", "measure"]

BLOCK = 1 << 18  # voxels per block: a float block's float64 copy and its codes' intp copy are 2 MiB each
_F32_MAX = float(np.finfo(np.float32).max)

Ints = npt.NDArray[np.int64]
Moments = tuple[int, float, float]  # (count, mean, M2) of the finite values


@dataclass(frozen=True, slots=True)
class ChannelPartial:
    """One channel's statistics so far: its non-empty codes with their counts (values for an 8/16-bit integer
    array, else bfloat16 codes), the float moments of each slab in order, and the float extremes."""

    codes: Ints
    counts: Ints
    slabs: tuple[Moments, ...] = ()
    min: float = math.inf
    max: float = -math.inf
    nan: int = 0
    inf: int = 0


@dataclass(frozen=True, slots=True)
class PartialStats:
    """What a part of a volume written in parts hands back: its channels' `ChannelPartial`s, by channel index."""

    dtype: str
    channels: Mapping[int, ChannelPartial] = field(default_factory=dict)


def _exact(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "iub" and dtype.itemsize <= 2


def _memory_order(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A view of `a` with its axes in memory order (largest stride first, none negative): C-contiguous when `a`
    is any flip or transpose of a contiguous buffer. Statistics ignore voxel order, so this costs nothing."""
    for axis, stride in enumerate(a.strides):
        if stride < 0:
            a = np.flip(a, axis)
    return a.transpose(sorted(range(a.ndim), key=lambda ax: -abs(a.strides[ax])))


def _blocks(a: npt.NDArray[Any], size: int = BLOCK) -> Iterator[npt.NDArray[Any]]:
    """1-D blocks of at most `size` voxels covering `a`: views where its memory allows, else bounded copies."""
    a = _memory_order(a)
    if a.flags.c_contiguous or a.ndim <= 1:
        flat = a.reshape(-1) if a.flags.c_contiguous else a
        for lo in range(0, flat.size, size):
            yield flat[lo : lo + size]
        return
    per = math.prod(a.shape[1:])
    if per <= size:
        step = max(1, size // max(1, per))
        for lo in range(0, a.shape[0], step):
            yield a[lo : lo + step].reshape(-1)
        return
    for i in range(a.shape[0]):
        yield from _blocks(a[i], size)


def _chan(a: Moments, b: Moments) -> Moments:
    """Two sets of moments as one (Chan, Golub and LeVeque's pairwise update)."""
    (na, ma, qa), (nb, mb, qb) = a, b
    if not na or not nb:
        return a if na else b
    n = na + nb
    delta = mb - ma
    return n, ma + delta * nb / n, qa + qb + delta * delta * na * nb / n


class Accumulator:
    """Per-channel statistics of one array of `dtype`, from its voxels in any order (`add`) or its slabs.

    `scratch` is a dense count buffer that several accumulators may share (one per class of a mask); it is only
    used within a call. `values`: how many values the array holds in all, which decides how they are counted
    (`_counting.counter`); 0: as many as each call adds.
    """

    def __init__(self, dtype: npt.DTypeLike, *, scratch: Ints | None = None, values: int = 0) -> None:
        self.dtype = np.dtype(dtype)
        self._values = values
        self._exact = _exact(self.dtype)
        self._bins = 1 << (8 * self.dtype.itemsize) if self._exact else BINS
        if scratch is None or len(scratch) < self._bins:
            scratch = np.zeros(self._bins, dtype=np.int64)
        self._scratch = scratch[: self._bins]
        self._channels: dict[int, ChannelPartial] = {}

    def update(self, slab: Slab) -> None:
        """Add one slab (`region[0]` names its channels)."""
        first = slab.region[0].start or 0
        for i in range(slab.data.shape[0]):
            self.add(first + i, slab.data[i])

    def add(self, channel: int, values: npt.NDArray[Any]) -> None:
        """Add `values` (any shape and strides) to `channel`; a float array's moments are kept per call."""
        old = self._channels.get(channel) or ChannelPartial(np.zeros(0, np.int64), np.zeros(0, np.int64))
        dense = self._scratch
        dense[:] = 0
        dense[old.codes] = old.counts
        if values.dtype != self.dtype:  # a slab in the source's dtype, stored cast to the array's
            values = values.astype(self.dtype)
        if self._exact:
            unsigned = np.dtype(f"u{self.dtype.itemsize}")
            count = counter(max(values.size, self._values))
            for block in _blocks(values):
                count(block.view(unsigned), dense)
            new = ChannelPartial(*_sparse(dense), slabs=old.slabs)
        else:
            new = self._add_float(old, values, dense)
        self._channels[channel] = new

    def _add_float(self, old: ChannelPartial, values: npt.NDArray[Any], dense: Ints) -> ChannelPartial:
        moments: Moments = (0, 0.0, 0.0)
        lo, hi, nan, inf = old.min, old.max, old.nan, old.inf
        wide = self.dtype.kind == "f" and self.dtype.itemsize > 4  # float64 finite values beyond float32's range
        for block in _blocks(values):
            as32 = block if block.dtype == np.float32 else (
                np.clip(block, -_F32_MAX, _F32_MAX) if wide else block).astype(np.float32)
            hist = np.bincount(as32.view(np.uint32) >> 16, minlength=BINS)
            # Every NaN and infinity lands in the codes whose exponent bits are all set: the histogram says
            # whether this block needs the finite-only path (a float64 block's clipped infinities do not).
            if self.dtype.kind == "f" and (wide or hist[NONFINITE:0x8000].any() or hist[0x8000 | NONFINITE:].any()):
                finite = np.isfinite(block)
                if not finite.all():
                    n_nan = int(np.count_nonzero(np.isnan(block)))
                    nan, inf = nan + n_nan, inf + int(block.size - np.count_nonzero(finite)) - n_nan
                    block, as32 = block[finite], as32[finite]
                    hist = np.bincount(as32.view(np.uint32) >> 16, minlength=BINS)
            del as32
            dense += hist
            if not block.size:
                continue
            lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
            x = block.astype(np.float64)  # a copy, centred in place
            mean = float(x.sum()) / x.size
            x -= mean
            # Not np.dot(x, x): BLAS splits a long dot product among its threads, and the sum then rounds by their
            # count, which differs between worker processes (a forkserver started by other code, a user's
            # OMP_NUM_THREADS); numpy's own pairwise sum is the same in every process.
            x *= x
            moments = _chan(moments, (int(x.size), mean, float(x.sum())))
        codes, counts = _sparse(dense)
        return ChannelPartial(codes, counts, slabs=(*old.slabs, moments) if moments[0] else old.slabs,
                              min=lo, max=hi, nan=nan, inf=inf)

    def partial(self) -> PartialStats:
        """What has been added so far, for another accumulator of the same array to `absorb`."""
        return PartialStats(dtype=str(self.dtype), channels=dict(self._channels))

    def absorb(self, partial: PartialStats) -> None:
        """Add another accumulator's `partial()` over later slabs of the same array (parts in file order)."""
        for c, p in sorted(partial.channels.items()):
            old = self._channels.get(c)
            if old is None:
                self._channels[c] = p
                continue
            dense = self._scratch
            dense[:] = 0
            dense[old.codes] += old.counts
            dense[p.codes] += p.counts
            self._channels[c] = ChannelPartial(*_sparse(dense), slabs=old.slabs + p.slabs, min=min(old.min, p.min),
                                               max=max(old.max, p.max), nan=old.nan + p.nan, inf=old.inf + p.inf)

    def result(self, channels: int | None = None) -> tuple[ChannelStats, ...]:
        """The statistics of channels 0..`channels`-1 (default: up to the highest one added)."""
        n = (max(self._channels) + 1 if self._channels else 0) if channels is None else channels
        empty = ChannelPartial(np.zeros(0, np.int64), np.zeros(0, np.int64))
        return tuple(self._stats(self._channels.get(c, empty)) for c in range(n))

    def _stats(self, p: ChannelPartial) -> ChannelStats:
        integral = self.dtype.kind in "iub"
        if self._exact:
            values = p.codes.copy()
            if self.dtype.kind == "i":
                values[values >= self._bins // 2] -= self._bins
            counts = p.counts
            n = int(counts.sum())
            if not n:
                return ChannelStats(count=0, mean=0.0, m2=0.0, min=0.0, max=0.0, integral=integral)
            s, q = _exact_sums(values, counts, n)
            # Python's int / int is correctly rounded: the exact mean and M2, rounded once.
            return ChannelStats(count=n, mean=s / n, m2=(q * n - s * s) / n,
                                min=float(values.min()), max=float(values.max()),
                                histogram=Histogram.of(ordinals(values), counts.tolist()), integral=integral)
        parts = [ChannelStats(count=k, mean=m, m2=q, min=p.min, max=p.max) for k, m, q in p.slabs]
        merged = ChannelStats.merge(parts) if parts else None
        hist = Histogram.of(codes_to_ordinals(p.codes), p.counts)
        if merged is None:
            return ChannelStats(count=0, mean=0.0, m2=0.0, min=0.0, max=0.0, nan=p.nan, inf=p.inf, integral=integral)
        return ChannelStats(count=merged.count, mean=merged.mean, m2=merged.m2, min=p.min, max=p.max, histogram=hist,
                            nan=p.nan, inf=p.inf, integral=integral)


def _exact_sums(values: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], n: int) -> tuple[int, int]:
    """The exact sums of value x count and value² x count. Every partial sum of value² x count is at most
    max|value|² x n, so where that fits in int64 numpy's dot products are exact; beyond it, Python's ints."""
    top = int(np.abs(values).max())
    if top * top * n < 1 << 63:
        return int(np.dot(values, counts)), int(np.dot(values * values, counts))
    v, c = values.tolist(), counts.tolist()
    return sum(map(operator.mul, v, c)), sum(x * x * k for x, k in zip(v, c))


def measure(data: npt.NDArray[Any]) -> ItemStats:
    """The statistics of one whole array held in memory (channels first): a 2D image of a stack."""
    acc = Accumulator(data.dtype)
    for c in range(data.shape[0]):
        acc.add(c, data[c])
    return ItemStats(channels=acc.result(data.shape[0]))


class ClassAccumulator:
    """Per mask class, the statistics of the image voxels of that class (0 included), from aligned pieces."""

    def __init__(self, dtype: npt.DTypeLike) -> None:
        self.dtype = np.dtype(dtype)
        self._scratch = np.zeros(1 << 8 if _exact(self.dtype) and self.dtype.itemsize == 1 else BINS, np.int64)
        self._classes: dict[int, Accumulator] = {}

    def add(self, channel: int, values: npt.NDArray[Any], classes: npt.NDArray[Any]) -> None:
        """Add `values` of `channel`, each to the class at the same place in `classes` (same shape)."""
        for k in _present(classes):
            acc = self._classes.get(k)
            if acc is None:
                acc = self._classes[k] = Accumulator(self.dtype, scratch=self._scratch)
            acc.add(channel, values[classes == k])

    def result(self, channels: int) -> dict[int, tuple[ChannelStats, ...]]:
        """Each class's statistics, for channels 0..`channels`-1, by class value."""
        return {k: acc.result(channels) for k, acc in sorted(self._classes.items())}


def _present(classes: npt.NDArray[Any]) -> list[int]:
    """The distinct values of an integer class map (bincount for small non-negative ones)."""
    if not classes.size:
        return []
    if classes.dtype.kind in "ub" and classes.dtype.itemsize <= 2:
        return np.flatnonzero(np.bincount(classes.reshape(-1).view(f"u{classes.dtype.itemsize}"))).tolist()
    return [int(v) for v in np.unique(classes)]


def _sparse(dense: Ints) -> tuple[Ints, Ints]:
    nz = np.flatnonzero(dense)
    return nz.astype(np.int64), dense[nz].copy()

