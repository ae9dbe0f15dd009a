"""The shard task run on dask workers: decode a shard's 2D images, write the shard once, return a row per image.

Total and idempotent like `convert_item`: a bad image is a rejected row and an
empty (zero) slot, never a failed task. The images are written in one call
covering the task's whole slot range, so a shard is written once, by one task.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from labzarr.readers import Reason, Rejected, Volume

from .manifest import Row
from .stacks import ShardTask, SlotItem
from .store import write_slots
from .task import TaskSettings, read_file
from .validate import check_finite

__all__ = ["convert_shard"]

log = logging.getLogger(__name__)


def convert_shard(task: ShardTask, settings: TaskSettings) -> list[Row]:
    """Convert every image of one shard task; returns one row per image, in slot order."""
    plane = task.stack.plane
    batch = np.zeros((task.stop - task.first, *plane.shape), dtype=plane.dtype)
    rows: list[Row] = []
    for item in task.items:
        base = Row(item_id=item.item_id, status="ok", source=item.source, kind=item.kind, sha256=item.sha256)
        try:
            volume, warnings = _decode(item, task, settings)
        except Rejected as exc:
            rows.append(base.rejected(exc.reason, exc.detail))
            continue
        except MemoryError as exc:
            rows.append(base.rejected(Reason.TOO_LARGE, f"out of memory while decoding: {exc}"))
            continue
        except Exception as exc:  # the task boundary: a decoder bug must cost one image, not the shard
            log.exception("decoder crashed on %s", item.source)
            rows.append(base.rejected(Reason.DECODER_CRASH, f"{type(exc).__name__}: {exc}"))
            continue
        batch[item.slot - task.first] = volume.data
        rows.append(Row(item_id=item.item_id, status="ok", source=item.source, kind=volume.kind, sha256=item.sha256,
                        shape=plane.shape, dtype=plane.dtype, spacing=volume.spacing, orientation=volume.orientation,
                        array=task.stack.array, slot=item.slot, warnings=warnings))
    if any(r.status == "ok" for r in rows):
        write_slots(Path(settings.store), task.stack.array, task.first, batch)
    return rows


def _decode(item: SlotItem, task: ShardTask, settings: TaskSettings) -> tuple[Volume, tuple[str, ...]]:
    volume = read_file(item.kind, Path(item.path), settings.limits)
    plane = task.stack.plane
    if volume.data.shape != plane.shape or volume.data.dtype != np.dtype(plane.dtype):
        # The header the plan trusted and the decoded pixels disagree: the image cannot go in this stack.
        raise Rejected(Reason.CORRUPT_DATA, f"decoded {'x'.join(map(str, volume.data.shape))} {volume.data.dtype}, "
                                            f"its header announced {'x'.join(map(str, plane.shape))} {plane.dtype}")
    return volume, item.warnings + volume.warnings + check_finite(volume, settings.non_finite)
