"""What a person sees on the terminal while and after `labzarr convert` runs.

Progress goes to stderr so stdout carries only the final summary: a tqdm bar
when stderr is a terminal, a plain line every `interval` seconds (and at the
end of each phase) when it is not, e.g. in a CI log. Only `cli.py` uses this.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from .progress import Phase, Progress, ProgressEvent

__all__ = ["BarProgress", "LineProgress", "progress_display", "summary_table"]

_VERB: Mapping[Phase, tuple[str, str]] = {"probe": ("probing", "files"), "convert": ("converting", "items")}


def _mb(n: float) -> str:
    return str(tqdm.format_sizeof(n, suffix="B", divisor=1000))


def _rate(n: float, seconds: float) -> str:
    return f"{n / seconds / 1e6:,.2f} MB/s" if seconds > 0 else "- MB/s"


class LineProgress:
    """Plain progress lines: the first event of a phase, then one every `interval` s, and the phase's end."""

    def __init__(self, stream: TextIO, *, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream, self._interval, self._clock = stream, interval, clock
        self._phase: Phase | None = None
        self._started = self._last = 0.0

    def __call__(self, ev: ProgressEvent) -> None:
        now = self._clock()
        if ev.phase != self._phase:
            self._phase, self._started, self._last = ev.phase, now, -math.inf
        if ev.done < ev.total and now - self._last < self._interval:
            return
        self._last = now
        self._stream.write(self.line(ev, now - self._started) + "\n")
        self._stream.flush()

    @staticmethod
    def line(ev: ProgressEvent, elapsed: float) -> str:
        """One self-contained line: counts, bytes, throughput and the time left."""
        verb, unit = _VERB[ev.phase]
        pct = 100 * ev.done // ev.total if ev.total else 100
        rate = ev.bytes_done / elapsed if elapsed > 0 else 0.0
        # Time follows bytes more than item counts (one 2 GB volume vs a hundred small ones).
        if ev.done >= ev.total:
            left = f"done in {tqdm.format_interval(elapsed)}"
        elif ev.bytes_done and ev.bytes_total:
            left = f"ETA {tqdm.format_interval(elapsed * (ev.bytes_total - ev.bytes_done) / ev.bytes_done)}"
        elif ev.done:
            left = f"ETA {tqdm.format_interval(elapsed * (ev.total - ev.done) / ev.done)}"
        else:
            left = "ETA ?"
        return (f"labzarr: {verb} {ev.done:,}/{ev.total:,} {unit} ({pct}%), "
                f"{_mb(ev.bytes_done)}/{_mb(ev.bytes_total)}, {_mb(rate)}/s, {left}")


class BarProgress:
    """A tqdm bar per phase: items with ETA, bytes and MB/s in the postfix."""

    def __init__(self, stream: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream, self._clock = stream, clock
        self._bar: tqdm[Any] | None = None
        self._phase: Phase | None = None
        self._started = 0.0

    def __call__(self, ev: ProgressEvent) -> None:
        if ev.phase != self._phase or self._bar is None:
            self.close()
            verb, unit = _VERB[ev.phase]
            self._bar = tqdm(total=ev.total, desc=verb, unit=unit[:-1], file=self._stream, dynamic_ncols=True,
                             smoothing=0.1)
            self._phase, self._started = ev.phase, self._clock()
        elapsed = self._clock() - self._started
        rate = ev.bytes_done / elapsed if elapsed > 0 else 0.0
        self._bar.set_postfix_str(f"{_mb(ev.bytes_done)}/{_mb(ev.bytes_total)}, {_mb(rate)}/s", refresh=False)
        self._bar.update(ev.done - self._bar.n)
        if ev.done >= ev.total:
            self.close()

    def close(self) -> None:
        """Finish the current bar (its last state stays on screen)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@contextmanager
def progress_display(stream: TextIO, *, quiet: bool, interval: float = 10.0) -> Iterator[Progress | None]:
    """The progress callback for a run: a bar on a terminal, lines otherwise, None when quiet."""
    if quiet:
        yield None
        return
    if not stream.isatty():
        yield LineProgress(stream, interval=interval)
        return
    bar = BarProgress(stream)
    with ExitStack() as stack:
        # Log records (a worker warning) would tear the bar; tqdm.write prints them above it instead.
        stack.enter_context(logging_redirect_tqdm([logging.getLogger()]))
        stack.callback(bar.close)
        yield bar


def summary_table(summary: Mapping[str, Any], run_log: Mapping[str, Any]) -> str:
    """The final table of a run: counts per status and reason (`summary`), then what this run did, its time,
    bytes and throughput (`run_log`)."""
    c, t, b = summary["counts"], run_log["timings"], run_log.get("bytes", {})
    total_s, convert_s = t.get("total_s", 0.0), t.get("convert_s", 0.0)
    files_b, conv_b = b.get("files", 0), b.get("converted", 0)
    lines = [f"{summary['delivery']}: {c['items']:,} items from {c['files']:,} files", "",
             f"  {'status':<12}{'items':>7}"]
    lines += [f"  {s:<12}{c.get(s, 0):>7,}" for s in ("ok", "rejected", "ignored")]
    if summary["reasons"]:
        lines += ["", f"  {'reason':<30}{'items':>7}"]
        lines += [f"  {r:<30}{n:>7,}" for r, n in summary["reasons"].items()]
    if summary.get("label_workbook"):
        lines += ["", *_label_lines(summary)]
    phases = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in t.items() if k != "total_s")
    run = run_log.get("run")
    if run is not None:  # incremental runs: what this run decoded, what it reused from the store
        lines += ["", f"  {run['converted']:,} converted, {run['unchanged']:,} unchanged"]
    lines += ["", f"  time {total_s:.1f} s ({phases})",
              f"  read {files_b / 1e6:,.1f} MB in {total_s:.1f} s ({_rate(files_b, total_s)} overall), "
              f"decoded {conv_b / 1e6:,.1f} MB in {convert_s:.1f} s ({_rate(conv_b, convert_s)})"]
    return "\n".join(lines)


def _label_lines(s: Mapping[str, Any]) -> list[str]:
    book = s["label_workbook"]
    lines = [f"  labels from {book['path']} sheet {book['sheet_index']} {book['sheet']!r} "
             f"(header row {book['header_row']}):"]
    for name, counts in s["labels"].items():
        values = ", ".join(f"{v} {n}" for v, n in counts.items()) or "none"
        lines.append(f"    {name:<28} {values}")
    unmatched = s.get("unmatched_workbook_ids") or []
    if unmatched:
        ids = ", ".join(f"{u['id'].strip()!r} ({u['cell']})" for u in unmatched[:5])
        more = len(unmatched) - 5
        lines.append(f"    workbook IDs matching no item: {ids}" + (f" and {more} more" if more > 0 else ""))
    if s.get("unlabelled_items"):
        lines.append(f"    items without a label: {len(s['unlabelled_items'])} (see manifest.csv)")
    return lines
