"""The one slab loop every task that writes a volume runs: check each slab, write it, count it, report it.

A whole volume (`volume_task.py`), a part of one (`part_task.py`) and a sample's image or other role
(`sample_task.py`) differ in where their slabs come from, which writer takes them and what they count;
the loop itself is this one, so its order is the same for all of them:

- the finite check sees every slab, so its detail names the first NaN/Inf wherever it lies;
- once the item is sure to be rejected its voxels are not worth writing or counting, but the stream is
  still read to its end: truncation and corruption keep precedence over `non_finite`, as when read whole;
- progress counts every slab read, written or not, since it measures the source streamed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from labzarr.readers import Slab

from ..validate import FiniteCheck

__all__ = ["SlabCounter", "SlabWriter", "write_slabs"]


class SlabWriter(Protocol):
    """Takes slabs into an array (`VolumeWriter`, `PartWriter`)."""

    def write(self, slab: Slab) -> None: ...


class SlabCounter(Protocol):
    """Sees slabs one by one: statistics (`Accumulator`) or progress (`SlabReporter`)."""

    def update(self, slab: Slab) -> None: ...


def write_slabs(slabs: Iterable[Slab], *, finite: FiniteCheck, writer: SlabWriter,
                stats: Sequence[SlabCounter] = (), progress: SlabCounter | None = None) -> None:
    """Run every slab through `finite`, then (unless the item is by now rejected) `writer` and each of `stats`
    in order, then `progress`. The caller asks `finite` for the outcome once the slabs are done."""
    for slab in slabs:
        finite.update(slab)
        if not finite.rejecting:
            writer.write(slab)
            for counter in stats:
                counter.update(slab)
        if progress is not None:
            progress.update(slab)
