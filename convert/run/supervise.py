"""Running the plan's tasks on dask and getting exactly one row per item, whatever happens to the workers.

Each job is its own future, collected as it completes (never one `compute()`,
where one failure aborts the graph). Jobs are submitted in plan order, a window
of them in flight at once (`window.py`, `[run] window`); retries come on top of
it. The kinds of job and how each failure becomes rows are `boundary.py`'s;
here is when:

- a finished job gives its rows;
- a job whose workers kept dying (segfault, memory limit, killed) ends, after
  the scheduler's bounded retries, as `KilledWorker`: `boundary.crashed`;
- a task running longer than `[run] item_timeout` is cancelled and its worker
  restarted (a hung thread cannot be stopped any other way): a `timeout` row;
- a shard of several images that dies or times out is redone image by image,
  one task after the other (a shard is written by one task at a time), so only
  the culprit is lost;
- a batch of small volumes (`batches.py`) that dies or times out is redone
  item by item, each a task of its own;
- a part that dies or times out costs its volume: the first failing part in
  file order gives the item's row, and the staged array is removed;
- `StoreWriteError` (disk full, read-only store) stops the run with a
  `UsageError`; finished arrays stay, and a rerun resumes;
- any other exception is a bug in our code and is raised.

With a `Progress` callback, volumes report the bytes they have streamed while they run
(`slab_progress.py`), so the convert phase's bytes move inside a big item; its item count
moves only when an item's row arrives.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from itertools import groupby
from typing import Any

from distributed import Client, Future, as_completed
from distributed.scheduler import KilledWorker

from ..manifest import Row
from ..plan.parts import PartResult, VolumePart
from ..plan.stacks import ShardTask
from ..progress import Progress
from ..write.arrays import StoreWriteError
from .batches import VolumeBatch
from .boundary import Job, crashed, report_key, store_failed, timed_out
from .faults import report_path
from .jobs import Emitted, Jobs
from .settings import TaskSettings, report_grace
from .shard_task import convert_shard
from .slab_progress import SlabListener
from .tasks import TASKS, PartsDone, in_order
from .window import Feeder, job_keys

__all__ = ["run_tasks"]

log = logging.getLogger(__name__)

_POLL_S = 0.1  # the longest the driver waits for a finished future before it looks at timeouts again
_WATCH_S = 1.0  # how often it asks the scheduler which items are running, for timeouts


_STAGE = "convert"  # every job's key prefix: one task group, which dask queues as a whole (window.py)


def run_tasks(client: Client, jobs: Jobs, settings: TaskSettings, *, item_timeout: float, window: int,
              sink: Callable[[Row, bool], object], progress: Progress | None = None) -> int:
    """Run every job on `client` (a volume's parts staged by `part_task.stage_parts`), handing each item's row to
    `sink` as it arrives (`row_spill.RowSpill.add`: the driver does not hold them), with whether it is the row of a
    stack's image (a shard's); returns how many rows there were.

    At most `window` jobs are in flight at once (`window.window_size`), the next submitted in plan order as earlier
    ones finish; retries of failed shards and batches come on top of it."""
    return _Run(client, settings, item_timeout, jobs, progress, window, sink).run()


class _Run:
    """The driver's side of one conversion: futures in flight, chains of single images, rows so far."""

    def __init__(self, client: Client, settings: TaskSettings, item_timeout: float, jobs: Jobs,
                 progress: Progress | None, window: int, sink: Callable[[Row, bool], object]) -> None:
        # A token of this run's own: its slab events cannot mix with another run's on a shared cluster.
        settings = replace(settings, slab_events=uuid.uuid4().hex) if progress is not None else settings
        self.client, self.settings, self.item_timeout = client, settings, item_timeout
        self.targets = jobs.targets
        self.todo = jobs
        self.reports = settings.reports()  # only fault reports are read here
        self.jobs: dict[Hashable, tuple[Future[Any], Job | VolumeBatch]] = {}
        self.then: dict[Hashable, list[ShardTask]] = {}  # what to submit when this key is done (a chain of singles)
        self.out = Emitted(jobs, sink, progress)  # the rows so far
        self.listener: SlabListener | None = None
        self.watch = _Watchdog(client, item_timeout)
        self.ac: Any = None
        self.parts = PartsDone(jobs.parts, settings)
        self.window = window
        self.feeder: Feeder[Job | VolumeBatch, Future[Any]] = Feeder((), self._submit, window)

    def run(self) -> int:
        jobs = self.todo
        if not self.out.total:
            return 0
        self.out.start()
        self.listener = SlabListener(self.client, self.settings.slab_events) if self.settings.slab_events else None
        with self.listener or nullcontext():
            return self._run(jobs)

    def _run(self, jobs: Jobs) -> int:
        self.feeder = Feeder(in_order(jobs), self._submit, self.window)
        self.ac = as_completed()
        try:
            self._top_up()
            while self.out.done < self.out.total:
                batch = self.ac.next_batch(block=False)
                self._slab_events()  # before the rows: an event that came with its item's row still shows
                for future in batch:
                    self._finished(future)
                if not batch:
                    self._check_timeouts()
                    self._wait_for_one()
                self._top_up()
        except BaseException:
            self.client.cancel([f for f, _ in self.jobs.values()])
            raise
        return self.out.done

    def _top_up(self) -> None:
        """Submit the next jobs in plan order while fewer than the window are in flight (`window.py`)."""
        for future, job in self.feeder.top_up(len(self.jobs)):
            self._track(future, job)

    def _track(self, future: Future[Any], job: Job | VolumeBatch) -> None:
        self.jobs[future.key] = (future, job)
        self.ac.add(future)

    def _resubmit(self, job: Job) -> Future[Any]:
        """Submit one retry of a failed shard or batch now, outside the window, and track it."""
        (future,) = self._submit([job])
        self._track(future, job)
        return future

    def _submit(self, batch: Sequence[Job | VolumeBatch]) -> list[Future[Any]]:
        """One `client.map` per run of jobs of one kind (per stack, for shards: they differ in where they write).

        pure=False: each task's key is fresh already (`job_keys`), and a pure map would still tokenize every
        argument, every item record of every job, on the driver."""
        out: list[Future[Any]] = []
        for _, group in groupby(batch, key=lambda j: (type(j), j.stack.array if isinstance(j, ShardTask) else "")):
            same = list(group)
            first = same[0]
            if isinstance(first, ShardTask):
                folder, records = self.targets[first.stack.array]
                out += self.client.map(convert_shard, same, settings=self.settings, folder=folder, records=records,
                                       key=job_keys(_STAGE, len(same)), pure=False)
            else:
                out += self.client.map(TASKS[type(first)], same, settings=self.settings,
                                       key=job_keys(_STAGE, len(same)), pure=False)
        return out

    def _wait_for_one(self) -> None:
        """Until a future finishes, or `_POLL_S` passes (timeouts and slab events are looked at between waits).

        as_completed notifies its `thread_condition` after queueing each finished future; checking the queue
        while holding it, then waiting on it, cannot miss one, and a small series is not held up by a fixed sleep.
        """
        with self.ac.thread_condition:
            if self.ac.queue.empty():
                self.ac.thread_condition.wait(timeout=_POLL_S)

    def _emit(self, rows: Sequence[Row], job: Job | VolumeBatch) -> None:
        self.out.rows(rows, planar=isinstance(job, ShardTask))

    def _slab_events(self) -> None:
        """Show the bytes running items have streamed, if they grew (here, on the driver's thread)."""
        if self.listener is not None:
            self.out.running(self.listener.drain())

    def _finished(self, future: Future[Any]) -> None:
        entry = self.jobs.pop(future.key, None)
        if entry is None:
            return  # timed out already (this is its cancellation arriving)
        _, job = entry
        if future.status not in ("finished", "error"):
            # Its result was lost with a restarted worker and is being computed again: wait for it later.
            self.jobs[future.key] = entry
            self.ac.add(future)
            return
        if future.status == "finished":
            result = future.result()
            if isinstance(job, VolumePart):
                self._part_done(job, result)
            else:
                self._emit([result] if isinstance(result, Row) else list(result), job)
        else:
            exc = future.exception()
            if isinstance(exc, StoreWriteError):
                raise store_failed(exc) from exc
            if not isinstance(exc, KilledWorker):
                future.result()  # any other exception is a bug in our code: raise it with its traceback
            if isinstance(job, ShardTask) and len(job.items) > 1:
                self._one_by_one(job, f"a worker died in it ({exc})")
            elif isinstance(job, VolumeBatch):
                self._unbatch(job, f"a worker died in it ({exc})")
            elif isinstance(job, VolumePart):
                self._part_done(job, crashed(job, self.reports, exc)[0])
            else:
                self._emit(crashed(job, self.reports, exc), job)
        future.release()
        self._next_in_chain(future.key)

    def _check_timeouts(self) -> None:
        pending = {k for k, (f, _) in self.jobs.items() if not f.done()}
        for key in self.watch.overdue(pending, reported=self._reported):
            future, job = self.jobs.pop(key)
            future.cancel()
            self.watch.restart_worker_of(key)
            if isinstance(job, ShardTask) and len(job.items) > 1:
                self._one_by_one(job, f"no result after {self.item_timeout:g} s")
            elif isinstance(job, VolumeBatch):
                self._unbatch(job, f"no result after {self.item_timeout:g} s")
            elif isinstance(job, VolumePart):
                self._part_done(job, timed_out(job, self.reports, self.item_timeout)[0])
            else:
                self._emit(timed_out(job, self.reports, self.item_timeout), job)
            self._next_in_chain(key)

    def _part_done(self, part: VolumePart, outcome: PartResult | Row) -> None:
        """Record one part's outcome; with the last one in, seal the volume (or drop it) and emit its row."""
        try:
            row = self.parts.add(part, outcome)
        except StoreWriteError as exc:
            raise store_failed(exc) from exc
        if row is not None:
            self._emit([row], part)

    def _reported(self, key: Hashable) -> bool:
        job = self.jobs[key][1]
        if not self.settings.fault_reports or isinstance(job, VolumeBatch):
            return True  # no report will come (a batch writes none: its items' own tasks will): do not wait
        path = report_path(self.reports, report_key(job))
        return path.exists() and path.stat().st_size > 0

    def _one_by_one(self, job: ShardTask, why: str) -> None:
        """Redo a shard's images one task at a time, each after the previous: only the culprit is lost."""
        singles = [ShardTask(stack=job.stack, shard=job.shard, items=(item,)) for item in job.items]
        log.warning("shard %d of %s failed (%s); retrying its %d images one by one", job.shard, job.stack.array,
                    why, len(singles))
        self._chain(singles)

    def _unbatch(self, batch: VolumeBatch, why: str) -> None:
        """Redo a batch's items each as a task of its own (all at once: volumes are independent)."""
        log.warning("a batch of %d small volumes failed (%s); retrying them one by one", len(batch.tasks), why)
        for task in batch.tasks:
            self._resubmit(task)

    def _chain(self, singles: list[ShardTask]) -> None:
        if not singles:
            return
        future = self._resubmit(singles[0])
        self.then[future.key] = singles[1:]

    def _next_in_chain(self, key: Hashable) -> None:
        if key in self.then:
            self._chain(self.then.pop(key))


class _Watchdog:
    """Tracks since when each task has been running on a worker, by asking the scheduler now and then."""

    def __init__(self, client: Client, item_timeout: float) -> None:
        self.client, self.item_timeout = client, item_timeout
        self.running_since: dict[Hashable, tuple[float, str]] = {}
        self._last = 0.0

    def overdue(self, pending: set[Hashable], reported: Callable[[Hashable], bool]) -> list[Hashable]:
        """Keys among `pending` running longer than the item timeout (and their report written, or grace over)."""
        now = time.monotonic()
        if now - self._last < _WATCH_S:
            return []
        self._last = now
        running = {key: worker for worker, keys in self.client.processing().items() for key in keys}
        # A task that moved (its worker died and it was rescheduled) starts its clock again.
        self.running_since = {key: (since, worker) if worker == running[key] else (now, running[key])
                              for key, (since, worker) in self.running_since.items() if key in running}
        for key, worker in running.items():
            if key in pending and key not in self.running_since:
                self.running_since[key] = (now, worker)
        grace = report_grace(self.item_timeout)
        return sorted((k for k, (since, _) in self.running_since.items()
                       if k in pending and now - since > self.item_timeout
                       and (reported(k) or now - since > self.item_timeout + grace)), key=str)

    def restart_worker_of(self, key: Hashable) -> None:
        """Restart the worker stuck on `key` (its nanny starts a fresh process)."""
        worker = self.running_since.pop(key)[1]
        try:
            status = self.client.restart_workers([worker], raise_for_error=False)
        except Exception as exc:  # noqa: BLE001 - a worker without a nanny cannot be restarted; the run goes on
            status = {worker: f"{type(exc).__name__}: {exc}"}
        if status.get(worker) != "OK":
            log.warning("worker %s is stuck on a timed-out item and could not be restarted (%s); "
                        "it takes no more work", worker, status.get(worker))

