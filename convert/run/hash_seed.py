"""The hash seed of the `labzarr convert` command: the one dask gives its workers, since its worker server is forked
from it (`server_fork.py`) and a forked process hashes with the seed of the process it was forked from.

The seed is read only when an interpreter starts, so the command starts again with it (`restart_with_workers_seed`,
once it knows it will start a cluster, before it imports numpy) where its caller set none; a delivery converted
without a cluster (`small_run.py`) needs no such seed, and the command then does not start again. dask's
configuration may give the workers another seed; that is known only once it is read, and the command then starts
its server by exec instead (`cli._start_workers`), as after a run without a cluster that failed. This module imports
nothing: it runs before the command's heavy imports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

__all__ = ["CHOSEN", "HASH_SEED", "caller_environ", "forget_chosen_seed", "restart_with_workers_seed"]

HASH_SEED = "6640"  # dask's nanny gives every worker this seed unless one is set (so that hashing agrees between them)
CHOSEN = "LABZARR_SEED_CHOSEN"  # in the environment the command started again with: the seed there is its own choice


def restart_with_workers_seed() -> None:
    """Start this process again (`os.execve`, the same command line) with `HASH_SEED` where its caller set no seed,
    or one that turns hashing's randomisation off ("0", which dask's nanny replaces too); otherwise return."""
    if os.environ.get("PYTHONHASHSEED") in (None, "0"):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONHASHSEED": HASH_SEED, CHOSEN: "1"})


def caller_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` as the command's caller set it: without the seed `restart_with_workers_seed` chose."""
    chosen = CHOSEN in environ
    return {k: v for k, v in environ.items() if k != CHOSEN and not (chosen and k == "PYTHONHASHSEED")}


def forget_chosen_seed(environ: MutableMapping[str, str]) -> None:
    """Make `environ` the caller's again (a run that starts no cluster of its own: `--scheduler`, `--dry-run`); its
    interpreter keeps the seed, which only hashing in this process sees."""
    if environ.pop(CHOSEN, None) is not None:
        environ.pop("PYTHONHASHSEED", None)
