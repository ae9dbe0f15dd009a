"""Third-party warnings during a run go to its run log (`last-run.json`, `warnings`), never to the console.

A library's warning (nibabel's "The DICOM readers are highly experimental", a decoder's note on a value it copes
with) would otherwise be printed by the driver and by every worker process to the console they share, `--quiet`
or not. While a run lasts, `warnings.showwarning` records a warning instead of printing it: in the driver here,
and on a cluster's workers through a worker plugin (`on_cluster.py`), whose warnings the driver collects when the
run ends. Python's filters still decide which warnings are shown, so each is recorded as often as it would have
been printed (once per place and process, by default). This module imports nothing heavy: a run in one process
(`in_process.py`) records its warnings here alone, and the records other libraries log there (pydicom's "Invalid
value for VR IS"), which on a cluster a worker logs where no console sees them (`libraries_logged`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

__all__ = ["RunWarnings", "describe", "libraries_logged", "recorded"]


def describe(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """One warning as the run log lists it: its class, its text and where it was raised."""
    return f"{category.__name__}: {message} ({'/'.join(Path(filename).parts[-2:])}:{lineno})"


class RunWarnings:
    """The warnings of one run so far: this process's, and with `collected` those `elsewhere` gives (its workers')."""

    def __init__(self, elsewhere: Callable[[], Iterable[str]] = tuple) -> None:
        self._elsewhere = elsewhere
        self._seen: list[str] = []

    def show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        self._seen.append(describe(message, category, filename, lineno))

    def logged(self, record: logging.LogRecord) -> None:
        """Record another library's log record, as the run log lists it."""
        self._seen.append(f"{record.levelname} logged by {record.name}: {record.getMessage()}")

    def collected(self) -> list[str]:
        """Every warning recorded here and elsewhere so far, each once, sorted."""
        return sorted(set(self._seen) | set(self._elsewhere()))


@contextmanager
def recorded(elsewhere: Callable[[], Iterable[str]] = tuple) -> Iterator[RunWarnings]:
    """Record this process's warnings (and `elsewhere`'s, when collected) while the context lasts."""
    seen = RunWarnings(elsewhere)
    with warnings.catch_warnings():
        warnings.showwarning = seen.show
        yield seen


@contextmanager
def libraries_logged(seen: RunWarnings) -> Iterator[None]:
    """While the context lasts, what other libraries log (any logger outside `labzarr`) goes to `seen` rather than
    to the console through the root logger's handlers (the `labzarr` command's); labzarr's own lines still show."""

    def ours(record: logging.LogRecord) -> bool:
        if record.name == "labzarr" or record.name.startswith("labzarr."):
            return True
        seen.logged(record)
        return False

    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(ours)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(ours)

