"""The embedded dask cluster and the client of a run: started for the run, or an existing scheduler's.

`convert_delivery` and the test suite start the embedded cluster the same way (`local_cluster`), so that both
convert with the same scheduler settings and the same forked workers (`worker_start.py`). The `labzarr` command
starts it in a thread of its own (`StartingCluster`) while it imports the rest of the driver: starting it is
mostly waiting for the worker processes, not work in this one (docs/benchmarks.md, "Fixed cost").
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dask
from distributed import Client, LocalCluster

from ..errors import UsageError
from . import worker_env
from .cores import default_workers
from .starting import StartingCluster
from .worker_start import METHOD, WORKER_MALLOC, sigint_blocked, start_worker_server, worker_environ

__all__ = ["MESSAGE_LOG", "client_of", "default_workers", "local_cluster", "local_cluster_config", "started_cluster"]

log = logging.getLogger(__name__)


def _refused(scheduler: str) -> None:
    """Raise ConnectionRefusedError at once when nothing listens at a tcp:// address (distributed would retry
    until its timeout); other schemes and addresses that do not parse are left to distributed."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, loc = parse_address(scheduler)
    if scheme != "tcp":
        return
    host, port = parse_host_port(loc)
    with socket.create_connection((host, port), timeout=5):
        pass


# dask keeps the last `distributed.admin.low-level-log-length` batches of every message stream for debugging (1000
# by default): the client's to the scheduler and, in the embedded cluster, the scheduler's to each worker. Those
# batches carry the tasks' arguments, so a delivery of a million small files had a thousand shards' worth of item
# records (or probe batches) held in the driver besides the plan (docs/benchmarks.md, "scale").
MESSAGE_LOG = 4


@contextmanager
def client_of(workers: int, scheduler: str | None, *, crash_retries: int,
              starting: StartingCluster | None = None) -> Iterator[Client]:
    """A client of the cluster `starting` (its start waited for), of the scheduler at `scheduler`, or of an
    embedded cluster of `workers`; the driver's streams keep `MESSAGE_LOG` recent batches each, for the whole run
    (a restarted worker's stream too)."""
    started = starting.wait(crash_retries=crash_retries) if starting is not None else None
    with dask.config.set({"distributed.admin.low-level-log-length": MESSAGE_LOG}):
        if started is not None:
            with started, Client(started) as client:
                yield client
                _settled(client, started)
            return
        with _connected(workers, scheduler, crash_retries=crash_retries) as client:
            yield client


@contextmanager
def _connected(workers: int, scheduler: str | None, *, crash_retries: int) -> Iterator[Client]:
    if scheduler:
        try:
            _refused(scheduler)
            client = Client(scheduler, timeout="10s")
        except ValueError as exc:  # distributed's address parser: unknown scheme, missing port
            raise UsageError(f"--scheduler {scheduler}: not a scheduler address ({exc})",
                             "write it as tcp://HOST:PORT, e.g. --scheduler tcp://127.0.0.1:8786") from exc
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"--scheduler {scheduler}: cannot connect ({exc})",
                             "start one with `dask scheduler` and `dask worker`, or drop --scheduler") from exc
        with client:
            yield client
        return
    with local_cluster(workers, crash_retries=crash_retries) as cluster, Client(cluster) as client:
        yield client
        _settled(client, cluster)


# How long a run that is done waits for a restarted worker to finish starting before closing the cluster.
SETTLE_S = 60.0


def _settled(client: Client, cluster: LocalCluster) -> None:
    """Wait (at most SETTLE_S) until every worker of the embedded cluster has started, before it is closed.

    A worker restarted after a crash or a timeout may still be starting when the run ends. distributed's nanny
    gives a worker 5 s to stop, counted from before it waits for the start to finish, and raises TimeoutError
    when the start alone took longer (a busy machine): a finished run would end in a traceback. A worker
    that never comes back is left to the close, which kills it.
    """
    try:
        client.wait_for_workers(len(cluster.workers), timeout=SETTLE_S)
    except TimeoutError:
        log.warning("not all %d workers had started %.0f s after the run; closing the cluster anyway",
                    len(cluster.workers), SETTLE_S)


def local_cluster_config(crash_retries: int) -> dict[str, object]:
    """The dask config the embedded LocalCluster is started under (also what bench/convert.py uses)."""
    return {
        # The scheduler's own retry count bounds the attempts after a worker dies on an item; with saturation 1.0
        # a worker holds only the task it runs, so a crash never counts against an innocent queued item.
        "distributed.scheduler.allowed-failures": crash_retries,
        "distributed.scheduler.worker-saturation": 1.0,
        "distributed.admin.low-level-log-length": MESSAGE_LOG,  # see MESSAGE_LOG
        **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()},
        "distributed.worker.multiprocessing-method": METHOD,  # workers forked with their imports done (worker_start)
        # Sampling each worker's stack every 10 ms (for the dashboard, which a run has none of) and checking every
        # server's event loop every 20 ms cost an idle 2-worker cluster 83 ms of CPU a second, 35 ms without them
        # (docs/benchmarks.md, "Fixed cost"): CPU the workers' own tasks then lack.
        "distributed.worker.profile.enabled": False,
        "distributed.admin.tick.interval": "1s",
        # Each worker drops the variables the cluster did not start with (`worker_env`): a worker forked from the
        # worker server would otherwise keep what the caller has removed since the server started.
        "distributed.worker.preload": [*dask.config.get("distributed.worker.preload", []), worker_env.__name__],
    }


@contextmanager
def local_cluster(workers: int, *, crash_retries: int) -> Iterator[LocalCluster]:
    """The cluster `labzarr convert` starts for itself: `workers` single-threaded worker processes, started
    under `local_cluster_config`, stopped on exit (the test suite shares one between conversions)."""
    with started_cluster(workers, crash_retries=crash_retries) as cluster:
        yield cluster


def started_cluster(workers: int, *, crash_retries: int) -> LocalCluster:
    """`local_cluster`'s cluster, started and not yet entered (the caller closes it: `with cluster:`)."""
    # The start method is kept while the cluster lives (`_EmbeddedCluster`): set first, outside the start's
    # configuration, whose end puts back what was set before it.
    method: Any = dask.config.set({"distributed.worker.multiprocessing-method": METHOD})
    try:
        with dask.config.set(local_cluster_config(crash_retries)), sigint_blocked():
            start_worker_server(worker_environ(dask.config.get("distributed.nanny.pre-spawn-environ")))
            return _local_cluster(workers, method)
    except BaseException:
        method.__exit__(None, None, None)
        raise


def _worker_env() -> dict[str, str]:
    """This process's environment for the workers, naming which variables they are to have (`worker_env`): these,
    and those dask's nanny sets in them itself."""
    nanny = [*worker_environ(dask.config.get("distributed.nanny.pre-spawn-environ")),
             *dask.config.get("distributed.nanny.environ", {})]
    return worker_env.wanted_environ(dict(os.environ), nanny)


class _EmbeddedCluster(LocalCluster):
    """The embedded cluster, whose nannies start every worker as `local_cluster_config` says, a worker restarted
    after a crash or a timeout too.

    distributed reads the start method (`distributed.worker.multiprocessing-method`) from the global configuration
    each time a nanny starts a worker process. The cluster starts under `local_cluster_config`; a worker restarted
    later, outside it, was spawned: a fresh interpreter that imported everything itself (seconds, on a busy
    machine, with one worker less meanwhile: `_settled`), where the others are forked from the worker server with
    their imports done (`worker_start.py`). The method is kept while the cluster lives (`start_method`: that
    setting, a `dask.config.set` made before the cluster's start) and put back as it was when the cluster closes."""

    def __init__(self, *args: Any, start_method: Any, **kwargs: Any) -> None:
        self._start_method: Any = None  # put back when the cluster closes, once it has started
        cluster: Any = super()  # distributed's own methods are untyped
        cluster.__init__(*args, **kwargs)
        self._start_method = start_method

    async def _close(self) -> None:
        cluster: Any = super()
        try:
            await cluster._close()
        finally:
            method, self._start_method = self._start_method, None
            if method is not None:
                method.__exit__(None, None, None)


def _local_cluster(workers: int, start_method: Any) -> LocalCluster:
    """Start the embedded cluster; a worker killed while starting (e.g. by the OOM killer) gets one more try."""
    for attempt in (1, 2):
        try:
            # The scheduler serves HTTP even without a dashboard, on 8787 unless told otherwise; a second run on
            # the same machine would then warn "Port 8787 is already in use". Port 0: any free port, no noise.
            # Worker deaths and hangs end as rows (boundary.py); dask's ERROR lines about them would only alarm.
            # env: a worker forked from the worker server starts with the server's environment, which is this
            # process's as it was when the server started (a library caller may have set credentials since, e.g.
            # AWS_* for an s3 store, or removed them); the nanny sets these in each worker before it runs anything,
            # and the worker's preload (`worker_env`) drops what is no longer there.
            return _EmbeddedCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                                    scheduler_kwargs={"dashboard": False}, silence_logs=logging.CRITICAL,
                                    env=_worker_env(), start_method=start_method)
        except RuntimeError as exc:  # distributed's "Nanny failed to start."
            if attempt == 2:
                raise UsageError(f"the local dask cluster ({workers} workers) did not start: {exc}",
                                 "rerun; if it keeps failing, check free memory or pass a smaller --workers") from exc
            log.warning("the local dask cluster did not start (%s); trying once more", exc)
    raise AssertionError("unreachable")
