"""The embedded cluster started in a thread of its own, while the thread that started it goes on (importing).

Starting the cluster is mostly waiting: for the worker server's imports, for each worker process to fork and
register (`worker_start.py`). The `labzarr` command starts it here before it imports the driver, whose imports
(zarr, the readers) then run in that wait rather than before it (docs/benchmarks.md, "Fixed cost"). This module
imports nothing heavy itself: the thread imports distributed.

The cluster is the one `cluster.local_cluster` starts, under the same settings, but one: the scheduler's retry
count after a worker death comes from the spec, read after the start began, and is set when the run takes the
cluster (`wait`), before any task is submitted.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import LocalCluster

__all__ = ["StartingCluster"]


class StartingCluster:
    """An embedded cluster of `workers` (None: `cluster.default_workers`) being started by a thread: `wait` gives
    it to the run, `close` stops it where the run never took it (a usage error before the run began); use it as a
    context manager."""

    def __init__(self, workers: int | None) -> None:
        self._workers = workers
        self._cluster: LocalCluster | None = None
        self._error: BaseException | None = None
        self._taken = False
        self._thread = threading.Thread(target=self._start, name="labzarr-cluster-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        # The cluster's threads (its event loop's among them) inherit this thread's mask: only the main thread
        # answers a Ctrl-C, as when the cluster starts there (`worker_start.sigint_blocked`).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            from .cluster import default_workers, started_cluster

            # Any retry count: the spec's is set by `wait`.
            self._cluster = started_cluster(self._workers or default_workers(), crash_retries=0)
        except BaseException as exc:  # noqa: BLE001 - raised again in the thread that waits for the cluster
            self._error = exc

    def wait(self, *, crash_retries: int) -> LocalCluster:
        """The started cluster, its scheduler retrying an item `crash_retries` times after a worker death; the
        start's failure (a `UsageError`) is raised here. The caller closes the cluster (`with cluster:`)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._cluster is None or self._cluster.scheduler is None:  # a LocalCluster's scheduler is in this process
            raise AssertionError("the cluster's start ended with neither a started scheduler nor an error")
        self._cluster.scheduler.allowed_failures = crash_retries
        self._taken = True
        return self._cluster

    def close(self) -> None:
        """Stop the cluster if the run never took it (the run closes what it took)."""
        self._thread.join()
        if self._cluster is not None and not self._taken:
            self._cluster.close()

    def __enter__(self) -> StartingCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
