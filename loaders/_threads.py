"""The thread pool that decodes a batch's chunks: one per process, created on first use.

Invariant: a pool is only ever used by the process that created it. A forked
child inherits the parent's pool object but none of its threads, so the pid is
checked on each use and a new pool started; a pickled pool (spawn,
forkserver) carries only its size.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from torch.utils.data import get_worker_info

__all__ = ["Threads", "default_threads"]


def default_threads() -> int:
    """The cores this process may use, shared out among a DataLoader's workers when it is one of them."""
    cores = len(os.sched_getaffinity(0))
    info = get_worker_info()
    return max(1, cores // info.num_workers) if info is not None else cores


class Threads:
    """`map` over a batch's reads and decodes, in `size` threads (None: `default_threads()` in each process)."""

    def __init__(self, size: int | None) -> None:
        self.size = size
        self._pool: ThreadPoolExecutor | None = None
        self._pid, self._here = 0, 1

    def _executor(self) -> ThreadPoolExecutor:
        if self._pid != os.getpid() or self._pool is None:  # a new process: the parent's threads did not come along
            self._here = self.size if self.size is not None else default_threads()
            self._pool = ThreadPoolExecutor(self._here, thread_name_prefix="labzarr-decode")
            self._pid = os.getpid()
        return self._pool

    def map(self, fn: Callable[[Any], None], tasks: Iterable[Any]) -> Iterable[None]:
        """`fn` over every task in the pool's threads, each thread taking the next task when it is free (under a
        lock: `tasks` may be a generator doing work of its own between tasks, which then overlaps the other
        threads' tasks); returns when all are done, raising the first exception of the threads. The calling
        thread only waits: a decode in a process's main thread would run blosc's global context (its own
        threads, a lock), which numcodecs uses there and nowhere else."""
        pool = self._executor()
        queue, lock = iter(tasks), threading.Lock()
        futures = [pool.submit(_drain, fn, queue, lock) for _ in range(self._here)]
        wait(futures)  # no thread still writing into the batch once this returns, even after an error
        for future in futures:
            future.result()
        return ()

    @property
    def workers(self) -> int:
        """Threads this process decodes in."""
        self._executor()
        return self._here

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.size, self._pool, self._pid, self._here = state["size"], None, 0, 1


def _drain(fn: Callable[[Any], None], queue: Iterator[Any], lock: threading.Lock) -> None:
    while True:
        with lock:
            task = next(queue, _END)
        if task is _END:
            return
        fn(task)


_END = object()
