"""Charts for the QC page, drawn by matplotlib's object API (no pyplot: no global figure state)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from labzarr.store import ChannelStats
from labzarr.store.format.stats import bin_edges

__all__ = ["bar_chart", "intensity_chart", "top_values"]

_BARS = 120  # bars of an intensity histogram between its 0.5th and 99.5th percentiles


def top_values(counts: Mapping[str, int], *, top: int) -> dict[str, int]:
    """The `top` most frequent values (ties by value text), the rest summed as "other (n values)"."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = dict(ranked[:top])
    rest = ranked[top:]
    if rest:
        out[f"other ({len(rest):,} values)"] = sum(n for _, n in rest)
    return out


def bar_chart(counts: Mapping[str, int], *, title: str, color: str = "#4c72b0", top: int = 25) -> bytes:
    """A horizontal bar chart of `counts` (most frequent first) as PNG bytes, same bytes for the same input."""
    shown = top_values(counts, top=top)
    names = [n if n else "(empty)" for n in shown]
    fig = Figure(figsize=(4.8, 0.9 + 0.26 * len(shown)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    bars = ax.barh(range(len(shown)), list(shown.values()), color=color)
    ax.set_yticks(range(len(shown)), names)
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{v:,}" for v in shown.values()], padding=3, fontsize=8)
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_xlabel("items", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=8)
    ax.margins(x=0.12)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})  # no version stamp: stable bytes
    return buf.getvalue()


def intensity_chart(channels: Mapping[str, ChannelStats], *, title: str) -> bytes:
    """Each named channel's voxel histogram (from its stored statistics, re-binned evenly between the lowest 0.5th
    and highest 99.5th percentile, each curve as a share of its voxels), as PNG bytes."""
    shown = {k: c for k, c in channels.items() if c.count}
    lo = min(c.percentile(0.5) for c in shown.values())
    hi = max(c.percentile(99.5) for c in shown.values())
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, _BARS + 1)
    fig = Figure(figsize=(6.4, 2.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, c in shown.items():
        ords, counts = c.histogram.arrays()
        low, high = (np.clip(e, c.min, c.max) for e in bin_edges(ords))  # an edge bin's far side may be infinite
        # Each stored bin's voxels spread evenly over its width (the cumulative count, linear within a bin), so
        # the stored bins' uneven widths do not alias into the even bars.
        cum = np.cumsum(counts)
        xs = np.stack([low, high], axis=1).ravel()
        ys = np.stack([cum - counts, cum], axis=1).ravel()
        summed = np.diff(np.interp(edges, xs, ys))
        ax.stairs(summed / max(1, c.count), edges, label=name, linewidth=1.2)
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_xlabel("intensity (0.5th to 99.5th percentile)", fontsize=8)
    ax.set_ylabel("share of voxels", fontsize=8)
    ax.tick_params(labelsize=8)
    if len(shown) > 1:
        ax.legend(fontsize=8, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
