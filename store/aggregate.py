"""A delivery's statistics (its "fingerprint"), merged from the per-item records of the store's index.

Invariant: `dataset_stats` is a pure function of the items it is given, and
every merge in it is independent of their order (`stats.py`): the aggregates of
a store written by an incremental run, which reuses the records of unchanged
items, equal those of a full recompute. The same function serves
`summary.json`, the QC page, `labzarr inspect --stats` and `PatchDataset.stats`,
so all four agree.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .format.index import IndexItem
from .format.stats import ChannelStats, ItemStats, merge_channels

__all__ = ["PERCENTILES", "ClassFrequency", "DatasetStats", "Geometry", "IntensityStats", "Spread", "dataset_stats"]

PERCENTILES = (0.5, 1.0, 5.0, 25.0, 50.0, 75.0, 95.0, 99.0, 99.5)  # what the summaries list
_TOP_SPACINGS = 10  # distinct spacings listed in a summary; the rest are counted together


@dataclass(frozen=True, slots=True)
class IntensityStats:
    """Voxel statistics merged over `items` items, per channel; with masks, also per mask class."""

    items: int = 0
    channels: tuple[ChannelStats, ...] = ()
    classes: Mapping[int, tuple[ChannelStats, ...]] = field(default_factory=dict)

    def foreground(self, *, ignore: Collection[int] = ()) -> tuple[ChannelStats, ...]:
        """Per channel, the voxels of every mask class but 0 and `ignore` (an ignore label); () without masks."""
        return merge_channels(s for k, s in sorted(self.classes.items()) if k != 0 and k not in ignore)

    @classmethod
    def merge(cls, stats: Sequence[ItemStats]) -> IntensityStats:
        """The items' statistics as one."""
        by_class: dict[int, list[tuple[ChannelStats, ...]]] = {}
        for s in stats:
            for k, v in s.classes.items():
                by_class.setdefault(k, []).append(v)
        return cls(items=len(stats), channels=merge_channels(s.channels for s in stats),
                   classes={k: merge_channels(v) for k, v in sorted(by_class.items())})

    def summary(self) -> dict[str, Any]:
        """A JSON-able digest: per channel count, min, max, mean, std, non-finite counts and `PERCENTILES`."""
        out: dict[str, Any] = {"items": self.items, "channels": [_channel_summary(c) for c in self.channels]}
        if self.classes:
            out["foreground"] = [_channel_summary(c) for c in self.foreground()]
            out["classes"] = {str(k): [_channel_summary(c) for c in v] for k, v in self.classes.items()}
        return out


@dataclass(frozen=True, slots=True)
class Spread:
    """Smallest, median and largest of one quantity over the items."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(min=float(min(values)), median=float(statistics.median(values)), max=float(max(values)))


@dataclass(frozen=True, slots=True)
class Geometry:
    """Spacing, shape and orientation over the items of one dimensionality (volumes, or 2D images).

    `spacing` and `shape` are per spatial axis (x, y, z for a volume; y, x for an image); `spacing` covers the
    items that have one (PNG and JPEG have none). `channels` counts items per channel count, `orientations`
    items per source orientation (before reorientation to RAS), `spacings` items per distinct spacing.
    """

    items: int
    shape: tuple[Spread, ...]
    spacing: tuple[Spread, ...] = ()
    channels: Mapping[int, int] = field(default_factory=dict)
    orientations: Mapping[str, int] = field(default_factory=dict)
    spacings: Mapping[tuple[float, ...], int] = field(default_factory=dict)

    @classmethod
    def of(cls, items: Sequence[IndexItem]) -> Geometry:
        spaced = [i.spacing for i in items if len(i.spacing) == i.spatial_axes]
        axes = items[0].spatial_axes
        return cls(items=len(items), shape=tuple(Spread.of([i.shape[1 + a] for i in items]) for a in range(axes)),
                   spacing=tuple(Spread.of([s[a] for s in spaced]) for a in range(axes)) if spaced else (),
                   channels=dict(sorted(Counter(i.shape[0] for i in items).items())),
                   orientations=dict(sorted(Counter(i.orientation for i in items if i.orientation).items())),
                   spacings=dict(sorted(Counter(spaced).items(), key=lambda kv: (-kv[1], kv[0]))))

    def summary(self) -> dict[str, Any]:
        top = list(self.spacings.items())
        out: dict[str, Any] = {"items": self.items, "shape": [_spread(s) for s in self.shape],
                               "channels": {str(k): v for k, v in self.channels.items()}}
        if self.spacing:
            out["spacing"] = [_spread(s) for s in self.spacing]
            out["spacings"] = {"x".join(f"{v:.6g}" for v in k): n for k, n in top[:_TOP_SPACINGS]}
            if len(top) > _TOP_SPACINGS:
                out["spacings"]["other"] = sum(n for _, n in top[_TOP_SPACINGS:])
        if self.orientations:
            out["orientations"] = dict(self.orientations)
        return out


@dataclass(frozen=True, slots=True)
class ClassFrequency:
    """One mask class over the items: its voxels, the items holding any, and its share of all mask voxels."""

    voxels: int
    items: int
    fraction: float


@dataclass(frozen=True, slots=True)
class DatasetStats:
    """Statistics of a set of items: intensity over all of them and per kind, geometry per dimensionality
    (``"volume"``, ``"image"``), and mask class frequencies. `missing` counts the items without intensity
    statistics (converted before labzarr computed them, or with ``[store] statistics = false``)."""

    items: int
    missing: int
    intensity: IntensityStats
    kinds: Mapping[str, IntensityStats] = field(default_factory=dict)
    geometry: Mapping[str, Geometry] = field(default_factory=dict)
    classes: Mapping[int, ClassFrequency] = field(default_factory=dict)

    @property
    def channels(self) -> tuple[ChannelStats, ...]:
        """Per channel, every voxel of every item (`intensity.channels`)."""
        return self.intensity.channels

    def foreground(self, *, ignore: Collection[int] = ()) -> tuple[ChannelStats, ...]:
        """Per channel, the mask foreground of every item (classes but 0 and `ignore`); () without masks."""
        return self.intensity.foreground(ignore=ignore)

    def summary(self) -> dict[str, Any]:
        """The JSON-able form `summary.json` holds under `statistics` (byte-stable for the same items)."""
        out: dict[str, Any] = {"items": self.items, "missing": self.missing, "percentiles": list(PERCENTILES),
                               "intensity": self.intensity.summary(),
                               "kinds": {k: v.summary() for k, v in self.kinds.items()},
                               "geometry": {k: v.summary() for k, v in self.geometry.items()}}
        if self.classes:
            out["classes"] = {str(k): {"voxels": c.voxels, "items": c.items, "fraction": c.fraction}
                              for k, c in self.classes.items()}
        return out


def dataset_stats(items: Iterable[IndexItem], records: Mapping[str, ItemStats] | None = None) -> DatasetStats:
    """The statistics of `items` (index entries), merged from their full per-item `records` (by `IndexItem.key`,
    as the store's `statistics` group holds them; an item without one is `missing`). Without `records`, from the
    moments the index entries keep: means and deviations, but no percentiles."""
    items = list(items)
    with_stats = [(i, s) for i in items
                  if (s := i.stats if records is None else records.get(i.key)) is not None]
    kinds: dict[str, list[ItemStats]] = {}
    for i, s in with_stats:
        kinds.setdefault(i.kind or "?", []).append(s)
    geometry = {name: Geometry.of(group) for name, axes in (("volume", 3), ("image", 2))
                if (group := [i for i in items if i.spatial_axes == axes])}
    overall = IntensityStats.merge([s for _, s in with_stats])
    return DatasetStats(items=len(items), missing=len(items) - len(with_stats), intensity=overall,
                        # one kind holds every item: its merge is the overall one (the histograms are most of it)
                        kinds={k: overall if len(kinds) == 1 else IntensityStats.merge(v)
                               for k, v in sorted(kinds.items())},
                        geometry=geometry, classes=_class_frequencies(items))


def _class_frequencies(items: Sequence[IndexItem]) -> dict[int, ClassFrequency]:
    voxels: Counter[int] = Counter()
    holding: Counter[int] = Counter()
    for i in items:
        for k, c in i.classes.items():
            voxels[k] += c.voxels
            holding[k] += 1 if c.voxels else 0
    total = sum(voxels.values())
    return {k: ClassFrequency(voxels=voxels[k], items=holding[k], fraction=voxels[k] / total if total else 0.0)
            for k in sorted(voxels)}


def _channel_summary(c: ChannelStats) -> dict[str, Any]:
    out: dict[str, Any] = {"count": c.count, "min": c.min, "max": c.max, "mean": c.mean, "std": c.std}
    if c.nan or c.inf:
        out |= {"nan": c.nan, "inf": c.inf}
    if c.count:
        out["percentiles"] = list(c.percentiles(PERCENTILES))
    return out


def _spread(s: Spread) -> dict[str, float]:
    return {"min": s.min, "median": s.median, "max": s.max}
