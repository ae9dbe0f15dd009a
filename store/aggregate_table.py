"""`dataset_stats` straight from the store's tables: the same `DatasetStats`, merged over numpy columns, no item built.

Invariant: `table_stats(items, table)` equals `aggregate.dataset_stats(items, table.records())` in every field,
to the bit (tests/store/test_aggregate_table.py checks it, percentiles included, on converted stores and on a
synthetic table). It makes the same merges as `stats.py`, over groups of channel rows instead of item by item:
per channel (and per mask class and channel, and per kind), the count, non-finite counts and `integral` as
sums and an `all`; mean and M2 by Chan et al.'s formula with each sum a `math.fsum` of the same float64 terms
`ChannelStats.merge` adds (exactly rounded, so the order of the terms does not matter); `min` and `max` the
first of the equal extremes in item order, as Python's `min` picks them; histograms by adding every selected
row's counts into one dense array of every bin per group. Geometry and class frequencies come from the index's
columns the same way.

Why hand-written instead of `dataset_stats` over built records: that builds every item's record and merges them
one by one, linear in Python objects (bench/index_scale.py, "ds.stats()": seconds at 100k items, minutes at 1M);
this is linear in numpy passes plus one fsum per group.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .aggregate import ClassFrequency, DatasetStats, Geometry, IntensityStats, Spread
from .format.index import IndexItem
from .format.items import IndexItems
from .format.stats import BINS, ChannelStats, Histogram, exact_sum
from .format.stats_table import Bins, RecordTable, StatsTable
from .format.table import flat_positions

__all__ = ["table_stats"]

_LOWEST = -(BINS // 2)  # the lowest bin ordinal: dense position = ordinal - _LOWEST
_BATCH_BINS = 1 << 18  # histogram bins added at a time: temporaries that stay in cache (6x faster than 16M), a few MB
_CELLS = 128  # (kind, key) cells whose dense counts are held at once: 64 MiB
_EMPTY = Histogram()
_EXACT = 1 << 53  # float64 sums of integers below this are exact: `np.bincount`'s weights are float64

Ints = npt.NDArray[np.int64]
Key = tuple[int, int, int]  # (1 for a mask class's row else 0, its class, channel)


def table_stats(items: Sequence[IndexItem], table: RecordTable | None) -> DatasetStats:
    """The statistics of `items` (an `IndexItems` view: no item is built) from the store's statistics `table`
    (`read_record_table`; None: the store has none, every item is `missing`). Equals `dataset_stats(items,
    table.records())`."""
    view = IndexItems.of(items)
    rows = np.full(len(view), -1, dtype=np.int64) if table is None else table.rows_of(view.keys())
    chosen = np.flatnonzero(rows >= 0)
    codes, kind_values = view.text("kind")
    names = [*(v or "?" for v in kind_values), "?"]  # code -1 picks the "?" at the end
    kinds = sorted({names[c] for c in np.unique(codes[chosen]).tolist()})
    kind_of_code = np.asarray([kinds.index(n) if n in kinds else -1 for n in names], dtype=np.int64)
    kind = kind_of_code[codes[chosen]]
    if table is None or not chosen.size:
        overall, by_kind = IntensityStats.merge([]), {}
    else:
        merged = _Merge(table.stats, rows[chosen], kind, len(kinds))
        overall = merged.intensity(None)
        by_kind = {name: overall if len(kinds) == 1 else merged.intensity(k) for k, name in enumerate(kinds)}
    axes = view.spatial_axes()
    geometry = {name: _geometry(view.take(np.flatnonzero(axes == n))) for name, n in (("volume", 3), ("image", 2))
                if bool(np.any(axes == n))}
    return DatasetStats(items=len(view), missing=len(view) - len(chosen), intensity=overall, kinds=by_kind,
                        geometry=geometry, classes=_class_frequencies(view))


class _Merge:
    """The channel rows of the chosen items (`records` rows, in item order), grouped by (kind of item, key)."""

    def __init__(self, stats: StatsTable, records: Ints, kind: Ints, kinds: int) -> None:
        self.stats = stats
        at, lengths = flat_positions(stats.rows, records)
        owner = np.repeat(np.arange(len(records), dtype=np.int64), lengths)
        flag = stats.column("kind")[at].astype(np.int64)
        cls = np.where(flag > 0, stats.column("cls")[at].astype(np.int64), 0)
        # Channel number: the row's place in its item's run of rows of one (flag, class).
        starts = np.ones(len(at), dtype=bool)
        starts[1:] = (owner[1:] != owner[:-1]) | (flag[1:] != flag[:-1]) | (cls[1:] != cls[:-1])
        first = np.flatnonzero(starts)
        channel = np.arange(len(at), dtype=np.int64) - first[np.cumsum(starts) - 1]
        self.at, self.kind = at, kind[owner]
        self.items = [int(n) for n in np.bincount(kind, minlength=kinds)]
        self.keys, self.group = _groups(flag, cls, channel)
        self.kinds = kinds
        self.hists = self._histograms()

    def _histograms(self) -> dict[tuple[int, int], Histogram]:
        """Per (kind, key) with values, the histogram of its rows with values (`ChannelStats.merge` adds only
        those); empty without histograms in the table.

        In batches of the table's rows, whose bins are contiguous slices of its columns (views, nothing gathered):
        a batch whose chosen rows all fall in one cell (one kind, key: a store of one channel) is one
        `np.bincount` of its ordinals; others spread each bin to its row's cell first. Dense counts are held for
        `_CELLS` cells at a time (a pass over the bins each), however many kinds, classes and channels there are."""
        hist = self.stats.histograms
        if hist is None:
            return {}
        cells = self.kinds * len(self.keys)
        full = self.stats.column("count")[self.at] > 0
        rows = len(self.stats.column("count"))
        cell = np.full(rows, -1, dtype=np.int64)  # per table row: its cell, -1 where not chosen
        cell[self.at[full]] = self.kind[full] * len(self.keys) + self.group[full]
        times = np.bincount(self.at[full], minlength=rows)  # a row chosen twice (a repeated item) counts twice
        out: dict[tuple[int, int], Histogram] = {}
        for low in range(0, cells, _CELLS):
            high = min(cells, low + _CELLS)
            window = np.where((cell >= low) & (cell < high), cell - low, -1)
            dense = self._dense(hist, window, times, high - low)
            for c in range(low, high):
                counts = dense[c - low]
                keep = np.flatnonzero(counts)
                if keep.size:
                    out[divmod(c, len(self.keys))] = Histogram(keep + _LOWEST, counts[keep])
        return out

    def _dense(self, hist: tuple[Ints, Bins, Bins], cell: Ints, times: Ints,
               cells: int) -> npt.NDArray[np.int64]:
        """Every bin's count per cell (`cell`: per table row, -1 for none) over the table's rows."""
        ends, ordinals, counts = hist
        rows = len(cell)
        e = np.asarray(ends, dtype=np.int64)
        total = np.zeros((cells, BINS), dtype=np.int64)
        bounds = np.searchsorted(e, np.arange(_BATCH_BINS, int(e[-1]) if len(e) else 0, _BATCH_BINS), side="left")
        edges = np.unique(np.concatenate([[0], bounds, [rows]]))
        added = 0
        for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
            first, last = (int(e[lo - 1]) if lo else 0), int(e[hi - 1]) if hi else 0
            spans = np.diff(e[lo:hi], prepend=first)
            binned = spans > 0
            used = cell[lo:hi][binned]
            if not used.size or bool(np.all(used < 0)):
                continue
            # each bin's place (ordinal - _LOWEST) as uint16: its int16 ordinal's bits, the sign bit flipped
            position = ordinals[first:last].astype(np.int16, copy=False).view(np.uint16) ^ np.uint16(0x8000)
            weights = counts[first:last]
            if bool(np.all(used == used[0])) and bool(np.all(times[lo:hi][binned] == 1)):
                added += self._add(total[int(used[0])], position, weights, added)
            else:
                per_bin = np.repeat(cell[lo:hi], spans)
                keep = per_bin >= 0
                added += self._add(total.reshape(-1), per_bin[keep] * BINS + position[keep],
                                   weights[keep].astype(np.int64) * np.repeat(times[lo:hi], spans)[keep], added)
        return total

    @staticmethod
    def _add(into: npt.NDArray[np.int64], where: npt.NDArray[Any], weights: npt.NDArray[Any], before: int) -> int:
        """`into[where] += weights`, repeated places summed, given `before` voxels already added; returns the voxels
        added now. `np.bincount` (float64 sums) while every sum stays below 2**53, where they are exact."""
        added = int(weights.sum(dtype=np.int64))
        if before + added < _EXACT:
            low = int(where.min()) // BINS * BINS  # only the cells this batch touches
            span = (int(where.max()) // BINS + 1) * BINS - low
            into[low:low + span] += np.bincount(where - low if low else where, weights=weights,
                                                minlength=span).astype(np.int64)
        else:
            np.add.at(into, where.astype(np.intp), weights.astype(np.int64))
        return added

    def intensity(self, kind: int | None) -> IntensityStats:
        """The merge over every chosen item (`kind` None) or those of one kind."""
        rows = np.arange(len(self.at)) if kind is None else np.flatnonzero(self.kind == kind)
        group = self.group[rows]
        # stable: each group's rows stay in item order
        order = np.arange(len(group)) if len(self.keys) == 1 else np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(len(self.keys) + 1))
        merged: dict[Key, ChannelStats] = {}
        for g, key in enumerate(self.keys):
            part = rows[order[bounds[g]:bounds[g + 1]]]
            if part.size:
                histogram = Histogram.merge(self.hists.get((k, g), _EMPTY) for k in range(self.kinds)) \
                    if kind is None else self.hists.get((kind, g), _EMPTY)
                merged[key] = self._channel(self.at[part], histogram)
        channels = tuple(merged[k] for k in sorted(merged) if k[0] == 0)
        classes: dict[int, list[ChannelStats]] = {}
        for (flag, cls, _), c in sorted(merged.items()):
            if flag:
                classes.setdefault(cls, []).append(c)
        return IntensityStats(items=self.items[kind] if kind is not None else sum(self.items), channels=channels,
                              classes={k: tuple(v) for k, v in sorted(classes.items())})

    def _channel(self, at: Ints, histogram: Histogram) -> ChannelStats:
        """`ChannelStats.merge` of the channel rows `at`, in item order."""
        col = self.stats.column
        count = col("count")[at].astype(np.int64)
        nan, inf = int(col("nan")[at].sum(dtype=np.int64)), int(col("inf")[at].sum(dtype=np.int64))
        integral = bool(np.all(col("integral")[at] != 0)) and bool(at.size)
        full = count > 0
        n = int(count[full].sum(dtype=np.int64))
        if not n:
            return ChannelStats(count=0, mean=0.0, m2=0.0, min=0.0, max=0.0, nan=nan, inf=inf, integral=integral)
        used = at[full]
        means, lows, highs = col("mean")[used], col("min")[used], col("max")[used]
        if len(used) == 1:
            return ChannelStats(count=n, mean=float(means[0]), m2=float(col("m2")[used][0]), min=float(lows[0]),
                                max=float(highs[0]), histogram=histogram, nan=nan, inf=inf, integral=integral)
        counts = count[full].astype(np.float64)  # as Python turns an int times a float into float times float
        with np.errstate(over="ignore", invalid="ignore"):
            mean = exact_sum((counts * means).tolist(), n)
            d = means - mean
            m2 = exact_sum(col("m2")[used].tolist()) + exact_sum((counts * d * d).tolist())
        return ChannelStats(count=n, mean=mean, m2=m2, min=_first(lows, np.min(lows)),
                            max=_first(highs, np.max(highs)), histogram=histogram, nan=nan, inf=inf,
                            integral=integral)


def _groups(flag: Ints, cls: Ints, channel: Ints) -> tuple[list[Key], Ints]:
    """The distinct (flag, class, channel) keys, and each row's number among them."""
    if not len(flag):
        return [], np.zeros(0, dtype=np.int64)
    low, classes, channels = int(cls.min()), int(cls.max()) - int(cls.min()) + 1, int(channel.max()) + 1
    if classes * 2 * channels > 1 << 22:  # classes too far apart to number densely: sort the keys instead
        keys, group = np.unique(np.stack([flag, cls, channel], axis=1), axis=0, return_inverse=True)
        return [(int(f), int(c), int(n)) for f, c, n in keys.tolist()], group.reshape(-1).astype(np.int64)
    code = ((cls - low) * 2 + flag) * channels + channel  # one number per key, in a dense range: no sort
    distinct = np.flatnonzero(np.bincount(code))
    number = np.zeros(int(distinct[-1]) + 1, dtype=np.int64)
    number[distinct] = np.arange(len(distinct))
    found = [(int(d // channels % 2), int(d // channels // 2) + low, int(d % channels)) for d in distinct.tolist()]
    return found, number[code]


def _first(values: npt.NDArray[np.float64], extreme: Any) -> float:
    """The first of `values` equal to `extreme`: Python's `min`/`max` keep the first of equals (0.0 or -0.0)."""
    return float(values[int(np.flatnonzero(values == extreme)[0])])


def _spread(values: npt.NDArray[Any]) -> Spread:
    """`Spread.of`, with `statistics.median`'s arithmetic on the middle values as Python numbers."""
    n = len(values)
    middle = np.partition(values, [(n - 1) // 2, n // 2])[[(n - 1) // 2, n // 2]].tolist()
    median = middle[1] if n % 2 else (middle[0] + middle[1]) / 2
    return Spread(min=float(_first(values, np.min(values))), median=float(median),
                  max=float(_first(values, np.max(values))))


def _geometry(view: IndexItems) -> Geometry:
    """`Geometry.of` the items of `view` (of one dimensionality), from the index's columns."""
    axes = int(view.spatial_axes()[0])
    _, shapes = view.ragged("shape")
    shape = shapes.reshape(len(view), axes + 1)
    lengths, spacings = view.ragged("spacing")
    spaced = lengths == axes
    spacing = spacings[np.repeat(spaced, lengths)].reshape(-1, axes).astype(np.float64)
    codes, orientations = view.text("orientation")
    named = [*orientations, None]
    by_orientation: Counter[str] = Counter()
    for c, n in zip(*(a.tolist() for a in np.unique(codes, return_counts=True))):
        if (name := named[c]):
            by_orientation[name] += n
    return Geometry(items=len(view), shape=tuple(_spread(shape[:, 1 + a]) for a in range(axes)),
                    spacing=tuple(_spread(spacing[:, a]) for a in range(axes)) if len(spacing) else (),
                    channels={int(k): int(n) for k, n in zip(*np.unique(shape[:, 0], return_counts=True))},
                    orientations=dict(sorted(by_orientation.items())), spacings=_spacings(spacing))


def _spacings(spacing: npt.NDArray[np.float64]) -> dict[tuple[float, ...], int]:
    """Items per distinct spacing, most first, then by spacing (`Geometry.of`'s order)."""
    if bool(np.all(np.isfinite(spacing))) and not bool(np.any(spacing == 0)):
        distinct, counts = np.unique(spacing, axis=0, return_counts=True)
        found = {tuple(row): int(n) for row, n in zip(distinct.tolist(), counts.tolist())}
    else:  # NaN and signed zeros: Python's equality, as `Counter` of the tuples has it
        found = dict(Counter(tuple(row) for row in spacing.tolist()))
    return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


def _class_frequencies(view: IndexItems) -> dict[int, ClassFrequency]:
    """`aggregate._class_frequencies` from the index's class columns."""
    _, values = view.ragged("classes.value")
    _, voxels = view.ragged("classes.voxels")
    if not len(values):
        return {}
    classes, inverse = np.unique(values.astype(np.int64), return_inverse=True)
    inverse = inverse.reshape(-1)
    total = np.zeros(len(classes), dtype=np.int64)
    np.add.at(total, inverse, voxels.astype(np.int64))
    holding = np.bincount(inverse, weights=None if not len(voxels) else (voxels != 0).astype(np.int64),
                          minlength=len(classes)).astype(np.int64)
    sums = [int(v) for v in total.tolist()]
    whole = sum(sums)
    return {int(k): ClassFrequency(voxels=v, items=int(h), fraction=v / whole if whole else 0.0)
            for k, v, h in zip(classes.tolist(), sums, holding.tolist())}
