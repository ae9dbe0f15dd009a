"""The runner of a dask.distributed cluster (`runner.Runner`): the embedded one or an existing scheduler's.

Probe batches and volumes to stage are mapped onto the workers and collected as they finish, a window of them in
flight (`window.py`); the conversion jobs are supervised by `supervise.py`, where a worker's crash or hang costs its
item only. Third-party warnings raised on a worker reach the run log through a worker plugin (`_ToEventLog`): a
worker sends them to the scheduler's event log under the run's name, and the driver collects them when the run
ends. The worker server preloads this module (`worker_start.PRELOAD`), so a worker has the plugin's class at hand.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

from distributed import Client, Worker, as_completed
from distributed.diagnostics.plugin import WorkerPlugin

from ..probe import ProbedBatch, probe_batch
from .warnings_log import RunWarnings, describe, libraries_logged, recorded
from .window import Feeder, job_keys, window_size

if TYPE_CHECKING:
    from labzarr.store import Location

    from ..manifest import Row
    from ..plan.build import VolumeTask
    from ..plan.parts import VolumePart
    from ..progress import Progress
    from .jobs import Jobs
    from .settings import TaskSettings

__all__ = ["ClusterRunner"]

_TOPIC = "labzarr-warnings"


class ClusterRunner:
    """`client`'s cluster as the runner of a run."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _workers(self) -> dict[str, dict[str, Any]]:
        return dict(self.client.scheduler_info().get("workers", {}))

    def workers(self) -> int:
        return len(self._workers())

    def threads(self) -> int:
        return sum(int(w.get("nthreads", 1)) for w in self._workers().values())

    def fault_reports(self) -> bool:
        return all(w.get("nthreads") == 1 for w in self._workers().values())

    def encode_threads(self) -> int:
        """Every host's usable cores shared out among the worker threads there."""
        from .settings import threads_per_task, usable_cores

        info = self._workers()
        cores = self.client.run(usable_cores)
        return threads_per_task((info[a]["host"], int(info[a].get("nthreads", 1)), n) for a, n in cores.items()
                                if a in info)

    @contextmanager
    def warnings(self, run: str) -> Iterator[RunWarnings]:
        """Recorded in the driver and, through `_ToEventLog` (restarted workers too), on every worker; in the
        driver, what other libraries log too (distributed's client: "Couldn't gather 1 keys, rescheduling" after a
        worker died), which the console would otherwise show, `--quiet` or not."""
        name = f"{_TOPIC}-{run}"
        self.client.register_plugin(_ToEventLog(run), name=name)
        try:
            with recorded(partial(self._workers_warnings, run)) as seen, libraries_logged(seen):
                yield seen
        finally:
            self.client.unregister_worker_plugin(name)

    def _workers_warnings(self, run: str) -> list[str]:
        events: Any = self.client.get_events(_TOPIC)
        return [m["warning"] for _, m in events if isinstance(m, dict) and m.get("run") == run]

    def probe(self, batches: Sequence[Sequence[tuple[str, str]]], plugins: Sequence[str], window: int,
              meanwhile: Callable[[], object]) -> Iterator[ProbedBatch]:
        names = list(plugins)  # names: each batch builds its readers where it runs (`probe_batch`)
        feeder = Feeder(batches,
                        lambda batch: self.client.map(probe_batch, batch, plugins=names,
                                                      key=job_keys("probe", len(batch)), pure=False),
                        window_size(self.threads(), window))
        first = feeder.top_up(0)
        meanwhile()
        from . import supervise  # noqa: F401 - its imports (the tasks', zarr) while the first batches run too
        running, in_flight = as_completed([f for f, _ in first]), len(first)
        for future in running:
            probed: ProbedBatch = future.result()
            future.release()
            in_flight -= 1
            for more, _ in feeder.top_up(in_flight):
                running.add(more)
                in_flight += 1
            yield probed
            del probed

    def stage_parts(self, store: Location, tasks: Sequence[VolumeTask], settings: TaskSettings, *, workers: int,
                    parts_bytes: int) -> dict[str, tuple[VolumePart, ...]]:
        """Staged by the workers: opening a DICOM series on the driver imported pydicom there, between the probe and
        the first task (docs/benchmarks.md, "Fixed cost"). A worker that dies opening a volume leaves it to its
        ordinary task, which meets the same crash and reports it as the item's row; a store that cannot be written
        raises, as here."""
        from distributed import KilledWorker

        from .part_task import stage_parts

        staging = partial(stage_parts, workers=workers, parts_bytes=parts_bytes)
        futures = self.client.map(staging, [store] * len(tasks), tasks, settings=settings,
                                  key=job_keys("stage", len(tasks)), pure=False)
        out: dict[str, tuple[VolumePart, ...]] = {}
        for task, future in zip(tasks, futures):
            try:
                parts = future.result()
            except KilledWorker:
                continue
            if parts:
                out[task.array] = parts
        return out

    def run_tasks(self, jobs: Jobs, settings: TaskSettings, *, item_timeout: float, window: int,
                  sink: Callable[[Row, bool], object], progress: Progress | None) -> int:
        from .supervise import run_tasks

        return run_tasks(self.client, jobs, settings, item_timeout=item_timeout,
                         window=window_size(self.threads(), window), progress=progress, sink=sink)

    def set_labels(self, store: Location, batches: Sequence[Sequence[tuple[str, dict[str, str]]]]) -> None:
        from ..write.arrays import set_array_labels

        self.client.gather(self.client.map(set_array_labels, [store] * len(batches), batches, pure=False))


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
