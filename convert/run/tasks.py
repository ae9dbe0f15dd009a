"""What every runner of a run's jobs shares: the job function of each kind of job, the order jobs are submitted in,
and a volume's parts gathered until the last is in (`supervise.py`, `forked.py`, `in_process.py`).

The runners differ in where and when a job runs; these decide what runs and what its rows are, so that the store
and the manifest are the same bytes whichever runner ran them (`runner.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from ..manifest import Row
from ..plan.build import VolumeTask
from ..plan.parts import PartResult, VolumePart
from ..plan.samples import SampleTask
from ..plan.stacks import ShardTask
from .batches import VolumeBatch, convert_batch
from .boundary import Job
from .jobs import Jobs
from .part_task import convert_part, finish_parts
from .sample_task import convert_sample
from .settings import TaskSettings
from .shard_task import convert_shard
from .volume_task import convert_item

__all__ = ["TASKS", "PartsDone", "call_of", "in_order"]

# The job function of each kind of job but a shard of 2D images, which is told where its stack writes (`call_of`).
TASKS: dict[type, Callable[..., Any]] = {VolumeTask: convert_item, VolumeBatch: convert_batch,
                                          SampleTask: convert_sample, VolumePart: convert_part}


def in_order(jobs: Jobs) -> Iterator[Job | VolumeBatch]:
    """Every job in the order a run submits them: volumes, batches of small volumes, shards, samples, then each
    volume's parts, volume after volume."""
    every_part = (part for volume in jobs.parts.values() for part in volume)
    return chain(jobs.volumes, jobs.batches, jobs.shards, jobs.samples, every_part)


def call_of(job: Job | VolumeBatch, jobs: Jobs) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The function that runs `job` (called with the job and the run's `TaskSettings`), and its keyword arguments."""
    if isinstance(job, ShardTask):
        folder, records = jobs.targets[job.stack.array]
        return convert_shard, {"folder": folder, "records": records}
    return TASKS[type(job)], {}


class PartsDone:
    """The outcomes of each volume's parts so far; a volume's row once its last part is in."""

    def __init__(self, parts: Mapping[str, Sequence[VolumePart]], settings: TaskSettings) -> None:
        self._parts, self._settings = parts, settings
        self._got: dict[str, dict[int, PartResult | Row]] = {}  # by array: each part's outcome so far

    def add(self, part: VolumePart, outcome: PartResult | Row) -> Row | None:
        """Record one part's outcome; with the last one in, seal the volume (or drop it) and give its row
        (`part_task.finish_parts`, which raises `StoreWriteError` where the store cannot be written)."""
        got = self._got.setdefault(part.task.array, {})
        got[part.index] = outcome
        if len(got) < part.count:
            return None
        return finish_parts(self._parts[part.task.array], [got[i] for i in range(part.count)], self._settings)

    def rows(self, job: Job | VolumeBatch, result: Any) -> list[Row]:
        """The rows a finished job gives: its own, or for a volume's part, the volume's once its last part is in."""
        if isinstance(job, VolumePart):
            row = self.add(job, result)
            return [] if row is None else [row]
        return [result] if isinstance(result, Row) else list(result)
