"""Readers whose decoders fail in the way a file asks, for the task-boundary test (tests/convert/test_boundary.py).

A file reading `LABZARR-CASE <case>\\n` is sniffed by both readers; `<case>` is how its decoding ends:
`rejected` (the reader's refusal), `memory` (MemoryError), `crash` (a bug: ValueError), `segfault` (a real
SIGSEGV in C) or `ok`. The volume reader streams a 1x8x8x40 int16 volume and fails on its first slab, after
its header was read (so a volume in parts is staged first, as on the driver); the planar one is an 8x8 uint8
image and fails when decoded. Workers import this module by name (`tests.boundary_readers`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from labzarr.readers import Head, Limits, Plane, Reason, Rejected, Slab, Volume, VolumeHeader

MAGIC = b"LABZARR-CASE "
PLUGINS = ["tests.boundary_readers:CaseVolumeReader", "tests.boundary_readers:CasePlanarReader"]
SHAPE = (1, 8, 8, 40)
_EYE = tuple(tuple(float(i == j) for j in range(4)) for i in range(4))


def case_file(path: Path, case: str, *, planar: bool = False) -> Path:
    """Write a file whose decoding ends as `case`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MAGIC + (b"2d " if planar else b"3d ") + case.encode() + b"\n")
    return path


def _case(path: Path) -> str:
    return path.read_bytes()[len(MAGIC) + 3:].decode().strip()


def fail(case: str) -> None:
    """End a decoding as `case` says; returns for `ok`."""
    if case == "rejected":
        raise Rejected(Reason.CORRUPT_DATA, "the test decoder refused this file")
    if case == "memory":
        raise MemoryError("cannot allocate 9 EiB")
    if case == "crash":
        raise ValueError("a decoder bug")
    if case == "segfault":
        ctypes.string_at(0)


class _Source:
    def __init__(self, case: str) -> None:
        self.case = case
        self._header = VolumeHeader(kind=CaseVolumeReader.kind, shape=SHAPE, dtype=np.dtype(np.int16),
                                    spacing=(1.0, 1.0, 1.0), affine=_EYE, orientation="RAS", stream_axis=3,
                                    voxel_bytes=2)

    @property
    def header(self) -> VolumeHeader:
        return self._header

    def slab_count(self, chunks: Sequence[int]) -> int:
        return -(-SHAPE[3] // int(chunks[3]))

    def slabs(self, chunks: Sequence[int], *, first: int = 0, stop: int | None = None) -> Iterator[Slab]:
        step = int(chunks[3])
        for index in range(first, self.slab_count(chunks) if stop is None else stop):
            fail(self.case)
            z0, z1 = index * step, min(SHAPE[3], (index + 1) * step)
            yield Slab(region=(slice(0, 1), slice(0, 8), slice(0, 8), slice(z0, z1)),
                       data=np.full((1, 8, 8, z1 - z0), index + 1, dtype=np.int16))


class CaseVolumeReader:
    """A streaming reader of the 3D case files."""

    kind: ClassVar[str] = "test-case-volume"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(MAGIC + b"3d ")

    def open(self, path: Path, limits: Limits, head: Head) -> _Source:
        return _Source(_case(path))

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        raise AssertionError("streamed, never read whole")


class CasePlanarReader:
    """A 2D reader of the planar case files: they land in a stack's shard."""

    kind: ClassVar[str] = "test-case-planar"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(MAGIC + b"2d ")

    def plane(self, path: Path, head: Head) -> Plane:
        return Plane(channels=1, height=8, width=8, dtype="uint8")

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        fail(_case(path))
        return Volume(kind=self.kind, data=np.full((1, 8, 8), 7, dtype=np.uint8), spacing=(), affine=(),
                      orientation="")
