"""The per-item task run on dask workers: read, validate, write, return a row. Total and idempotent.

A bad item returns a rejected row; only a bug in our own code or a decoder
escapes as an exception other than `Rejected`, and that too becomes a
`decoder_crash` row here, at the task boundary, and nowhere else.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from labzarr.readers import READERS, Limits, Reason, Rejected, Volume, read_head

from .manifest import Row
from .plan import Task
from .spec import StoreSpec
from .store import AXES, write_volume
from .validate import check_finite

__all__ = ["TaskSettings", "convert_item"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """What every task needs besides its own item: shipped once per task, small."""

    store: str
    store_spec: StoreSpec
    limits: Limits
    non_finite: Literal["reject", "warn"]


def convert_item(task: Task, settings: TaskSettings) -> Row:
    """Convert one item; returns its manifest row for every outcome."""
    base = Row(item_id=task.item_id, status="ok", source=task.source, kind=task.kind, sha256=task.sha256)
    try:
        volume = _read(task, settings.limits)
        warnings = volume.warnings + check_finite(volume, settings.non_finite)
        write_volume(Path(settings.store), task.array, volume, spec=settings.store_spec,
                     attrs=_attrs(task, volume), complete=task.sha256)
    except Rejected as exc:
        return base.rejected(exc.reason, exc.detail)
    except MemoryError as exc:
        return base.rejected(Reason.TOO_LARGE, f"out of memory while decoding: {exc}")
    except Exception as exc:  # the task boundary: a decoder bug must cost one item, not the run
        log.exception("decoder crashed on %s", task.source)
        return base.rejected(Reason.DECODER_CRASH, f"{type(exc).__name__}: {exc}")
    return Row(
        item_id=task.item_id, status="ok", source=task.source, kind=volume.kind, sha256=task.sha256,
        shape=tuple(volume.data.shape), dtype=str(volume.data.dtype), spacing=volume.spacing,
        orientation=volume.orientation, array=task.array, warnings=warnings,
    )


def _read(task: Task, limits: Limits) -> Volume:
    reader = next(r for r in READERS if r.kind == task.kind)
    path = Path(task.path)
    return reader.read(path, limits, read_head(path))


def _attrs(task: Task, volume: Volume) -> dict[str, object]:
    return {
        "item_id": task.item_id,
        "source": task.source,
        "sha256": task.sha256,
        "kind": volume.kind,
        "spacing": list(volume.spacing),
        "affine": [list(row) for row in volume.affine],
        "orientation": "RAS",
        "source_orientation": volume.orientation,
        "axes": list(AXES[: volume.data.ndim]),
        "labels": {},
        "content_sha256": _content_hash(volume),
    }


def _content_hash(volume: Volume) -> str:
    h = hashlib.sha256()
    h.update(str(volume.data.dtype).encode() + str(volume.data.shape).encode())
    h.update(np.ascontiguousarray(volume.data).data)
    return h.hexdigest()
