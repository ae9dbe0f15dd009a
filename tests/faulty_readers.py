"""Readers that fail the way C decoders do, plugged in through the spec's `[run] readers` extension point.

A file whose content starts with `SEGFAULT_MAGIC` makes the worker process die of a real SIGSEGV; one
starting with `HANG_MAGIC` never returns. Workers import this module by name, so it must stay importable
as `tests.faulty_readers` (the repo root is on the workers' sys.path, inherited from pytest).
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import ClassVar, NoReturn

from labzarr.readers import Head, Limits, Plane

SEGFAULT_MAGIC = b"LABZARR-TEST-SEGFAULT\n"
HANG_MAGIC = b"LABZARR-TEST-HANG\n"
PLANAR_SEGFAULT_MAGIC = b"LABZARR-TEST-SEGFAULT-2D\n"
PLUGINS = ["tests.faulty_readers:SegfaultReader", "tests.faulty_readers:HangReader"]
PLANAR_PLUGINS = ["tests.faulty_readers:PlanarSegfaultReader"]


class SegfaultReader:
    """Dereferences NULL in C: the worker dies of SIGSEGV, as with a crashing decoder."""

    kind: ClassVar[str] = "test-segfault"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(SEGFAULT_MAGIC)

    def read(self, path: Path, limits: Limits, head: Head) -> NoReturn:
        ctypes.string_at(0)
        raise AssertionError("unreachable: reading address 0 kills the process")


class HangReader:
    """Never returns, like a decoder stuck in a loop on a malformed stream."""

    kind: ClassVar[str] = "test-hang"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(HANG_MAGIC)

    def read(self, path: Path, limits: Limits, head: Head) -> NoReturn:
        while True:
            time.sleep(3600)


class PlanarSegfaultReader:
    """A 2D format whose header says 1x8x8 uint8 and whose decoder segfaults: it lands in a shard of PNGs."""

    kind: ClassVar[str] = "test-planar-segfault"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(PLANAR_SEGFAULT_MAGIC)

    def plane(self, path: Path, head: Head) -> Plane:
        return Plane(channels=1, height=8, width=8, dtype="uint8")

    def read(self, path: Path, limits: Limits, head: Head) -> NoReturn:
        ctypes.string_at(0)
        raise AssertionError("unreachable: reading address 0 kills the process")
