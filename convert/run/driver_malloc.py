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

Small blocks (a row, a probe, a key: below the mmap threshold) come from the heap and its arenas whatever the
settings, and the trim threshold only gives back the heap's free top: after a phase that made and dropped one
object per item (the walk and the probes, the plan, the manifest and index pass) the free pages in the middle stay
resident, and the next phase's peak stands on them. `give_back_freed` (glibc's `malloc_trim`) returns those pages
after each such phase; it changes no setting, so the run calls it in any process.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable
from typing import Protocol, cast

__all__ = ["DRIVER_MALLOC", "Mallopt", "give_back_freed", "mallopt", "tune_driver_malloc"]

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
DRIVER_MALLOC: dict[int, int] = {_M_MMAP_THRESHOLD: 128 << 10, _M_TRIM_THRESHOLD: 128 << 10}


class Mallopt(Protocol):
    """glibc's `mallopt(param, value)`: 1 where it took the setting."""

    def __call__(self, param: int, value: int, /) -> int: ...


def tune_driver_malloc() -> bool:
    """Apply `DRIVER_MALLOC` to this process with glibc's `mallopt`; False where there is no `mallopt`."""
    function = mallopt()
    if function is None:
        log.debug("no mallopt in this process's C library: the driver's malloc settings are the defaults")
        return False
    return all(function(param, value) == 1 for param, value in DRIVER_MALLOC.items())


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library this interpreter runs on: its symbols are the process's own (`dlopen` of no file), found
    without `ctypes.util.find_library`, which runs `ldconfig -p` in a subprocess to name the file."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


@functools.cache
def mallopt() -> Mallopt | None:
    """glibc's `mallopt`, or None where the C library has none."""
    function = getattr(_libc(), "mallopt", None)
    if function is None:
        return None
    function.argtypes, function.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return cast(Mallopt, function)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return cast("Callable[[int], int]", trim)


def give_back_freed() -> bool:
    """Return the pages this process's heap holds free to the system (glibc's `malloc_trim(0)`), after a phase that
    dropped many small objects; False where there is no `malloc_trim` (not glibc) or nothing was returned."""
    trim = _malloc_trim()
    if trim is None:
        return False
    return bool(trim(0))
