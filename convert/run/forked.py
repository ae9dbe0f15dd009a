"""The runner of a run in processes forked from this one (`runner.Runner`): no dask, the cores used.

A run in one process (`in_process.py`) leaves all but one core idle: on a delivery of a few hundred files its probe
and its conversion are most of its time. Here the same job functions run in `processes` worker processes forked from
this one (`concurrent.futures.ProcessPoolExecutor` with the fork start method), once this process has imported what
the jobs need: a fork costs milliseconds where a cluster's start, and its imports of distributed and dask, cost most
of a small delivery's run (docs/benchmarks.md, "A small delivery in processes forked from the command"). Jobs go out
in the cluster's submission order, a window of them in flight (`window.window_size`), and their rows come back as
they finish, as on a cluster; each runs as a worker would run it, under a worker's zarr configuration, so the store
and the manifest are the cluster's bytes (`tests/convert/test_in_process.py`).

What a cluster gives and this does not: a worker process that dies (a fatal signal in a decoder) breaks the whole
pool, and a hung job is not cut short. A broken pool raises `runner.WorkerDied`; the `labzarr` command runs this
runner in a child it watches, kills it where it stalls, and in either case converts the delivery on a cluster, which
resumes from what was finished and loses only the item at fault (`small_run.py`).

A fork keeps only the forking thread: the workers are forked together when the runner is entered, from a process
running one Python thread (checked), before the run starts zarr's I/O thread or an encoder's pool, and before the
pool's own manager thread (the fork start method launches every worker at the first submit). Each worker takes a
cluster worker's malloc settings (`worker_start.WORKER_MALLOC`: a worker's large buffers stay mapped between
items, where the driver's settings, which a fork copies, return them at once); the BLAS thread counts, read when
numpy loads, are the caller's to set (the `labzarr` command sets a worker's, `cli._converted_without_cluster`).
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..manifest import Row
from ..plan.build import VolumeTask
from ..plan.parts import VolumePart
from ..plan.stacks import ShardTask
from ..probe import ProbedBatch, probe_batch
from ..progress import Progress
from .batches import VolumeBatch
from .boundary import Job, store_failed
from .driver_malloc import mallopt
from .import_heap import importing
from .jobs import Emitted, Jobs
from .runner import WorkerDied
from .server_fork import MALLOPT
from .small_run import die_with
from .tasks import PartsDone, call_of, in_order
from .warnings_log import RunWarnings, libraries_logged, recorded
from .window import Feeder, window_size
from .worker_start import JOB_MODULES, WORKER_MALLOC

if TYPE_CHECKING:
    from labzarr.store import Location

    from .settings import TaskSettings

__all__ = ["ForkedRunner"]

# A dead worker's pipes close a moment before the kernel lets its parent collect its exit status: how long to wait.
_REAPED_S = 1.0


class ForkedRunner:
    """`processes` worker processes forked from this one as the runner of a run; use it as a context manager."""

    def __init__(self, processes: int) -> None:
        self._processes = max(1, processes)
        self._pool: ProcessPoolExecutor | None = None
        self._forked: list[multiprocessing.process.BaseProcess] = []
        self._seen: set[str] = set()  # what the workers' jobs recorded (`warnings`)

    def __enter__(self) -> ForkedRunner:
        if threading.active_count() != 1:
            raise UsageError(f"converting in {self._processes} processes forked from this one, which runs "
                             f"{threading.active_count()} threads: a fork would keep only one of them",
                             "convert with workers=1, or on a cluster (in_process=False)")
        from .driver import import_writers

        with importing():
            for name in JOB_MODULES:  # once here, not once in each worker
                importlib.import_module(name)
            import_writers()  # and what this process needs for the rest of the run
        gc.freeze()  # what exists, kept out of the workers' collections as the worker server's is
        before = set(multiprocessing.active_children())
        self._pool = ProcessPoolExecutor(self._processes, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_worker_started, initargs=(os.getpid(),))
        first = self._pool.submit(os.getpid)  # every worker forked now, before the run starts any thread
        self._forked = [p for p in multiprocessing.active_children() if p not in before]
        try:
            with self._deaths():
                first.result()
        except WorkerDied as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if exc[0] is not None:  # a job still running (a hung one) is not waited for
            for process in self._forked:
                process.kill()
        pool.shutdown(wait=True, cancel_futures=True)  # its queues' semaphores released, not left to the tracker

    def workers(self) -> int:
        return self._processes

    def threads(self) -> int:
        return self._processes

    def fault_reports(self) -> bool:
        return False  # a worker's death breaks the pool; the command's watcher reruns on a cluster

    def encode_threads(self) -> int:
        from .settings import threads_per_task, usable_cores

        return threads_per_task([("", self._processes, usable_cores())])

    @contextmanager
    def warnings(self, run: str) -> Iterator[RunWarnings]:
        """This process's warnings and its libraries' log records, and those of every job the workers ran, which
        each job returns with its result (`_call`)."""
        with recorded(lambda: self._seen) as seen, libraries_logged(seen):
            yield seen

    def _submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        assert self._pool is not None, "ForkedRunner used outside its `with` block"
        with self._deaths():  # a pool broken already refuses new work
            return self._pool.submit(_call, fn, args, kwargs)

    def _result(self, future: Future[Any]) -> Any:
        """A finished job's result, its recorded warnings kept."""
        with self._deaths():
            result, seen = future.result()
        self._seen.update(seen)
        return result

    @contextmanager
    def _deaths(self) -> Iterator[None]:
        """A worker's death, which breaks the pool, raised as `WorkerDied`, saying how it died."""
        try:
            yield
        except BrokenProcessPool as exc:
            raise WorkerDied(self._died()) from exc

    def _died(self) -> str:
        """How the worker that broke the pool died: "a worker process was killed by SIGSEGV". The pool ends the
        others with SIGTERM once it is broken; that is the cause only where nothing else is."""
        deadline = time.monotonic() + _REAPED_S
        while not (how := {code for p in self._forked if (code := p.exitcode)}) and time.monotonic() < deadline:
            time.sleep(0.01)
        cause = sorted(how - {-signal.SIGTERM}) or sorted(how)
        if not cause:
            return "a worker process ended"
        code = cause[0]
        return (f"a worker process was killed by {signal.Signals(-code).name}" if code < 0
                else f"a worker process exited with code {code}")

    def probe(self, batches: Sequence[Sequence[tuple[str, str]]], plugins: Sequence[str], window: int,
              meanwhile: Callable[[], object]) -> Iterator[ProbedBatch]:
        names = list(plugins)
        feeder = Feeder(batches, lambda some: [self._submit(probe_batch, b, plugins=names) for b in some],
                        window_size(self._processes, window))
        running = {f for f, _ in feeder.top_up(0)}
        meanwhile()
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                probed: ProbedBatch = self._result(future)
                running |= {f for f, _ in feeder.top_up(len(running))}
                yield probed
                del probed

    def stage_parts(self, store: Location, tasks: Sequence[VolumeTask], settings: TaskSettings, *, workers: int,
                    parts_bytes: int) -> dict[str, tuple[VolumePart, ...]]:
        from .part_task import stage_parts

        staging = partial(stage_parts, workers=workers, parts_bytes=parts_bytes)
        futures = [self._submit(staging, store, task, settings) for task in tasks]
        staged = {task.array: self._result(f) for task, f in zip(tasks, futures)}
        return {array: parts for array, parts in staged.items() if parts}

    def run_tasks(self, jobs: Jobs, settings: TaskSettings, *, item_timeout: float, window: int,
                  sink: Callable[[Row, bool], object], progress: Progress | None) -> int:
        """Every job, submitted in the cluster's order (`supervise.py`), its rows handed to `sink` as it ends. A
        store that cannot be written stops the run with the cluster's `UsageError`; any other exception is a bug
        in our code and is raised."""
        from ..write.arrays import StoreWriteError

        out = Emitted(jobs, sink, progress)
        if not out.total:
            return 0
        out.start()
        try:
            return _Run(self, jobs, settings, out).run(window_size(self._processes, window))
        except StoreWriteError as exc:
            raise store_failed(exc) from exc

    def set_labels(self, store: Location, batches: Sequence[Sequence[tuple[str, dict[str, str]]]]) -> None:
        from ..write.arrays import set_array_labels

        for future in [self._submit(set_array_labels, store, batch) for batch in batches]:
            self._result(future)


class _Run:
    """One conversion's jobs in flight on the pool, and the parts of volumes written in parts so far."""

    def __init__(self, runner: ForkedRunner, jobs: Jobs, settings: TaskSettings, out: Emitted) -> None:
        self.runner, self.jobs, self.settings, self.out = runner, jobs, settings, out
        self.parts = PartsDone(jobs.parts, settings)

    def run(self, window: int) -> int:
        feeder = Feeder(in_order(self.jobs), self._submit, window)
        running = dict(feeder.top_up(0))
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                self.out.rows(self.parts.rows(job, self.runner._result(future)), planar=isinstance(job, ShardTask))
            running |= dict(feeder.top_up(len(running)))
        return self.out.done

    def _submit(self, some: Sequence[Job | VolumeBatch]) -> list[Future[Any]]:
        out: list[Future[Any]] = []
        for job in some:
            fn, kwargs = call_of(job, self.jobs)
            out.append(self.runner._submit(fn, job, self.settings, **kwargs))
        return out


def _worker_started(parent: int) -> None:
    """In each worker as it starts: it ends with the process that forked it, however that one ends (the command's
    watcher kills a stalled run); a Ctrl-C is that process's to answer, not each job's; and its malloc settings are
    a cluster worker's. Without glibc's `mallopt` they stay the driver's: slower on large items, the same bytes."""
    die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    function = mallopt()
    if function is not None:
        for name, value in WORKER_MALLOC.items():
            function(MALLOPT[name], value)


def _call(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, list[str]]:
    """In a worker: `fn(*args, **kwargs)` as a cluster's worker runs a job (its zarr configuration), with the
    warnings and other libraries' log records it gave, for the run log."""
    from ..write.arrays import worker_metadata

    with worker_metadata(), recorded() as seen, libraries_logged(seen):
        result = fn(*args, **kwargs)
    return result, seen.collected()
