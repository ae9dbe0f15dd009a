"""Third-party warnings during a run go to its run log (`last-run.json`, `warnings`), never to the console.

A library's warning (nibabel's "The DICOM readers are highly experimental", a decoder's note on a value it copes
with) would otherwise be printed by the driver and by every worker process to the console they share, `--quiet`
or not. While a run lasts, `warnings.showwarning` records a warning instead of printing it, in the driver and,
through a dask worker plugin (so restarted workers too), in every worker: a worker sends its warnings to the
scheduler's event log under this run's name, and the driver collects them when the run ends. Python's filters
still decide which warnings are shown, so each is recorded as often as it would have been printed (once per
place and process, by default).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from distributed import Client, Worker
from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["RunWarnings", "describe", "run_warnings"]

_TOPIC = "labzarr-warnings"

def describe(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """One warning as the run log lists it: its class, its text and where it was raised."""
    return f"{category.__name__}: {message} ({'/'.join(Path(filename).parts[-2:])}:{lineno})"


class _ToEventLog(WorkerPlugin):
    """On each worker while a run lasts: its shown warnings go to the scheduler's event log, tagged with the run."""

    def __init__(self, run: str) -> None:
        self.run = run
        self._saved: Callable[..., None] | None = None

    def setup(self, worker: Worker) -> None:
        self._saved = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            worker.log_event(_TOPIC, {"run": self.run, "warning": describe(message, category, filename, lineno)})

        warnings.showwarning = show

    def teardown(self, worker: Worker) -> None:
        if self._saved is not None:
            warnings.showwarning = self._saved


class RunWarnings:
    """The warnings of one run so far: the driver's, and with `collected` the workers' too."""

    def __init__(self, client: Client, run: str) -> None:
        self._client, self._run = client, run
        self._seen: list[str] = []

    def show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        self._seen.append(describe(message, category, filename, lineno))

    def collected(self) -> list[str]:
        """Every warning recorded by the driver and the workers so far, each once, sorted."""
        events: Any = self._client.get_events(_TOPIC)
        workers = [m["warning"] for _, m in events if isinstance(m, dict) and m.get("run") == self._run]
        return sorted(set(self._seen) | set(workers))

def _plugin_name(run: str) -> str:
    return f"{_TOPIC}-{run}"


@contextmanager
def run_warnings(client: Client, run: str) -> Iterator[RunWarnings]:
    """Record the warnings of run `run` (its lock's id) in the driver and on `client`'s workers while it lasts."""
    recorded = RunWarnings(client, run)
    client.register_plugin(_ToEventLog(run), name=_plugin_name(run))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = recorded.show
            yield recorded
    finally:
        client.unregister_worker_plugin(_plugin_name(run))
