"""What one run hands to whatever runs its jobs (`runner.Runner`), by kind of job: plain records, no dask."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan.build import VolumeTask
    from ..plan.parts import VolumePart
    from ..plan.samples import SampleTask
    from ..plan.stacks import ShardTask
    from .batches import VolumeBatch

__all__ = ["Jobs", "ShardTarget"]

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
