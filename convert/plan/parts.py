"""One big volume written in parts that several workers write at once: records and pure planning.

Invariant: a part is a run of whole slabs -- shard-rows (chunk-rows) along the
axis the source streams -- so no two parts write one chunk or shard; the parts
cover every slab once, in file order, and only the last reads to the end of
the file, where a source runs its whole-stream checks (a gzip trailer). The
driver stages the array before the parts run and seals it after the last one
(`run/part_task.py`), so the stored bytes, attrs and row are those of the same
volume converted by one task: the parts change who writes, never what.

A part other than the first still reads the file from its start up to its
first slab (a gzip stream cannot be entered in the middle): the cost is the
inflate of the skipped bytes, small next to the encoding it shares out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labzarr.readers import Reason, VolumeHeader
from labzarr.store.content import ChunkDigests

from ..intensity import PartialStats
from .build import VolumeTask

__all__ = ["PartResult", "VolumePart", "part_slabs"]


@dataclass(frozen=True, slots=True)
class VolumePart:
    """Slabs `first` up to `stop` of `task`'s volume, written into the array staged at `folder`."""

    task: VolumeTask
    header: VolumeHeader  # as the driver read it when staging: every part must read the same
    folder: str  # the staged array every part of this volume writes into: a path, or a URL
    index: int
    count: int  # parts of this volume
    first: int
    stop: int | None  # None for the last part: it reads to the end of the file

    @property
    def report_key(self) -> str:
        """The name its fault report goes by."""
        return f"{self.task.array}~part{self.index}"


@dataclass(frozen=True, slots=True)
class PartResult:
    """What a part hands back for the driver to seal the volume with."""

    index: int
    digests: ChunkDigests  # chunk index -> digest, for every chunk the part wrote
    nonfinite: int = 0  # NaN/Inf voxels among its slabs
    first_nonfinite: tuple[int, ...] | None = None  # the first one, (c, x, y, z)
    rejected: tuple[Reason, str] | None = None  # the reader (or a check) refused the item while reading this part
    stats: PartialStats | None = None  # its slabs' statistics (None with `[store] statistics = false`)


def part_slabs(slabs: int, volume_bytes: int, *, workers: int, parts_bytes: int) -> tuple[tuple[int, int], ...]:
    """Slab ranges `[first, stop)` in file order: one per part of about `parts_bytes`, at most one per worker.

    One range covering every slab means: one part, one task (`parts_bytes` 0, one worker, one slab, a small volume).
    """
    if parts_bytes <= 0 or workers < 2 or slabs < 2 or volume_bytes <= parts_bytes:
        return ((0, slabs),)
    n = min(workers, slabs, math.ceil(volume_bytes / parts_bytes))
    bounds = [i * slabs // n for i in range(n + 1)]
    return tuple(zip(bounds[:-1], bounds[1:]))
