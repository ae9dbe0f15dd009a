"""Running the plan's tasks on dask and getting exactly one row per item, whatever happens to the workers.

Each task is its own future, collected as it completes (never one `compute()`,
where one failure aborts the graph). A task is a volume (`convert_item`, one
row), a shard of 2D images (`convert_shard`, one row per image), a sample of
role files (`convert_sample`, one row) or one part of a big volume split across
workers (`convert_part`; the item's one row once every part is in):

- a finished task gives its rows;
- a task whose workers kept dying (segfault, memory limit, killed) ends, after
  the scheduler's bounded retries, as `KilledWorker`: a `decoder_crash` row,
  with the fault report (`faults.py`) in `detail` when there is one;
- a task running longer than `[run] item_timeout` is cancelled and its worker
  restarted (a hung thread cannot be stopped any other way): a `timeout` row;
- a shard of several images that dies or times out is redone image by image,
  one task after the other (a shard is written by one task at a time), so only
  the culprit is lost;
- a part that dies or times out costs its volume: the first failing part in
  file order gives the item's row, and the staged array is removed;
- `StoreWriteError` (disk full, read-only store) stops the run with a
  `UsageError`; finished arrays stay, and a rerun resumes;
- any other exception is a bug in our code and is raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distributed import Client, Future, as_completed
from distributed.scheduler import KilledWorker

from labzarr.readers import Reason

from .errors import UsageError
from .faults import fault_report, report_path, summarize_report
from .manifest import Row
from .part_task import convert_part, finish_split
from .parts import PartResult, VolumePart
from .plan import Task
from .progress import Progress, ProgressEvent
from .sample_task import convert_sample
from .samples import SampleTask
from .spec import MasksSpec
from .stack_task import convert_shard, shard_report_key
from .stacks import ShardTask
from .store import StoreWriteError
from .task import TaskSettings, convert_item, task_row

__all__ = ["ShardTarget", "hang_report_after", "run_tasks"]

log = logging.getLogger(__name__)

Job = Task | ShardTask | SampleTask | VolumePart
ShardTarget = tuple[str, str]
"""Where a stack's shard tasks write: (the staged stack's folder, its records folder)."""

_POLL_S = 0.1  # how often the driver looks for finished futures when none is ready
_WATCH_S = 1.0  # how often it asks the scheduler which items are running, for timeouts


def hang_report_after(item_timeout: float) -> float:
    """When a hung item's worker writes its stacks, counted from its start on the worker.

    The driver counts from when the scheduler handed the item over, which is earlier by the task's
    transfer and the worker's first imports; it also waits up to `_grace` longer for the report.
    """
    return max(0.6 * item_timeout, item_timeout - 10.0)


def _grace(item_timeout: float) -> float:
    return min(10.0, 0.5 * item_timeout)


def run_tasks(client: Client, tasks: Sequence[Task], settings: TaskSettings, *, item_timeout: float,
              shards: Sequence[ShardTask] = (), targets: Mapping[str, ShardTarget] | None = None,
              samples: Sequence[SampleTask] = (), masks: MasksSpec | None = None,
              parts: Mapping[str, Sequence[VolumePart]] | None = None, progress: Progress | None = None) -> list[Row]:
    """Run volume `tasks`, `shards` (writing into `targets[stack]`), `samples` and the `parts` of split volumes
    (by array; `part_task.stage_split` staged them) on `client`; one row per item."""
    return _Run(client, settings, item_timeout, targets or {}, masks or MasksSpec(), progress).run(
        tasks, shards, samples, parts or {})


class _Run:
    """The driver's side of one conversion: futures in flight, chains of single images, rows so far."""

    def __init__(self, client: Client, settings: TaskSettings, item_timeout: float,
                 targets: Mapping[str, ShardTarget], masks: MasksSpec, progress: Progress | None) -> None:
        self.client, self.settings, self.item_timeout = client, settings, item_timeout
        self.targets, self.masks, self.progress = targets, masks, progress
        self.store = settings.reports()  # only fault reports are read here
        self.jobs: dict[Hashable, tuple[Future[Any], Job]] = {}
        self.then: dict[Hashable, list[ShardTask]] = {}  # what to submit when this key is done (a chain of singles)
        self.rows: list[Row] = []
        self.sizes: dict[str, int] = {}
        self.total = self.bytes_total = self.bytes_done = 0
        self.watch = _Watchdog(client, item_timeout)
        self.ac: Any = None
        self.parts: Mapping[str, Sequence[VolumePart]] = {}
        self.part_outcomes: dict[str, dict[int, PartResult | Row]] = {}

    def run(self, tasks: Sequence[Task], shards: Sequence[ShardTask], samples: Sequence[SampleTask],
            parts: Mapping[str, Sequence[VolumePart]]) -> list[Row]:
        self.parts = parts
        self.sizes = ({t.source: t.size for t in tasks} | {i.source: i.size for s in shards for i in s.items}
                      | {s.source: s.size for s in samples} | {p[0].task.source: p[0].task.size for p in parts.values()})
        self.total = len(tasks) + sum(len(s.items) for s in shards) + len(samples) + len(parts)
        self.bytes_total = sum(self.sizes.values())
        if not self.total:
            return []
        if self.progress:
            self.progress(ProgressEvent("convert", 0, self.total, 0, self.bytes_total))
        every_part = [part for volume in parts.values() for part in volume]
        futures = [*self.client.map(convert_item, tasks, settings=self.settings, pure=False),
                   *(self._submit_shard(s) for s in shards),
                   *self.client.map(_convert_sample, samples, settings=self.settings, masks=self.masks, pure=False),
                   *self.client.map(convert_part, every_part, settings=self.settings, pure=False)]
        jobs: list[Job] = [*tasks, *shards, *samples, *every_part]
        for f, job in zip(futures, jobs):
            self.jobs[f.key] = (f, job)
        self.ac = as_completed(futures)
        try:
            while len(self.rows) < self.total:
                batch = self.ac.next_batch(block=False)
                for future in batch:
                    self._finished(future)
                if not batch:
                    self._check_timeouts()
                    time.sleep(_POLL_S)
        except BaseException:
            self.client.cancel([f for f, _ in self.jobs.values()])
            raise
        return self.rows

    def _submit_shard(self, shard: ShardTask) -> Future[Any]:
        folder, records = self.targets[shard.stack.array]
        return self.client.submit(convert_shard, shard, settings=self.settings, folder=folder, records=records,
                                  pure=False)

    def _emit(self, rows: Sequence[Row]) -> None:
        for row in rows:
            self.rows.append(row)
            self.bytes_done += self.sizes.get(row.source, 0)
            if self.progress:
                self.progress(ProgressEvent("convert", len(self.rows), self.total, self.bytes_done, self.bytes_total,
                                            row))

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
                self._emit([result] if isinstance(result, Row) else list(result))
        else:
            exc = future.exception()
            if isinstance(exc, StoreWriteError):
                raise _store_failed(exc) from exc
            if not isinstance(exc, KilledWorker):
                future.result()  # any other exception is a bug in our code: raise it with its traceback
            if isinstance(job, ShardTask) and len(job.items) > 1:
                self._split(job, f"a worker died in it ({exc})")
            elif isinstance(job, VolumePart):
                self._part_done(job, _crashed(job, self.store, exc)[0])
            else:
                self._emit(_crashed(job, self.store, exc))
        future.release()
        self._next_in_chain(future.key)

    def _check_timeouts(self) -> None:
        pending = {k for k, (f, _) in self.jobs.items() if not f.done()}
        for key in self.watch.overdue(pending, reported=self._reported):
            future, job = self.jobs.pop(key)
            future.cancel()
            self.watch.restart_worker_of(key)
            if isinstance(job, ShardTask) and len(job.items) > 1:
                self._split(job, f"no result after {self.item_timeout:g} s")
            elif isinstance(job, VolumePart):
                self._part_done(job, _timed_out(job, self.store, self.item_timeout)[0])
            else:
                self._emit(_timed_out(job, self.store, self.item_timeout))
            self._next_in_chain(key)

    def _part_done(self, part: VolumePart, outcome: PartResult | Row) -> None:
        """Record one part's outcome; with the last one in, seal the volume (or drop it) and emit its row."""
        got = self.part_outcomes.setdefault(part.task.array, {})
        got[part.index] = outcome
        if len(got) < part.count:
            return
        try:
            row = finish_split(self.parts[part.task.array], [got[i] for i in range(part.count)], self.settings)
        except StoreWriteError as exc:
            raise _store_failed(exc) from exc
        self._emit([row])

    def _reported(self, key: Hashable) -> bool:
        if not self.settings.fault_reports:
            return True  # no report will come: do not wait for one
        path = report_path(self.store, _report_key(self.jobs[key][1]))
        return path.exists() and path.stat().st_size > 0

    def _split(self, job: ShardTask, why: str) -> None:
        """Redo a shard's images one task at a time, each after the previous: only the culprit is lost."""
        singles = [ShardTask(stack=job.stack, shard=job.shard, items=(item,)) for item in job.items]
        log.warning("shard %d of %s failed (%s); retrying its %d images one by one", job.shard, job.stack.array,
                    why, len(singles))
        self._chain(singles)

    def _chain(self, singles: list[ShardTask]) -> None:
        if not singles:
            return
        future = self._submit_shard(singles[0])
        self.jobs[future.key] = (future, singles[0])
        self.then[future.key] = singles[1:]
        self.ac.add(future)

    def _next_in_chain(self, key: Hashable) -> None:
        if key in self.then:
            self._chain(self.then.pop(key))


def _convert_sample(task: SampleTask, settings: TaskSettings, masks: MasksSpec) -> Row:
    """`convert_sample` with a fault report, like the other tasks (runs on a worker)."""
    with fault_report(report_path(settings.reports(), task.group), hang_after=settings.hang_report_after,
                      enabled=settings.fault_reports):
        return convert_sample(task, settings, masks)


def _store_failed(exc: StoreWriteError) -> UsageError:
    return UsageError(f"cannot write the store: {exc}",
                      "free space (or fix permissions) and rerun the same command: finished items are kept and the "
                      "run resumes")


def _report_key(job: Job) -> str:
    if isinstance(job, Task):
        return job.array
    if isinstance(job, VolumePart):
        return job.report_key
    return job.group if isinstance(job, SampleTask) else shard_report_key(job)


def _report(store: Path, job: Job) -> tuple[str, str | None] | None:
    path = report_path(store, _report_key(job))
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return summarize_report(text)


def _rejected(job: Job, reason: Reason, detail: str) -> list[Row]:
    if isinstance(job, SampleTask):
        return [job.base_row().rejected(reason, detail)]
    if isinstance(job, Task):
        return [task_row(job).rejected(reason, detail)]
    if isinstance(job, VolumePart):
        return [task_row(job.task).rejected(reason, detail)]
    return [Row(item_id=i.item_id, status="rejected", source=i.source, kind=i.kind, sha256=i.sha256, reason=reason,
                detail=detail) for i in job.items]


def _crashed(job: Job, store: Path, exc: BaseException | None) -> list[Row]:
    attempts = exc.allowed_failures + 1 if isinstance(exc, KilledWorker) else 1
    report = _report(store, job)
    if report is None:
        why = "no fault report: the process was killed from outside (e.g. the worker memory limit or the OOM killer)"
    else:
        what, where = report
        why = what + (f" in {where}" if where else "")
    return _rejected(job, Reason.DECODER_CRASH,
                     f"the worker process died while decoding this item, {attempts} of {attempts} attempts; {why}")


def _timed_out(job: Job, store: Path, item_timeout: float) -> list[Row]:
    report = _report(store, job)
    where = f"; it was in {report[1]}" if report and report[1] else ""
    return _rejected(job, Reason.TIMEOUT, f"no result after {item_timeout:g} s ([run] item_timeout = "
                                          f"{item_timeout:g}){where}; its worker was restarted")


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
        grace = _grace(self.item_timeout)
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
