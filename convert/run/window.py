"""Bounded submission: at most a window of tasks in flight, the next submitted as earlier ones finish.

Invariant: a window changes only when a job is handed to the scheduler, never what it does or what it
returns: jobs are submitted in the order given, each exactly once, through the same functions.

Why not dask's own queuing: `distributed.scheduler.worker-saturation` (which the embedded cluster sets
to 1.0) keeps queued tasks off the workers, but the scheduler still holds every submitted task's state
and pickled arguments -- and the embedded cluster's scheduler lives in the driver process. Submitting
everything at once made the scheduler hold a million tasks for a million-file delivery; a window
bounds that to the tasks in flight (docs/benchmarks.md, "scale": windowed against unbounded, measured
in the same run). A full window keeps every worker thread busy with tasks queued behind it, so the
workers never wait for the driver's refill.

The window keeps dask's queuing on. The scheduler queues a task (rather than handing it to a worker at
once, where it would wait behind the running one) only while its task group holds more than twice the
cluster's threads (`Scheduler.is_rootish`). Queuing matters here: when a worker dies, every task it was
given counts as a suspect (`allowed-failures`), so a task waiting on it would end as `decoder_crash`
for another item's fault, and the watchdog would time a task that never started. So every job of one
stage shares one task group (`job_keys`: one key prefix), and a window is never smaller than twice the
threads plus one (`window_size`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Generic, TypeVar

__all__ = ["PER_THREAD", "SMALLEST", "Feeder", "job_keys", "window_size"]

J = TypeVar("J")
F = TypeVar("F")  # what submitting a job gives: a dask future, or a `concurrent.futures` one (`forked.py`)

PER_THREAD = 4  # tasks in flight per worker thread: one running, the rest queued behind it on the scheduler
SMALLEST = 32  # a window never smaller: a cluster whose workers join later still gets work at once


def window_size(threads: int, setting: int) -> int:
    """Tasks in flight at most: `setting` (`[run] window`) where given, else `PER_THREAD` per worker thread of
    the cluster as it is now (`threads` in all), at least `SMALLEST`; never fewer than twice the threads plus one
    (queuing)."""
    wanted = setting if setting > 0 else max(SMALLEST, PER_THREAD * threads)
    return max(wanted, 2 * threads + 1)


def job_keys(stage: str, n: int) -> list[str]:
    """`n` fresh task keys of one task group, `labzarr-<stage>` (dask groups tasks by the key's prefix)."""
    return [f"labzarr-{stage}-{uuid.uuid4().hex}" for _ in range(n)]


class Feeder(Generic[J, F]):
    """Submits `jobs` in order, topping the futures in flight up to `size` each time it is asked."""

    def __init__(self, jobs: Iterable[J], submit: Callable[[Sequence[J]], Sequence[F]], size: int) -> None:
        self._jobs: Iterator[J] = iter(jobs)
        self._submit = submit
        self.size = max(1, size)
        self.exhausted = False

    def top_up(self, in_flight: int) -> list[tuple[F, J]]:
        """Submit the next jobs, as many as bring `in_flight` up to the window; (future, job) pairs, in order."""
        room = self.size - in_flight
        if room <= 0 or self.exhausted:
            return []
        batch = list(islice(self._jobs, room))
        if len(batch) < room:
            self.exhausted = True
        if not batch:
            return []
        return list(zip(self._submit(batch), batch, strict=True))
