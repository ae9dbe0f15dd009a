"""`labzarr inspect --stats`: a delivery's statistics (its "fingerprint") as a terminal table.

What nnU-Net's dataset fingerprint and MONAI's DataAnalyzer report, read from
the store's per-item records (`labzarr.store.DatasetStats`), never from voxels:
intensity per channel over every item, per kind and over the mask foreground,
geometry per dimensionality, and mask class frequencies.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from labzarr.store import ChannelStats, DatasetStats, Geometry, Spread

__all__ = ["describe_stats", "shown_channels"]

_COLUMNS = (0.5, 50.0, 99.5)  # the percentiles a row shows; summary.json lists more
_CHANNELS = 4  # channels shown per row group (a 4D series has one per time point); summary.json has them all


def describe_stats(stats: DatasetStats, *, title: str = "statistics", ignore: Collection[int] = ()) -> str:
    """The table `labzarr inspect --stats` prints: `ignore` labels are left out of the foreground."""
    lines = [f"{title}: {stats.items} item(s)" + (f", {stats.missing} without statistics (converted with "
                                                   "[store] statistics = false or an older labzarr)"
                                                   if stats.missing else "")]
    header = (f"  {'intensity':<24} {'voxels':>12} {'min':>10} {'p0.5':>10} {'p50':>10} {'p99.5':>10} "
              f"{'max':>10} {'mean':>10} {'std':>10}")
    rows = _rows("all", stats.channels)
    for kind, s in stats.kinds.items():
        if len(stats.kinds) > 1:
            rows += _rows(kind, s.channels)
    if stats.intensity.classes:
        shown = ", ".join(str(k) for k in stats.intensity.classes if k != 0 and k not in ignore)
        rows += _rows(f"foreground ({shown})", stats.foreground(ignore=ignore))
        rows += [r for k, v in stats.intensity.classes.items() for r in _rows(f"class {k}", v)]
    if rows:
        lines += ["", header, *rows]
    for name, g in stats.geometry.items():
        lines += ["", *_geometry(name, g)]
    if stats.classes:
        lines += ["", f"  {'class':<8} {'voxels':>14} {'share':>8} {'items':>7}"]
        lines += [f"  {k:<8} {c.voxels:>14,} {c.fraction:>8.2%} {c.items:>7}" for k, c in stats.classes.items()]
    return os.linesep.join(lines)


def shown_channels(name: str, channels: Sequence[ChannelStats]) -> list[tuple[str, ChannelStats]]:
    """The first channels of a row group with their labels (`name`, or `name, channel c` for several), as
    `labzarr inspect --stats` and the QC page show them."""
    return [(name if len(channels) == 1 else f"{name}, channel {c}", s) for c, s in enumerate(channels[:_CHANNELS])]


def _rows(name: str, channels: Sequence[ChannelStats]) -> list[str]:
    out = []
    for label, s in shown_channels(name, channels):
        if not s.count:
            out.append(f"  {label:<24} {0:>12}")
            continue
        p = s.percentiles(_COLUMNS)
        nonfinite = f"  ({s.nan:,} NaN, {s.inf:,} inf)" if s.nan or s.inf else ""
        out.append(f"  {label:<24} {s.count:>12,} {_g(s.min)} {_g(p[0])} {_g(p[1])} {_g(p[2])} {_g(s.max)} "
                   f"{_g(s.mean)} {_g(s.std)}{nonfinite}")
    if len(channels) > _CHANNELS:
        out.append(f"  {name}: {len(channels) - _CHANNELS} more channel(s) in summary.json statistics")
    return out


def _geometry(name: str, g: Geometry) -> list[str]:
    axes = ("x", "y", "z") if len(g.shape) == 3 else ("y", "x")
    shape = "   ".join(f"{a} {_spread(s, '.0f')}" for a, s in zip(axes, g.shape))
    out = [f"  {name}s: {g.items}", f"    shape    {shape}"]
    if g.spacing:
        out.append("    spacing  " + "   ".join(f"{a} {_spread(s, '.4g')}" for a, s in zip(axes, g.spacing)) + " mm")
    out.append("    channels " + ", ".join(f"{k}: {n}" for k, n in g.channels.items()))
    if g.orientations:
        out.append("    stored   " + ", ".join(f"{k}: {n}" for k, n in g.orientations.items()))
    return out


def _spread(s: Spread, fmt: str) -> str:
    return f"{s.min:{fmt}}" if s.min == s.max else f"{s.min:{fmt}}..{s.median:{fmt}}..{s.max:{fmt}}"


def _g(v: float) -> str:
    return f"{v:>10.5g}"
