"""The runner of a run in this process (`runner.Runner`): every job run here, one after the other, no dask.

A small delivery's run on a cluster is mostly the cluster's start: importing distributed and dask, forking the
worker server and its workers, registering them (docs/benchmarks.md, "Fixed cost"). Here the same job functions
run in plan order in this process, each called as a worker would call it (under a worker's zarr configuration,
`write.arrays.worker_metadata`, not the driver's), so the store and the manifest are the same bytes
(`tests/convert/test_in_process.py`); one process means one worker: no volume is written in parts, and each job's
encoding threads are this machine's usable cores.

What a cluster gives and this does not: a reader that crashes (a fatal signal) or hangs takes this process with it,
and no fault report is written. The `labzarr` command runs this runner in a child it watches, and converts on a
cluster where the child dies or stalls (`small_run.py`); library callers choose it with
`convert_delivery(..., in_process=True)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..manifest import Row
from ..probe import ProbedBatch, probe_batch
from ..progress import Progress
from .jobs import Emitted, Jobs
from .warnings_log import RunWarnings, libraries_logged, recorded

if TYPE_CHECKING:
    from labzarr.store import Location

    from ..plan.build import VolumeTask
    from ..plan.parts import VolumePart
    from .settings import TaskSettings

__all__ = ["InProcessRunner"]


class InProcessRunner:
    """This process as the runner of a run: one worker, one job at a time."""

    def workers(self) -> int:
        return 1

    def threads(self) -> int:
        return 1

    def fault_reports(self) -> bool:
        return False  # faulthandler's report would be this process's; the command's watcher reruns on a cluster

    def encode_threads(self) -> int:
        from .settings import usable_cores

        return usable_cores()

    @contextmanager
    def warnings(self, run: str) -> Iterator[RunWarnings]:
        """This process's warnings, and other libraries' log records, which a worker would have logged out of the
        console's sight, recorded in the run log (`warnings_log.py`)."""
        with recorded() as seen, libraries_logged(seen):
            yield seen

    def probe(self, batches: Sequence[Sequence[tuple[str, str]]], plugins: Sequence[str], window: int,
              meanwhile: Callable[[], object]) -> Iterator[ProbedBatch]:
        from . import _lean_pydicom  # noqa: F401  # before a reader imports pydicom, as a worker does

        meanwhile()
        for batch in batches:
            yield probe_batch(batch, plugins=list(plugins))

    def stage_parts(self, store: Location, tasks: Sequence[VolumeTask], settings: TaskSettings, *, workers: int,
                    parts_bytes: int) -> dict[str, tuple[VolumePart, ...]]:
        from ..write.arrays import worker_metadata
        from .part_task import stage_parts

        with worker_metadata():
            staged = {t.array: stage_parts(store, t, settings, workers=workers, parts_bytes=parts_bytes)
                      for t in tasks}
        return {array: parts for array, parts in staged.items() if parts}

    def run_tasks(self, jobs: Jobs, settings: TaskSettings, *, item_timeout: float, window: int,
                  sink: Callable[[Row, bool], object], progress: Progress | None) -> int:
        """Every job in the cluster's submission order (`supervise.py`), its rows handed to `sink` as it ends. A
        store that cannot be written stops the run with the cluster's `UsageError`; any other exception is a bug
        in our code and is raised."""
        from ..write.arrays import StoreWriteError, worker_metadata
        from .boundary import store_failed

        try:
            with worker_metadata():
                return _run(jobs, settings, Emitted(jobs, sink, progress))
        except StoreWriteError as exc:
            raise store_failed(exc) from exc

    def set_labels(self, store: Location, batches: Sequence[Sequence[tuple[str, dict[str, str]]]]) -> None:
        from ..write.arrays import set_array_labels, worker_metadata

        with worker_metadata():
            for batch in batches:
                set_array_labels(store, batch)


def _run(jobs: Jobs, settings: TaskSettings, out: Emitted) -> int:
    """Every job, in the cluster's submission order, its rows handed on as it ends; how many rows."""
    from ..plan.stacks import ShardTask
    from .tasks import PartsDone, call_of, in_order

    parts = PartsDone(jobs.parts, settings)
    out.start()
    for job in in_order(jobs):
        fn, kwargs = call_of(job, jobs)
        out.rows(parts.rows(job, fn(job, settings, **kwargs)), planar=isinstance(job, ShardTask))
    return out.done
