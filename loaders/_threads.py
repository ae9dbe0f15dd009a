"""The thread pool that decodes a batch's chunks: one per process, created on first use.

Invariant: a pool is only ever used by the process that created it. A forked
child inherits the parent's pool object but none of its threads, so the pid is
checked on each use and a new pool started; a pickled pool (spawn,
forkserver) carries only its size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
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
    """`map` over a batch's decodes: in `size` threads (None: `default_threads()` in each process), or, with one
    thread or one task, in the calling thread."""

    def __init__(self, size: int | None) -> None:
        self.size = size
        self._pool: ThreadPoolExecutor | None = None
        self._pid, self._here = 0, 1

    def _executor(self) -> ThreadPoolExecutor | None:
        if self._pid != os.getpid():  # a new process: the parent's threads did not come along
            self._here = self.size if self.size is not None else default_threads()
            # The calling thread decodes a share too: the pool holds the other threads.
            self._pool = (ThreadPoolExecutor(self._here - 1, thread_name_prefix="labzarr-decode")
                          if self._here > 1 else None)
            self._pid = os.getpid()
        return self._pool

    def map(self, fn: Callable[[Any], None], tasks: Sequence[Any]) -> Iterable[None]:
        """`fn` over every task, in shares of one per thread (a future per task would cost more than many a
        decode); returns when all are done, raising the first exception of the shares in order."""
        pool = self._executor() if len(tasks) > 1 else None
        if pool is None:
            return map(fn, tasks)
        shares = [tasks[k::self._here] for k in range(self._here)]
        futures = [pool.submit(_each, fn, share) for share in shares[1:] if share]
        try:
            _each(fn, shares[0])
        finally:
            wait(futures)  # no share still writing into the batch once this returns, even after an error
        for future in futures:
            future.result()
        return ()

    @property
    def workers(self) -> int:
        """Threads this process decodes in (1: the calling thread)."""
        self._executor()
        return self._here

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.size, self._pool, self._pid, self._here = state["size"], None, 0, 1


def _each(fn: Callable[[Any], None], tasks: Sequence[Any]) -> None:
    for task in tasks:
        fn(task)
