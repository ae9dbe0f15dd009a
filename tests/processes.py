"""Stopping the `dask scheduler` and `dask worker` processes a cluster test started itself."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


def stop_cluster(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Stop `procs` (the scheduler first in the list, then its workers): the workers first, while their scheduler
    still answers (a worker told to stop after the scheduler went keeps retrying the connection until its own
    timeout), each terminated, then killed if it has not gone in 30 s."""
    for group in (procs[1:], procs[:1]):
        for p in group:
            if p.poll() is None:
                p.terminate()
        for p in group:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
