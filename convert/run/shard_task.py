"""The shard task run on dask workers: decode a shard's 2D images, write the shard once, return a row per image.

Total and idempotent like `convert_item`: through the task boundary
(`boundary.py`), a bad image is a rejected row and an empty (zero) slot, never
a failed task. The images are written in one call
covering the task's whole slot range, so a shard is written once, by one task,
into the stack the driver staged (`folder`); then the task records what it
wrote (rows and each slot's chunk digest, `plan/records.shard_record`) in `records`,
so the driver can hash the stack and a rerun can carry the shard over unread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from labzarr.readers import Reason, Rejected, Volume
from labzarr.store import Location, as_location
from labzarr.store.content import chunk_digest

from ..intensity import measure
from ..manifest import Row
from ..plan.records import shard_record
from ..plan.stacks import ShardTask, SlotItem
from ..validate import check_finite
from ..write.arrays import StoreWriteError, write_slots
from .boundary import on_worker, refusal
from .settings import TaskSettings
from .volume_task import read_file

__all__ = ["convert_shard"]


def convert_shard(task: ShardTask, settings: TaskSettings, *, folder: str, records: str) -> list[Row]:
    """Convert every image of one shard task into the staged stack at `folder`; one row per image, in slot order."""
    with on_worker(task, settings):
        return _convert(task, settings, as_location(folder, settings.store_options),
                        as_location(records, settings.store_options))


def _convert(task: ShardTask, settings: TaskSettings, folder: Location, records: Location) -> list[Row]:
    plane = task.stack.plane
    batch = np.zeros((task.stop - task.first, *plane.shape), dtype=plane.dtype)
    rows: list[Row] = []
    for item in task.items:
        try:
            volume, warnings = _decode(item, task, settings)
        except Exception as exc:  # the task boundary: a decoder bug must cost one image, not the shard
            rows.append(item.base_row().rejected(*refusal(exc, item.source)))
            continue
        batch[item.slot - task.first] = volume.data
        rows.append(Row(item_id=item.item_id, status="ok", source=item.source, kind=volume.kind, sha256=item.sha256,
                        shape=plane.shape, dtype=plane.dtype, spacing=volume.spacing, orientation=volume.orientation,
                        array=task.stack.array, slot=item.slot, warnings=warnings,
                        stats=measure(volume.data) if settings.store_spec.statistics else None))
    digests = [chunk_digest(batch[i : i + 1]) for i in range(len(batch))]
    name, blob = shard_record(task, rows, digests, settings.fingerprint)
    with _store_io(settings.store, folder, f"cannot write {task.stack.array} slots {task.first}..{task.stop - 1}"):
        write_slots(folder, task.first, batch)  # rejected slots too: zeros, so every slot has its chunk
        (records / name).write_atomic(blob)
    return rows


@contextmanager
def _store_io(store: str, where: Location, what: str) -> Iterator[None]:
    try:
        yield
    except where.transport_errors() as exc:
        raise StoreWriteError(store, f"{what}: {exc}") from exc


def _decode(item: SlotItem, task: ShardTask, settings: TaskSettings) -> tuple[Volume, tuple[str, ...]]:
    volume = read_file(item.kind, Path(item.path), settings.limits, settings.readers)
    plane = task.stack.plane
    if volume.data.shape != plane.shape or volume.data.dtype != np.dtype(plane.dtype):
        # The header the plan trusted and the decoded pixels disagree: the image cannot go in this stack.
        raise Rejected(Reason.CORRUPT_DATA, f"decoded {'x'.join(map(str, volume.data.shape))} {volume.data.dtype}, "
                                            f"its header announced {'x'.join(map(str, plane.shape))} {plane.dtype}")
    return volume, item.warnings + volume.warnings + check_finite(volume, settings.non_finite)
