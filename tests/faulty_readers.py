"""Readers that fail the way C decoders do, plugged in through the spec's `[run] readers` extension point.

A file whose content starts with `SEGFAULT_MAGIC` makes the worker process die of a real SIGSEGV; one
starting with `HANG_MAGIC` never returns; one starting with `SLAB_SEGFAULT_MAGIC` streams slabs until its
last. Workers import this module by name, so it must stay importable as `tests.faulty_readers` (the repo
root is on the workers' sys.path, inherited from pytest).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar, NoReturn

import numpy as np

from labzarr.readers import Head, Limits, Plane, Reason, Rejected, Slab, VolumeHeader

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


SLAB_SEGFAULT_MAGIC = b"LABZARR-TEST-SEGFAULT-SLAB\n"
SLAB_PLUGINS = ["tests.faulty_readers:SlabSegfaultReader"]


class _LastSlabSegfaults:
    """A streamed 1x8x8x40 int16 volume whose decoder segfaults on its last slab (past its first part)."""

    def __init__(self) -> None:
        self._header = VolumeHeader(kind=SlabSegfaultReader.kind, shape=(1, 8, 8, 40), dtype=np.dtype(np.int16),
                                    spacing=(1.0, 1.0, 1.0), affine=tuple(tuple(float(i == j) for j in range(4))
                                                                          for i in range(4)),
                                    orientation="RAS", stream_axis=3, voxel_bytes=2)

    @property
    def header(self) -> VolumeHeader:
        return self._header

    def slab_count(self, chunks: Sequence[int]) -> int:
        return -(-40 // int(chunks[3]))

    def slabs(self, chunks: Sequence[int], *, first: int = 0, stop: int | None = None) -> Iterator[Slab]:
        count = self.slab_count(chunks)
        step = int(chunks[3])
        for index in range(first, count if stop is None else stop):
            if index == count - 1:
                ctypes.string_at(0)
            z0, z1 = index * step, min(40, (index + 1) * step)
            yield Slab(region=(slice(0, 1), slice(0, 8), slice(0, 8), slice(z0, z1)),
                       data=np.full((1, 8, 8, z1 - z0), index, dtype=np.int16))


class SlabSegfaultReader:
    """A streaming reader (it has `open`) whose decoder kills the worker while reading the file's last slab."""

    kind: ClassVar[str] = "test-slab-segfault"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(SLAB_SEGFAULT_MAGIC)

    def open(self, path: Path, limits: Limits, head: Head) -> _LastSlabSegfaults:
        return _LastSlabSegfaults()

    def read(self, path: Path, limits: Limits, head: Head) -> NoReturn:
        ctypes.string_at(0)
        raise AssertionError("unreachable: reading address 0 kills the process")


WHERE_MAGIC = b"LABZARR-TEST-WHERE\n"
WHERE_PLUGINS = ["tests.faulty_readers:WhereReader"]


class WhereReader:
    """Refuses every file it sniffs, saying in the row's detail which process read it, that process's parent, and
    whether dask was imported there: where a run converted its items, seen from its manifest."""

    kind: ClassVar[str] = "test-where"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(WHERE_MAGIC)

    def read(self, path: Path, limits: Limits, head: Head) -> NoReturn:
        import os
        import sys

        raise Rejected(Reason.UNSUPPORTED_FORMAT,
                       f"pid={os.getpid()} ppid={os.getppid()} dask={'distributed' in sys.modules}")
