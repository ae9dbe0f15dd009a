"""Where a run's jobs run: the one seam between the driver and what executes its probes and tasks.

The driver (`driver.py`) walks, plans and writes; everything it hands out (probe batches, volumes to stage, the
conversion jobs, the labels of the arrays) goes through a `Runner`. Three stand behind it:

- `on_cluster.ClusterRunner`: a dask.distributed cluster, the embedded one or a scheduler's; a crash or a hang
  costs its item only (`supervise.py`).
- `in_process.InProcessRunner`: this process, one job after the other, with no dask imported; what a tiny
  delivery needs (docs/benchmarks.md, "Fixed cost"). A reader that crashes or hangs here takes the process with
  it, so the `labzarr` command runs it in a child it watches (`small_run.py`).
- `forked.ForkedRunner`: worker processes forked from this one, no dask either; what a small delivery needs. A
  worker that dies ends the run (`WorkerDied`), and a hung job is not cut short: the `labzarr` command runs it in
  the same watched child.

Invariant: the runner decides where and when a job runs, never what it writes or which row it gives. All run the
same job functions (`probe_batch`, `stage_parts`, `set_array_labels`, and the conversion jobs' `tasks.py` names, in
its order, a volume's parts gathered there) with the same arguments, so the store and the manifest are the same
bytes whichever ran them (`tests/convert/test_in_process.py`). This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from labzarr.store import Location

    from ..manifest import Row
    from ..plan.build import VolumeTask
    from ..plan.parts import VolumePart
    from ..probe import ProbedBatch
    from ..progress import Progress
    from .jobs import Jobs
    from .settings import TaskSettings
    from .warnings_log import RunWarnings

__all__ = ["Runner", "WorkerDied"]


class WorkerDied(RuntimeError):
    """A worker process died (a fatal signal in a decoder, the OOM killer) where the runner cannot tell which item
    it was on: the run stops, and its caller converts on a cluster, which can (`small_run.py`)."""


class Runner(Protocol):
    """What the driver asks of whatever runs its jobs."""

    def workers(self) -> int:
        """Worker processes the jobs share out among (batches and parts are sized for them)."""
        ...

    def threads(self) -> int:
        """Jobs that run at once, in all: what a window of jobs in flight is sized for (`window.window_size`)."""
        ...

    def fault_reports(self) -> bool:
        """Whether a job's fatal signal or hang leaves a report (faulthandler is per process: one job at a time)."""
        ...

    def encode_threads(self) -> int:
        """Each job's encoding threads: the cores shared out among the jobs that run at once."""
        ...

    def warnings(self, run: str) -> AbstractContextManager[RunWarnings]:
        """Third-party warnings of run `run` recorded, wherever its jobs run, while the context lasts."""
        ...

    def probe(self, batches: Sequence[Sequence[tuple[str, str]]], plugins: Sequence[str], window: int,
              meanwhile: Callable[[], object]) -> Iterator[ProbedBatch]:
        """Each batch's probes (`probe.probe_batch`), in the order they finish; `meanwhile` is called once, while the
        first batches run."""
        ...

    def stage_parts(self, store: Location, tasks: Sequence[VolumeTask], settings: TaskSettings, *, workers: int,
                    parts_bytes: int) -> dict[str, tuple[VolumePart, ...]]:
        """The parts of each of `tasks` worth writing in parts, by array, each staged (`part_task.stage_parts`)."""
        ...

    def run_tasks(self, jobs: Jobs, settings: TaskSettings, *, item_timeout: float, window: int,
                  sink: Callable[[Row, bool], object], progress: Progress | None) -> int:
        """Run every job, each item's row handed to `sink` as it arrives (`supervise.run_tasks`); how many rows."""
        ...

    def set_labels(self, store: Location, batches: Sequence[Sequence[tuple[str, dict[str, str]]]]) -> None:
        """Each batch's arrays' `labels` attrs set (`write.arrays.set_array_labels`)."""
        ...
