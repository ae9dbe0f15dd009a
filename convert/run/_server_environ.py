"""Imported by the worker server first of `worker_start.PRELOAD`: the rest of the environment a worker starts with.

The `labzarr` command starts the server before it reads dask's configuration (importing dask is much of the
command's start, docs/benchmarks.md, "Fixed cost"), with only the variables it knows without it
(`worker_start.start_worker_server_early`). The server reads the configuration here, where it imports dask anyway,
and sets what dask's nanny would give a spawned worker (`worker_environ`) before the next modules load: the BLAS
thread counts are read when numpy loads its BLAS, after this. A variable a process reads only when it starts (the
hash seed, the malloc thresholds) that the configuration sets otherwise cannot be set from here: the server then
starts again with it (`os.execve`, the same command and passed descriptors; its variables then win, so it happens
at most once). A variable the command's caller set is kept, as the nanny keeps it; one the command chose
(`worker_start.GUESSED`), the configuration decides.
"""

from __future__ import annotations

import os
import sys

from .worker_start import GUESSED, pre_spawn_environ, worker_environ

# Read when numpy loads its BLAS, which this module precedes in the preload: setting them here is in time.
_READ_AT_IMPORT = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"})


def _apply() -> None:
    guessed = os.environ.pop(GUESSED, "").split()
    own = {k: v for k, v in os.environ.items() if k not in guessed}  # what the command's caller set
    wanted = worker_environ(pre_spawn_environ(), own)
    late = {k for k, v in wanted.items() if os.environ.get(k) != v} - _READ_AT_IMPORT
    if late:
        os.execve(sys.executable, sys.orig_argv, {**own, **wanted})
    os.environ.update(wanted)


# Only in a server `start_worker_server_early` started (which names what it chose): a server the cluster started has
# its whole environment already, and no other process that imports this module (to list the preload, say) is touched.
if GUESSED in os.environ:
    _apply()
