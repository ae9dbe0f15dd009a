"""What one run hands to whatever runs its jobs (`runner.Runner`), by kind of job: plain records, no dask."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..progress import Progress, ProgressEvent
from .slab_progress import ByteCount, SlabEvent

if TYPE_CHECKING:
    from ..manifest import Row
    from ..plan.build import VolumeTask
    from ..plan.parts import VolumePart
    from ..plan.samples import SampleTask
    from ..plan.stacks import ShardTask
    from .batches import VolumeBatch

__all__ = ["Emitted", "Jobs", "ShardTarget"]

ShardTarget = tuple[str, str]
"""Where a stack's shard tasks write: (the staged stack's folder, its records folder)."""


@dataclass(frozen=True, slots=True)
class Jobs:
    """Everything one run hands to its workers, by kind of job."""

    volumes: Sequence[VolumeTask] = ()
    batches: Sequence[VolumeBatch] = ()  # small volumes, several to a task
    shards: Sequence[ShardTask] = ()
    targets: Mapping[str, ShardTarget] = field(default_factory=dict)  # by stack array: where its shards write
    samples: Sequence[SampleTask] = ()
    parts: Mapping[str, Sequence[VolumePart]] = field(default_factory=dict)  # by array: the parts of a volume in parts

    def sizes(self) -> dict[str, int]:
        """Source bytes by source path: what progress and throughput count."""
        return ({t.source: t.size for t in self.volumes} | {t.source: t.size for b in self.batches for t in b.tasks}
                | {i.source: i.size for s in self.shards for i in s.items}
                | {s.source: s.size for s in self.samples}
                | {p[0].task.source: p[0].task.size for p in self.parts.values()})

    def items(self) -> int:
        """How many rows the jobs end in: one per volume (in parts or not), image and sample."""
        return (len(self.volumes) + sum(len(b.tasks) for b in self.batches) + sum(len(s.items) for s in self.shards)
                + len(self.samples) + len(self.parts))


class Emitted:
    """The rows a run's jobs have given so far, whichever runner ran them: each handed to `sink` with whether it is
    a stack image's (a shard's), counted, its source's bytes counted done, and shown to `progress` with the row."""

    def __init__(self, jobs: Jobs, sink: Callable[[Row, bool], object], progress: Progress | None) -> None:
        self.sink, self.progress = sink, progress
        self.bytes = ByteCount(jobs.sizes())
        self.total = jobs.items()  # rows the jobs end in
        self.done = 0

    def start(self) -> None:
        """Show the convert phase's start (where there is anything to convert)."""
        if self.progress and self.total:
            self.progress(ProgressEvent("convert", 0, self.total, 0, self.bytes.total))

    def rows(self, rows: Sequence[Row], *, planar: bool) -> None:
        """Hand on a job's rows (of a shard of 2D images: `planar`)."""
        for row in rows:
            self.sink(row, planar)
            self.done += 1
            self.bytes.finished(row.source)
            if self.progress:
                self.progress(ProgressEvent("convert", self.done, self.total, self.bytes.shown, self.bytes.total,
                                            row))

    def running(self, events: Sequence[SlabEvent]) -> None:
        """Count what running items reported they streamed (`slab_progress.py`); show it where it grew."""
        grew = [self.bytes.running(ev) for ev in events]
        if any(grew) and self.progress:
            self.progress(ProgressEvent("convert", self.done, self.total, self.bytes.shown, self.bytes.total))
