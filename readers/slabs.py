"""Streaming volumes: a header first, then canonical slabs in file order, in bounded memory.

A reader that can stream (NIfTI) returns a `VolumeSource` from `open()`; any
other reader is adapted with `MemorySource(reader.read(...))`, so the
conversion writes every item the same way. A source validates the whole file:
a `Rejected` may come from the last slab (a bad gzip trailer), so a consumer
claims nothing about an item before the iteration has ended.

Slabs are aligned to the chunk grid the consumer passes (`chunks`, one entry
per axis of `header.shape`): along `header.stream_axis` each slab covers whole
chunks, so no chunk is ever written by two slabs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ._head import Head
from .records import Limits, Slab, Volume, VolumeHeader

__all__ = ["MemorySource", "StreamingReader", "VolumeSource", "assemble", "open_source"]


class VolumeSource(Protocol):
    """A volume's header and its slabs; each call of `slabs` reads the file afresh."""

    @property
    def header(self) -> VolumeHeader:
        """Shape, dtype and geometry, known before any voxel is decoded."""
        ...

    def slab_count(self, chunks: Sequence[int]) -> int:
        """How many slabs `slabs(chunks)` yields in all."""
        ...

    def slabs(self, chunks: Sequence[int], *, first: int = 0, stop: int | None = None) -> Iterator[Slab]:
        """Slabs number `first` up to `stop` (default: the last) in file order, chunk-aligned.

        The whole-stream checks run only when the iteration reaches the end of the file
        (`stop` is None or the count): a caller that reads a part must have another read the rest.
        """
        ...


@runtime_checkable
class StreamingReader(Protocol):
    """A reader that can stream a volume slab by slab (besides `read`, which returns it whole)."""

    def open(self, path: Path, limits: Limits, head: Head) -> VolumeSource:
        """Validate the header and return the source; raises `Rejected`."""
        ...


class MemorySource:
    """A decoded `Volume` seen as a source of one slab: how non-streaming readers are written."""

    def __init__(self, volume: Volume) -> None:
        self._volume = volume
        self._header = VolumeHeader(
            kind=volume.kind, shape=tuple(volume.data.shape), dtype=volume.data.dtype, spacing=volume.spacing,
            affine=volume.affine, orientation=volume.orientation, stream_axis=None,
            voxel_bytes=volume.data.dtype.itemsize, warnings=volume.warnings, metadata=volume.metadata,
        )

    @property
    def header(self) -> VolumeHeader:
        """The volume's header (`stream_axis` None: the whole volume is in memory already)."""
        return self._header

    def slab_count(self, chunks: Sequence[int]) -> int:
        """Always 1."""
        return 1

    def slabs(self, chunks: Sequence[int], *, first: int = 0, stop: int | None = None) -> Iterator[Slab]:
        """The whole volume as one slab."""
        if first == 0 and (stop is None or stop > 0):
            yield Slab(region=tuple(slice(0, n) for n in self._volume.data.shape), data=self._volume.data)


def open_source(reader: object, path: Path, limits: Limits, head: Head) -> VolumeSource:
    """Stream `path` when `reader` can, else read it whole; raises `Rejected`."""
    if isinstance(reader, StreamingReader):
        return reader.open(path, limits, head)
    read = getattr(reader, "read")  # noqa: B009 - `reader` is typed `object`: any plugin with a read method
    return MemorySource(read(path, limits, head))


def assemble(source: VolumeSource) -> npt.NDArray[Any]:
    """Every slab of `source` in one C-contiguous array of `header.shape` (the whole volume in memory)."""
    h = source.header
    out: npt.NDArray[Any] = np.empty(h.shape, dtype=h.dtype)
    for slab in source.slabs(h.shape):
        out[slab.region] = slab.data
    return out
