"""Shared benchmark helpers: a result row, timing, peak RSS of a process tree, and the table printer."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Result", "print_table", "time_calls"]


@dataclass(frozen=True)
class Result:
    """One row: `value` in `unit`; `baseline` marks the row the rows of its `group` are compared with."""

    name: str
    value: float
    unit: str
    higher_is_better: bool = True
    baseline: bool = False
    note: str = ""
    group: str = ""  # rows of one group share a unit and a baseline; a section may hold several groups


def time_calls(fn: Callable[[], object], n: int) -> list[float]:
    """Wall seconds of `n` calls of `fn`."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def median_p90(samples: Sequence[float]) -> tuple[float, float]:
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(0.9 * len(s)))]


def print_table(title: str, rows: Sequence[Result]) -> None:
    """Print rows with a ratio column against their group's baseline row (x better than baseline)."""
    print(f"\n## {title}")
    groups = list(dict.fromkeys(r.group for r in rows))
    for group in groups:
        members = [r for r in rows if r.group == group]
        base = next((r for r in members if r.baseline), None)
        if group:
            print(f"\n### {group}")
        print(f"{'what':<52} {'value':>12} {'unit':<10} {'vs baseline':>12}  note")
        for r in members:
            ratio = ""
            if base and base.value and r.value and r.unit == base.unit:  # a ratio across units means nothing
                x = r.value / base.value if r.higher_is_better else base.value / r.value
                ratio = f"{x:.2f}x"
            print(f"{r.name:<52} {r.value:>12.3f} {r.unit:<10} {ratio:>12}  "
                  f"{('(baseline) ' if r.baseline else '') + r.note}")
