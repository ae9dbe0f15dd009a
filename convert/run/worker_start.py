"""How the embedded cluster's worker processes start: forked from a server that imported a task's modules once.

dask's nanny starts each worker as a fresh interpreter (multiprocessing's spawn) by default, and every worker
then imports distributed, numpy, pydicom, nibabel, zarr and labzarr's task modules before its first task: on a
small delivery that and the workers' slow exit are most of the run (docs/benchmarks.md, "Fixed cost"). Here the
workers are forked by multiprocessing's forkserver instead: one process, which imports `PRELOAD` once and forks a
worker on request, its modules already imported. It is started by exec here (not a fork of a driver whose event-loop
and pool threads a fork would copy in whatever state they were in); the `labzarr` command forks it from itself
before it starts any thread, once it has imported what both need (`server_fork.py`). A worker is still its own
process, so a reader that segfaults or hangs costs its item only, as with spawned workers.

Variables a process reads when it starts (the malloc thresholds, the BLAS thread counts, the hash seed) must be in
the server's environment: its children never start an interpreter of their own.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from multiprocessing import forkserver, resource_tracker
from pathlib import Path

from .hash_seed import HASH_SEED

__all__ = ["JOB_MODULES", "METHOD", "PRELOAD", "WORKER_MALLOC", "pre_spawn_environ", "sigint_blocked",
           "start_worker_server", "worker_environ"]

METHOD = "forkserver"  # distributed.worker.multiprocessing-method of the embedded cluster

# What a job imports where it runs, on a cluster's worker or in a worker forked from the command (`forked.py`): the
# probe, the tasks of `run_tasks` and the label writer, and through them the readers (pydicom, nibabel, PIL) and the
# store (zarr, numcodecs). Modules that start threads when imported must not be here (a fork keeps only the forking
# thread); highdicom and scikit-image, which few deliveries need, are imported by the task that needs them.
JOB_MODULES: tuple[str, ...] = (
    "numpy",
    "labzarr.convert.run._lean_pydicom",  # pydicom, before a reader imports it, without what it never uses here
    "labzarr.convert.probe",
    "labzarr.convert.run.volume_task",
    "labzarr.convert.run.shard_task",
    "labzarr.convert.run.part_task",
    "labzarr.convert.run.sample_task",
    "labzarr.convert.write.arrays",
    # The readers a task decodes with, and their libraries (pydicom, nibabel, Pillow, libjpeg-turbo): the task modules
    # above import them where they read, so that the driver, which imports those modules to submit them, does not.
    "labzarr.readers._dicom_header",
    "labzarr.readers._dicom_pixels",
    "labzarr.readers.dicom_seg",
    "labzarr.readers.masks",
    "labzarr.readers.rtstruct",
    "labzarr.readers.nifti",
    "labzarr.readers.jpeg",
    "labzarr.readers.png",
    "labzarr.readers.tiff",
    # What every worker otherwise imported itself at its start or its first task: imported once, before the fork.
    "numpy.random",
    "numpy.ma",
    "statistics",
)

# What the worker server imports before it forks a worker: dask's worker, `JOB_MODULES`, the run's warning plugin.
PRELOAD: tuple[str, ...] = (
    "labzarr.convert.run._server_heap",  # the collector off while the server imports (frozen by `_server_exit`)
    "distributed",
    "labzarr.convert.run.worker_env",  # every worker's preload (cluster.py)
    *JOB_MODULES,
    "labzarr.convert.run._server_blosc",  # numcodecs' blosc lock, made once for every worker
    "labzarr.convert.run.on_cluster",
    # The server's own quick exit, and its imports frozen (`_server_heap`): imported there and nowhere else.
    "labzarr.convert.run._server_exit",
)

# dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536, and setting any glibc malloc threshold freezes
# the mmap threshold at 128 KiB: every slab and block buffer is then a fresh mmap, zeroed page by page, and
# unmapped again, which costs a volume mostly system time. At 64 MiB those buffers are
# reused from the heap; a worker's peak memory is bounded by the slab budget either way. The variables are read
# at process start, so they go in the nanny's pre-spawn environment (and the worker server's); a variable already
# in the driver's own environment takes precedence there (that is how a user overrides them).
WORKER_MALLOC: dict[str, int] = {"MALLOC_MMAP_THRESHOLD_": 64 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20}


def worker_environ(pre_spawn: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment a worker starts with, as dask's nanny computes it: `pre_spawn` (the config's
    `distributed.nanny.pre-spawn-environ`) where `environ` (this process's environment) does not set the
    variable already."""
    env = {k: environ.get(k, str(v)) for k, v in pre_spawn.items()}
    if env.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = HASH_SEED
    return env


def pre_spawn_environ() -> dict[str, object]:
    """`distributed.nanny.pre-spawn-environ` as the embedded cluster will see it, without importing distributed
    (whose import is much of what the server saves the CLI): distributed's default from its own
    `distributed.yaml`, then the user's dask configuration, then `WORKER_MALLOC` (as `local_cluster_config`)."""
    import dask.config

    spec = importlib.util.find_spec("distributed")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("distributed is not installed")
    (defaults,) = dask.config.collect_yaml([str(Path(spec.origin).with_name("distributed.yaml"))])
    default: dict[str, object] = defaults["distributed"]["nanny"]["pre-spawn-environ"]
    user: dict[str, object] = dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {}
    return {**default, **user, **WORKER_MALLOC}


def start_worker_server(environ: Mapping[str, str]) -> None:
    """Start the forkserver (once per process; a later call finds it running) with `environ` in its environment
    and `PRELOAD` imported; it returns at once, the server importing while this process goes on.

    Started from the main thread, the server and every worker forked from it have SIGINT blocked: Ctrl-C on a
    terminal signals the whole process group, and only the driver should answer it (it stops the workers as it
    closes the cluster), not each worker with a traceback of its own.
    """
    multiprocessing.get_context(METHOD).set_forkserver_preload(list(PRELOAD))
    # The server inherits this process's environment; dask's nanny sets the same variables here a moment later
    # (os.environ.update(pre_spawn_env)), so setting them first changes nothing else.
    os.environ.update(environ)
    with sigint_blocked():
        forkserver.ensure_running()


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread meanwhile, when it is the main thread (which alone sees KeyboardInterrupt;
    elsewhere nothing changes).

    Ctrl-C on a terminal signals the whole process group, worker processes included, and each would print
    its own KeyboardInterrupt traceback (while importing, or from inside a task). The threads and processes
    started meanwhile (the forkserver, the cluster's event loop, the workers it starts, restarted ones too)
    inherit the blocked mask: only this process sees Ctrl-C, and it stops the workers as it closes the
    cluster. A Ctrl-C while the cluster starts is held until it has started, so it never leaves half a
    cluster behind.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing starts its resource tracker at the first spawn and then unblocks SIGINT in the thread
    # that spawned, whatever its mask was: started here first, it leaves the mask alone.
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
