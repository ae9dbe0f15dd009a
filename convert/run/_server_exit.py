"""Imported by the worker server alone (the last of `worker_start.PRELOAD`): when the driver ends, the server ends
at once, without first freeing every object of the modules it imported (which took it most of a second, and a
caller reading the command's output waits for the server too: it holds the same stdout and stderr). The workers it
forked never run this: multiprocessing ends each of them with `os._exit` already."""

from __future__ import annotations

import atexit
import os

_SERVER = os.getpid()


def _end_now() -> None:
    if os.getpid() == _SERVER:
        os._exit(0)


atexit.register(_end_now)
