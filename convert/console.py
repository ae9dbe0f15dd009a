"""What a person sees on the terminal while and after `labzarr convert` runs.

Progress goes to stderr so stdout carries only the final summary: a tqdm bar
when stderr is a terminal with a width, a plain line every `interval` seconds
(and at the end of each phase) when it is not, e.g. in a CI log, or on a pty
that reports 0 columns (where a bar would print nothing). Both follow bytes,
which move inside a big item, and count items as they finish. Only `cli.py`
uses this.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from .progress import Phase, Progress, ProgressEvent

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["BarProgress", "LineProgress", "collision_lines", "progress_display", "split_lines", "summary_table"]

_VERB: Mapping[Phase, tuple[str, str]] = {"probe": ("probing", "files"), "convert": ("converting", "items")}


def _tqdm() -> type[tqdm[Any]]:
    """tqdm, imported where a run shows progress: `--quiet` shows none, and a run without a cluster waits for
    its imports before its first task (docs/benchmarks.md, "The floor under issue 34's targets")."""
    from tqdm import tqdm

    return tqdm


def _mb(n: float) -> str:
    return str(_tqdm().format_sizeof(n, suffix="B", divisor=1000))


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
        # Bytes move inside a big item; items only when one finishes.
        if ev.done >= ev.total:
            pct = 100
        else:
            pct = 100 * ev.bytes_done // ev.bytes_total if ev.bytes_total else 100 * ev.done // ev.total
        rate = ev.bytes_done / elapsed if elapsed > 0 else 0.0
        # Time follows bytes more than item counts (one 2 GB volume vs a hundred small ones).
        tqdm = _tqdm()
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
    """A tqdm bar per phase over its bytes (with ETA and MB/s), the items done in the postfix; over items
    when the phase has no bytes."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._bar: tqdm[Any] | None = None
        self._phase: Phase | None = None
        self._by_bytes = True

    def __call__(self, ev: ProgressEvent) -> None:
        verb, unit = _VERB[ev.phase]
        if ev.phase != self._phase or self._bar is None:
            self.close()
            self._by_bytes = ev.bytes_total > 0
            common: dict[str, Any] = {"desc": verb, "file": self._stream, "dynamic_ncols": True, "smoothing": 0.1}
            tqdm = _tqdm()
            self._bar = (tqdm(total=ev.bytes_total, unit="B", unit_scale=True, unit_divisor=1000, **common)
                         if self._by_bytes else tqdm(total=ev.total, unit=unit[:-1], **common))
            self._phase = ev.phase
        if self._by_bytes:
            self._bar.set_postfix_str(f"{ev.done:,}/{ev.total:,} {unit}", refresh=False)
            self._bar.update(ev.bytes_done - self._bar.n)
        else:
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
    """The progress callback for a run: a bar on a terminal that has a width, lines otherwise, None when quiet."""
    if quiet:
        yield None
        return
    if not stream.isatty() or _columns(stream) == 0:
        yield LineProgress(stream, interval=interval)
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    bar = BarProgress(stream)
    with ExitStack() as stack:
        # Log records (a worker warning) would tear the bar; tqdm.write prints them above it instead.
        stack.enter_context(logging_redirect_tqdm([logging.getLogger()]))
        stack.callback(bar.close)
        yield bar


def _columns(stream: TextIO) -> int:
    """The width of the terminal `stream` writes to; 0 where it reports none (a pty never given a size)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):  # no file descriptor, or not a terminal after all: no width to draw in
        return 0


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
    if summary.get("id_collisions"):
        lines += ["", *collision_lines(summary["id_collisions"], more="all in summary.json id_collisions")]
    if summary.get("label_workbook"):
        lines += ["", *_label_lines(summary)]
    if summary.get("splits"):
        lines += ["", *split_lines(summary["splits"])]
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


_FILES_SHOWN = 8  # files named per colliding ID on a terminal; summary.json lists all


def collision_lines(entries: Sequence[Mapping[str, Any]], *, limit: int = 5, more: str = "", indent: str = "  "
                    ) -> list[str]:
    """Warning lines for a terminal from `collision_summary` entries: the IDs (up to `limit`, 0 for all), each
    with its files (up to `_FILES_SHOWN`); `more` says where the rest are listed."""
    if not entries:
        return []
    lines = [f"{indent}warning: {len(entries):,} item ID(s) given to distinct contents (stored as <id>~1, "
             "<id>~2 with one label between them); fix [items] id_pattern, or ask the lab which is which:"]
    shown = entries if limit <= 0 else entries[:limit]
    for e in shown:
        items = e["items"]
        files = ", ".join(i["source"] + (f" [{i['n_files']} files]" if i["n_files"] > 1 else "")
                          for i in items[:_FILES_SHOWN])
        if len(items) > _FILES_SHOWN:
            files += f" and {len(items) - _FILES_SHOWN:,} more"
        lines.append(f"{indent}  {e['id']!r}: {e['contents']} contents: {files}")
    if len(shown) < len(entries):
        lines.append(f"{indent}  and {len(entries) - len(shown):,} more IDs" + (f" ({more})" if more else ""))
    return lines


_LEAK_WHAT = {"group_in_several_splits": "group {key!r} is pinned to several splits",
              "content_in_several_splits": "one content ({key:.30}...) is in several splits",
              "stratum_disagrees": "group {key!r} disagrees on the stratification label"}


def split_lines(splits: Mapping[str, Any], *, limit: int = 5, indent: str = "  ") -> list[str]:
    """The split sizes (groups and items per split or fold), then a warning for each leakage finding (up to
    `limit`, 0 for all; summary.json `splits.leakage` lists all)."""
    sizes = ", ".join(f"{name} {n['groups']:,} groups / {n['items']:,} items" for name, n in splits["sizes"].items())
    lines = [f"{indent}splits: {sizes}"]
    leaks = splits.get("leakage", [])
    for leak in leaks if limit <= 0 else leaks[:limit]:
        what = _LEAK_WHAT[leak["kind"]].format(key=leak["key"])
        shown = ", ".join(f"{i['item_id']} = {i['where']!r}" if leak["kind"] == "stratum_disagrees"
                          else f"{i['item_id']} in {i['where']}" for i in leak["items"][:_FILES_SHOWN])
        tail = f"; rejected split_leakage: {', '.join(leak['rejected'])}" if leak["rejected"] else ""
        lines.append(f"{indent}warning: [splits] {what}: {shown}{tail}")
    if 0 < limit < len(leaks):
        lines.append(f"{indent}  and {len(leaks) - limit:,} more in summary.json splits.leakage")
    return lines
