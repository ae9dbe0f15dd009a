"""The per-item task run on dask workers: stream, validate, write, return a row. Total and idempotent.

Memory: a volume is read and written slab by slab (readers/slabs.py), so a
worker holds one slab, never the whole volume.

A bad item returns a rejected row; only a bug in our own code or a decoder
escapes as an exception other than `Rejected`, and that too becomes a
`decoder_crash` row here, at the task boundary, and nowhere else. Two failures
are not the item's fault and do escape: `StoreWriteError` (disk full, read-only
store) stops the run, and `Superseded` drops the work of a task whose own run
died and was replaced. Running a task twice writes the same array twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from labzarr.readers import (
    Limits,
    Reason,
    Rejected,
    Volume,
    VolumeHeader,
    VolumeSource,
    open_source,
    read_head,
    readers_with,
)
from labzarr.readers.dicom import open_series
from labzarr.store import Folder, Location, as_location

from .chunks import SLAB_BYTES, plan_chunks, plan_shards
from .faults import fault_report, report_path
from .manifest import Row
from .plan import Task
from .resume import to_record
from .spec import StoreSpec
from .state import crash_dir
from .store import StoreWriteError, Superseded, codecs
from .validate import FiniteCheck
from .writer import AXES, VolumeWriter

__all__ = ["TaskSettings", "attrs_for", "convert_item", "ok_row", "open_volume", "read_file", "task_row", "volume_layout"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """What every task needs besides its own item: shipped once per task, small."""

    store: str
    store_spec: StoreSpec
    limits: Limits
    non_finite: Literal["reject", "warn"]
    slab_bytes: int = SLAB_BYTES  # memory for one slab of a streamed volume (see convert/chunks.py)
    run_id: str = ""  # the lock holder's run id: a task of a dead run never installs an array
    settings: str = ""  # the settings fingerprint recorded beside each array (resume.py)
    readers: tuple[str, ...] = ()  # extra readers, "module:Name", before the built-in ones
    hang_report_after: float | None = None  # seconds after which a hung item's stack is written to its report
    fault_reports: bool = True  # only where a worker runs one task at a time (faulthandler is per process)
    store_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec storage_options of a URL store
    crash_reports: str = ""  # the fault reports' folder; default: the store's .labzarr/crash

    def location(self) -> Location:
        """The store: a folder, or a URL store with its storage options."""
        return as_location(self.store, self.store_options)

    def reports(self) -> Path:
        """Where workers write fault reports: a local folder (faulthandler needs a file descriptor)."""
        if self.crash_reports:
            return Path(self.crash_reports)
        return crash_dir(Folder(self.store))


def convert_item(task: Task, settings: TaskSettings) -> Row:
    """Convert one item, slab by slab; returns its manifest row for every outcome."""
    store = settings.location()
    with fault_report(report_path(settings.reports(), task.array), hang_after=settings.hang_report_after,
                      enabled=settings.fault_reports):
        return _convert(task, settings, store)


def _convert(task: Task, settings: TaskSettings, store: Location) -> Row:
    base = task_row(task)
    writer: VolumeWriter | None = None
    try:
        source = open_volume(task, settings)
        h = source.header
        chunks, shards = volume_layout(h, settings)
        finite = FiniteCheck(h, settings.non_finite)
        writer = VolumeWriter(store, task.array, h, chunks=chunks, shards=shards, codecs=codecs(settings.store_spec),
                              attrs=attrs_for(task.item_id, task.source, task.sha256, h), run_id=settings.run_id)
        for slab in source.slabs(shards or chunks):  # a slab holds whole shards along the stream axis
            finite.update(slab)
            # A rejected item's voxels are not worth writing, but its stream is read to the end:
            # truncation and corruption keep precedence over non_finite, as when read whole.
            if not finite.rejecting:
                writer.write(slab)
        row = ok_row(base, task, h, finite.outcome())
        # What a rerun reuses when the source is unchanged, recorded before `complete`.
        writer.finish(attrs={"row": to_record(row), "settings": settings.settings}, complete=task.sha256)
    except (StoreWriteError, Superseded):
        raise
    except Rejected as exc:
        return base.rejected(exc.reason, exc.detail)
    except MemoryError as exc:
        return base.rejected(Reason.TOO_LARGE, f"out of memory while decoding: {exc}")
    except Exception as exc:  # the task boundary: a decoder bug must cost one item, not the run
        log.exception("decoder crashed on %s", task.source)
        return base.rejected(Reason.DECODER_CRASH, f"{type(exc).__name__}: {exc}")
    finally:
        if writer is not None:
            writer.close()
    return row


def task_row(task: Task) -> Row:
    """The row every outcome of `task` starts from: what the plan knows about the item."""
    return Row(item_id=task.item_id, status="ok", source=task.source, kind=task.kind, sha256=task.sha256,
               n_files=max(1, len(task.members)), members=task.members)


def ok_row(base: Row, task: Task, h: VolumeHeader, finite_warnings: tuple[str, ...]) -> Row:
    """The row of a volume written whole: its geometry and every warning, in the order a reader gave them."""
    return replace(base, kind=h.kind, shape=tuple(h.shape), dtype=str(h.dtype), spacing=h.spacing,
                   orientation=h.orientation, array=task.array, warnings=task.warnings + h.warnings + finite_warnings)


def volume_layout(h: VolumeHeader, settings: TaskSettings) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The (chunks, shards) a volume of header `h` is stored with: a pure function of `h` and the settings."""
    chunks = plan_chunks(h.shape, settings.store_spec.chunks, voxel_bytes=h.voxel_bytes,
                         stream_axis=h.stream_axis, budget=settings.slab_bytes)
    shards = plan_shards(h.shape, chunks, settings.store_spec.shards, voxel_bytes=h.voxel_bytes,
                         stream_axis=h.stream_axis, budget=settings.slab_bytes)
    return chunks, shards


def open_volume(task: Task, settings: TaskSettings) -> VolumeSource:
    """The item's source, its header validated (no voxel read yet); raises `Rejected`."""
    if task.stack is not None:  # a DICOM item: its series was laid out when planning
        return open_series(task.stack, settings.limits)
    reader = next(r for r in readers_with(settings.readers) if r.kind == task.kind)
    path = Path(task.path)
    return open_source(reader, path, settings.limits, read_head(path))


def read_file(kind: str, path: Path, limits: Limits, readers: tuple[str, ...] = ()) -> Volume:
    """Decode one whole file with the reader of `kind` (the kind its probe sniffed): how 2D images are read."""
    reader = next(r for r in readers_with(readers) if r.kind == kind)
    return reader.read(path, limits, read_head(path))


def attrs_for(item_id: str, source: str, sha256: str, header: VolumeHeader) -> dict[str, object]:
    """A volume array's attrs: where it came from and its canonical geometry."""
    return {
        "item_id": item_id,
        "source": source,
        "sha256": sha256,
        "kind": header.kind,
        "spacing": list(header.spacing),
        "affine": [list(row) for row in header.affine],
        # A volume's voxels are in RAS order; a 2D image (C, H, W) keeps its rows and columns and has no patient frame.
        "orientation": "RAS" if len(header.shape) == 4 else "",
        "source_orientation": header.orientation,
        "axes": list(AXES) if len(header.shape) == 4 else ["c", "y", "x"],
        "labels": {},
    }
