"""The worker server forked from the `labzarr convert` process, once that process has imported what both need.

The embedded cluster's workers fork from a server that imported a task's modules (`worker_start.py`). Started by exec,
that server imports distributed, dask, numpy and zarr a second time beside the command, which imports them to run the
scheduler and write the store: on a small delivery those shared imports are much of the run's CPU, and on a machine
whose cores are busy the run's wall time follows its CPU (docs/benchmarks.md, "Fixed cost"). Forked from the
command once it has imported them, the server imports only what the workers alone need (the readers' libraries, the
tasks) while the command starts the scheduler.

A fork keeps only the forking thread, and a forked process never starts an interpreter of its own: the server is
forked only while this process runs one thread, and only when every variable a process reads when it starts is as
this process started with it, or is one that can be set after the start. The glibc malloc variables are set with
`mallopt` in the server (`MALLOPT`); the BLAS thread counts are read when numpy loads, which the command's caller
sets before that (`forkable`); the hash seed is the command's own (the `labzarr` command starts again with the
workers' seed, `hash_seed.py`). Otherwise the caller starts the server by exec
(`worker_start.start_worker_server`).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import socket
import sys
import threading
from collections.abc import Mapping
from multiprocessing import connection, forkserver, resource_tracker, util
from typing import NoReturn, Protocol, cast

from .driver_malloc import Mallopt, mallopt
from .worker_start import METHOD, PRELOAD, sigint_blocked

__all__ = ["MALLOPT", "READ_AT_IMPORT", "fork_worker_server", "forkable", "threads"]

# glibc's `mallopt` parameter (malloc.h) of each malloc variable glibc reads when a process starts.
MALLOPT: dict[str, int] = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_TOP_PAD_": -2, "MALLOC_MMAP_THRESHOLD_": -3,
                           "MALLOC_MMAP_MAX_": -4, "MALLOC_ARENA_TEST": -7, "MALLOC_ARENA_MAX": -8}

# Read when numpy loads its BLAS, not when the process starts.
READ_AT_IMPORT = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"})


class _ServerState(Protocol):
    """What `forkserver.ForkServer.ensure_running` records of the server it started (CPython 3.11 to 3.13)."""

    _forkserver_pid: int | None
    _forkserver_address: str | None
    _forkserver_alive_fd: int | None


def forkable(started: Mapping[str, str], wanted: Mapping[str, str]) -> frozenset[str]:
    """The variables of `wanted` (the workers' environment) that keep the server from being forked from a process that
    started with the environment `started`: those a process reads when it starts, set otherwise there, which nothing
    can set after the start. Empty: it can be forked, provided `READ_AT_IMPORT` were set before numpy was imported."""
    return frozenset(k for k, v in wanted.items() if started.get(k) != v) - MALLOPT.keys() - READ_AT_IMPORT


def threads() -> int:
    """This process's threads, those the interpreter does not know of included (a BLAS pool's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no procfs: the interpreter's own count, which a native pool escapes
        return threading.active_count() + ("numpy" in sys.modules)


def fork_worker_server(environ: Mapping[str, str]) -> bool:
    """Fork multiprocessing's forkserver from this process, with `environ` (the workers' environment: `os.environ`
    holds it already, and `forkable` found nothing against it) and `worker_start.PRELOAD` imported in it; it serves
    every later `forkserver.ensure_running` as a server started by exec would. False, with nothing started, where
    this process runs more than one thread or has started a server already, and on Python 3.14 and later.

    SIGINT is blocked in the server and its workers, as `worker_start.start_worker_server` blocks it."""
    server = cast(_ServerState, forkserver._forkserver)  # the instance multiprocessing's forkserver context uses
    # From 3.14 the server and its clients share a key, which `ensure_running` makes and this does not.
    if sys.version_info >= (3, 14) or threads() != 1 or server._forkserver_pid is not None:
        return False
    malloc = {MALLOPT[k]: int(v) for k, v in environ.items() if k in MALLOPT}
    function = mallopt()
    if malloc and function is None:  # a C library without glibc's `mallopt`: only its variables at start set them
        return False
    multiprocessing.get_context(METHOD).set_forkserver_preload(list(PRELOAD))
    # Without the server's lock (`ForkServer.ensure_running` takes it): this process runs one thread, and a lock held
    # across the fork would stay held in the server and in every worker.
    with sigint_blocked():
        resource_tracker.ensure_running()
        sys.stdout.flush()  # what is buffered now would be written again by the server
        sys.stderr.flush()
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            # Every client of the server holds the pipe's write end; the server ends when the last one is closed.
            alive_r, alive_w = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(alive_r)
                os.close(alive_w)
                raise
            if pid == 0:
                _serve(listener.fileno(), alive_r, malloc, function)
            os.close(alive_r)
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid
    return True


def _serve(listener: int, alive_r: int, malloc: Mapping[int, int], function: Mallopt | None) -> NoReturn:
    """The forked server: what differs from a server started by exec set right, then the forkserver's loop."""
    code = 1
    try:
        keep = {0, 1, 2, listener, alive_r}
        for fd in [int(f) for f in os.listdir("/proc/self/fd")]:  # an exec'd server inherits no other descriptor
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:  # the listing's own, closed already
                    pass
        for param, value in malloc.items():
            if function is not None:
                function(param, value)
        # The command's log configuration (its root handler and level, `cli.main`) is its own: the workers log as a
        # fresh interpreter's would, which the cluster then silences.
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        gc.enable()  # for `_server_heap` to hold while the preload imports, and turn on again when it is done
        forkserver.main(listener, alive_r, PRELOAD)
    except SystemExit:  # every client is gone: the command has ended
        code = 0
    except BaseException:  # as an exec'd server's interpreter would: the traceback on stderr
        sys.excepthook(*sys.exc_info())
        sys.stderr.flush()
    finally:
        os._exit(code)

