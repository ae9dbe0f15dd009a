"""Run by each worker of the embedded cluster as it starts (dask's worker preload): its environment becomes exactly
the one the cluster was started with.

A worker is forked from the worker server (`worker_start.py`), which keeps the environment of the moment it started,
and dask's nanny only sets variables on top of that: a variable the caller removed since (credentials unset
between two conversions in one process, say) would still reach every later worker. The cluster names the variables
its workers are to have (`WANTED`, set by `cluster.py`); this drops the others before the worker takes a task.
"""

from __future__ import annotations

import json
import os

__all__ = ["WANTED", "dask_setup", "wanted_environ"]

WANTED = "LABZARR_WORKER_ENVIRON"  # the names (a JSON list) of the variables a worker is to have


def wanted_environ(environ: dict[str, str], also: list[str]) -> dict[str, str]:
    """`environ`, plus `WANTED` naming its variables and `also` (those dask's nanny sets itself)."""
    return {**environ, WANTED: json.dumps(sorted({*environ, *also}))}


def dask_setup(worker: object) -> None:
    """Drop every variable the cluster did not name (nothing in a worker of another cluster, which names none)."""
    names = os.environ.pop(WANTED, None)
    if names is None:
        return
    keep = set(json.loads(names))
    for name in [k for k in os.environ if k not in keep]:
        del os.environ[name]
