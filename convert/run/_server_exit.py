"""Imported by the worker server alone (the last of `worker_start.PRELOAD`): its preload is done, so what it imported
is frozen (`_server_heap.frozen`). When the driver ends, the server ends
at once, without first freeing every object of the modules it imported (which took it most of a second, and a
caller reading the command's output waits for the server too: it holds the same stdout and stderr). The workers it
forked never run this: multiprocessing ends each of them with `os._exit` already."""

from __future__ import annotations

import atexit
import os

from . import _server_heap

_SERVER = os.getpid()


def _end_now() -> None:
    if os.getpid() == _SERVER:
        os._exit(0)


atexit.register(_end_now)
_server_heap.frozen()
