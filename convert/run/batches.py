"""Small volumes converted several to a task: a dask task costs the driver, the scheduler and the worker a round
trip each, which on a delivery of many small series was as long as converting one (docs/benchmarks.md).

Invariant: a batch changes only how items are scheduled, never what is written or which row an item gets. Each
item runs through `convert_item` exactly as a task of its own would; a batch whose worker dies, or that runs
past the item timeout, is redone item by item, each as a task of its own, so only the culprit is lost
(`supervise.py`), as a shard of 2D images is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..manifest import Row
from ..plan.build import VolumeTask
from ..write.arrays import Staged, publish
from ..write.writer import store_io
from .settings import TaskSettings
from .volume_task import convert_item

__all__ = ["VolumeBatch", "batch_volumes", "convert_batch"]

_SMALL_BYTES = 2 << 20  # source bytes up to which an item is small enough to share a task
_MOST = 8  # items a batch holds at most: a crash or a timeout redoes that many
_PER_WORKER = 4  # batches a worker gets at least, so that the last ones still spread over every worker


@dataclass(frozen=True, slots=True)
class VolumeBatch:
    """Small volume tasks run one after the other in one dask task (`convert_batch`), in plan order."""

    tasks: tuple[VolumeTask, ...]


def batch_volumes(tasks: Sequence[VolumeTask], workers: int) -> tuple[list[VolumeTask], list[VolumeBatch]]:
    """(the tasks that run alone, the batches the small ones are grouped in): small items in plan order, as few
    to a batch as leaves every worker `_PER_WORKER` batches, and at most `_MOST`; a batch of one runs alone."""
    small = [t for t in tasks if t.size <= _SMALL_BYTES]
    alone = [t for t in tasks if t.size > _SMALL_BYTES]
    size = min(_MOST, max(1, math.ceil(len(small) / (_PER_WORKER * max(1, workers)))))
    groups = [tuple(small[i : i + size]) for i in range(0, len(small), size)]
    alone += [g[0] for g in groups if len(g) == 1]
    return alone, [VolumeBatch(g) for g in groups if len(g) > 1]


def convert_batch(batch: VolumeBatch, settings: TaskSettings) -> list[Row]:
    """Convert each item of `batch` as its own task would (runs on a worker); one row per item, in order.

    The ok items' sealed arrays are published together at the end (`publish`: their files fsynced in one pass,
    each moved into place, each destination folder synced once), not one by one: a small item's own fsyncs
    were a large share of its time (docs/benchmarks.md). Until then they lie in staging, as any unfinished
    array, and a worker that dies leaves them to the next sweep.

    No fault reports are written (creating and removing a file an item): a batch that dies or hangs is redone
    item by item, and those tasks write theirs."""
    staged: list[Staged] = []
    quiet = replace(settings, fault_reports=False)
    rows = [convert_item(task, quiet, defer=staged) for task in batch.tasks]
    store = settings.location()
    with store_io(store, f"cannot install {len(staged)} arrays"):
        publish(staged)
    return rows
