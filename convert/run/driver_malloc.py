"""The `labzarr convert` process's glibc malloc settings: memory the driver frees goes back to the system.

A driver receives each task's rows in a message of a few hundred KB, writes them to disk (`row_spill.py`) and
frees them. glibc raises its mmap threshold to the size of the largest block freed so far, so after the first such
message every later one is carved from the heap, and the heap keeps what is freed in its middle: the driver's RSS
grew with every item converted although it held nothing of them (docs/benchmarks.md, "Scale: many tiny files").
A fixed threshold (which also stops the raising) puts every block from 128 KiB up in a mapping of its own,
unmapped when freed, and a fixed trim threshold gives back the heap's free top. The driver makes no large buffers
often (pixels stay on the workers), so the mappings cost it little; the workers keep their own settings
(`worker_start.WORKER_MALLOC`).

Only the command sets these, for its own process: a program calling `convert_delivery` keeps its allocator as it
chose. Where the C library is not glibc (no `mallopt`), nothing is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["DRIVER_MALLOC", "tune_driver_malloc"]

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
DRIVER_MALLOC: dict[int, int] = {_M_MMAP_THRESHOLD: 128 << 10, _M_TRIM_THRESHOLD: 128 << 10}


def tune_driver_malloc() -> bool:
    """Apply `DRIVER_MALLOC` to this process with glibc's `mallopt`; False where there is no `mallopt`."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no mallopt in the C library (%s): the driver's malloc settings are the defaults", name)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in DRIVER_MALLOC.items())
