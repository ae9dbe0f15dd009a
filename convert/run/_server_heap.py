"""Imported by the worker server second of `worker_start.PRELOAD`: the cyclic garbage collector is off while the
server imports the rest, and its heap is frozen when it is done (`frozen`, called by `_server_exit`, the last).

Importing a few hundred modules creates about two hundred thousand objects and almost no garbage: the collector's
passes over them (two full ones and hundreds of young ones) were an eighth of the server's imports
(docs/benchmarks.md, "Fixed cost"), and the server's imports are what every run waits for before its first task.
Frozen (`gc.freeze`), the imported objects are left out of every later collection, in the server and in every
worker forked from it: a worker's full collection then scans its own objects, not the server's modules again, and
does not write to the pages it shares with the server.

Only the server's preload is changed: a process that imports this module otherwise (to list the preload, say) keeps
its collector as it was.
"""

from __future__ import annotations

import gc
import sys
from multiprocessing import forkserver
from types import FrameType

__all__ = ["frozen", "held"]


def _preloading() -> bool:
    """Whether multiprocessing's forkserver is importing this module as its preload."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "main" and frame.f_code.co_filename == forkserver.__file__:
            return True
        frame = frame.f_back
    return False


held = _preloading() and gc.isenabled()
if held:
    gc.disable()


def frozen() -> None:
    """The preload is done: freeze what it imported and turn the collector on again (where `held` turned it off)."""
    if held:
        gc.freeze()
        gc.enable()
