"""Bar charts for the QC page, drawn by matplotlib's object API (no pyplot: no global figure state)."""

from __future__ import annotations

import io
from collections.abc import Mapping

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["bar_chart", "top_values"]


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
