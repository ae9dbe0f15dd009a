"""Fault reports: where a worker was when it crashed or hung, for the item's `detail`.

While an item decodes, Python's `faulthandler` writes to a per-item file in the
store's `.labzarr/crash/` (for a URL store, a local temp folder of the run:
faulthandler writes to a file descriptor, which an object has not): the traceback on a fatal signal (a segfault in a C
decoder), and, shortly before the item's time limit, the stacks of a hung task.
A task that finishes removes its report; the driver reads what is left when a
worker dies or an item times out. faulthandler is per process, so reports are
written only where a worker runs one task at a time (our LocalCluster does).
"""

from __future__ import annotations

import faulthandler
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fault_report", "report_path", "summarize_report"]

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def report_path(reports: Path, array: str) -> Path:
    """The fault report file, in the run's `reports` folder, of the item writing `array`."""
    return reports / f"{array.replace('/', '~')}.txt"


@contextmanager
def fault_report(path: Path, *, hang_after: float | None, enabled: bool = True) -> Iterator[None]:
    """Record a fatal signal's traceback (and, after `hang_after` s, the stacks) to `path`; removed on exit."""
    if not enabled:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    was_enabled = faulthandler.is_enabled()
    with path.open("w") as f:
        faulthandler.enable(file=f, all_threads=True)
        if hang_after is not None:
            faulthandler.dump_traceback_later(hang_after, file=f)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
            if was_enabled:
                faulthandler.enable(file=sys.stderr, all_threads=True)
            else:
                faulthandler.disable()
    path.unlink(missing_ok=True)


def summarize_report(text: str) -> tuple[str, str | None] | None:
    """From a faulthandler report: what happened, and the innermost frame of the item's thread (or None)."""
    lines = text.splitlines()
    if not lines:
        return None
    what = lines[0].strip().rstrip("!")
    blocks: list[list[str]] = []
    for line in lines[1:]:
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    ours = (next((b for b in blocks if b[0].startswith("Current thread")), None)
            or next((b for b in blocks if any(" in convert_item" in ln for ln in b)), None))
    frames = [m for m in map(_FRAME.match, ours or []) if m][:2]  # innermost first, then its caller
    if not frames:
        return what, None
    return what, " <- ".join(f"{m['func']} ({'/'.join(Path(m['file']).parts[-2:])}:{m['line']})" for m in frames)
