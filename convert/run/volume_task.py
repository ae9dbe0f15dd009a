"""The per-item task run on dask workers: stream, validate, write, return a row. Total and idempotent.

Memory: a volume is read and written slab by slab (readers/slabs.py), so a
worker holds one slab, never the whole volume.

A bad item returns a rejected row, through the task boundary (`boundary.py`)
every kind of job shares. Running a task twice writes the same array twice.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from labzarr.readers import (
    Limits,
    Volume,
    VolumeHeader,
    VolumeSource,
    open_source,
    read_head,
    readers_with,
)
from labzarr.store import STATS, ItemStats, Location
from labzarr.store.format.index import encode_stats

from ..intensity import Accumulator
from ..manifest import Row
from ..plan.build import VolumeTask
from ..plan.chunks import plan_chunks, plan_shards
from ..plan.records import to_record
from ..validate import FiniteCheck
from ..write.arrays import Staged, codecs
from ..write.writer import AXES, VolumeWriter
from .boundary import on_worker, refusal
from .settings import TaskSettings
from .slab_loop import write_slabs
from .slab_progress import SlabReporter

__all__ = ["attrs_for", "convert_item", "ok_row", "open_volume", "read_file", "record_attrs", "volume_layout"]


def convert_item(task: VolumeTask, settings: TaskSettings, *, defer: list[Staged] | None = None) -> Row:
    """Convert one item, slab by slab; returns its manifest row for every outcome. With `defer`, an ok item's
    sealed array is left staged there, for the caller's `publish` (a batch's, `batches.py`)."""
    with on_worker(task, settings):
        return _convert(task, settings, settings.location(), defer)


def _convert(task: VolumeTask, settings: TaskSettings, store: Location, defer: list[Staged] | None = None) -> Row:
    base = task.base_row()
    writer: VolumeWriter | None = None
    try:
        source = open_volume(task, settings)
        h = source.header
        chunks, shards = volume_layout(h, settings)
        finite = FiniteCheck(h, settings.non_finite)
        writer = VolumeWriter(store, task.array, h, chunks=chunks, shards=shards, codecs=codecs(settings.store_spec),
                              attrs=attrs_for(task.item_id, task.source, task.sha256, h), run_id=settings.run_id,
                              pyramid=settings.pyramid(), threads=settings.writer_threads())
        progress = SlabReporter(settings.slab_events, task.source, size=task.size, voxels=math.prod(h.shape),
                                slabs=source.slab_count(shards or chunks))
        stats = Accumulator(h.dtype, values=math.prod(h.shape)) if settings.store_spec.statistics else None
        # A slab holds whole shards along the stream axis.
        write_slabs(source.slabs(shards or chunks), finite=finite, writer=writer,
                    stats=() if stats is None else (stats,), progress=progress)
        row = ok_row(base, task, h, finite.outcome(), stats)
        # What a rerun reuses when the source is unchanged, recorded before `complete`.
        writer.finish(attrs=record_attrs(row, settings.fingerprint), complete=task.sha256, defer=defer)
    except Exception as exc:  # the task boundary: a decoder bug must cost one item, not the run
        return base.rejected(*refusal(exc, task.source))
    finally:
        if writer is not None:
            writer.close()
    return row


def ok_row(base: Row, task: VolumeTask, h: VolumeHeader, finite_warnings: tuple[str, ...],
           stats: Accumulator | None = None) -> Row:
    """The row of a volume written whole: its geometry, every warning in the order a reader gave them, and the
    statistics `stats` took of its voxels."""
    return replace(base, kind=h.kind, shape=tuple(h.shape), dtype=str(h.dtype), spacing=h.spacing,
                   orientation=h.orientation, array=task.array, metadata=h.metadata,
                   warnings=task.warnings + h.warnings + finite_warnings,
                   stats=None if stats is None else ItemStats(channels=stats.result(h.shape[0])))


def record_attrs(row: Row, fingerprint: str) -> dict[str, object]:
    """What a volume's array records of its conversion: the row a rerun reuses (its statistics apart, under
    `STATS`, where users and viewers find them) and the settings that shaped it."""
    out: dict[str, object] = {"row": to_record(replace(row, stats=None)), "settings": fingerprint}
    if row.stats is not None:
        out[STATS] = encode_stats(row.stats)
    return out


def volume_layout(h: VolumeHeader, settings: TaskSettings) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The (chunks, shards) a volume of header `h` is stored with: a pure function of `h` and the settings."""
    chunks = plan_chunks(h.shape, settings.store_spec.chunks, voxel_bytes=h.voxel_bytes,
                         stream_axis=h.stream_axis, budget=settings.slab_bytes)
    shards = plan_shards(h.shape, chunks, settings.store_spec.shards, voxel_bytes=h.voxel_bytes,
                         stream_axis=h.stream_axis, budget=settings.slab_bytes)
    return chunks, shards


def open_volume(task: VolumeTask, settings: TaskSettings) -> VolumeSource:
    """The item's source, its header validated (no voxel read yet); raises `Rejected`."""
    if task.stack is not None:  # a DICOM item: its series was laid out when planning
        # Imported here: the driver imports this module to submit its task and decodes nothing (convert/run/driver.py)
        from labzarr.readers.dicom import open_series

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
        **({"metadata": dict(header.metadata)} if header.metadata else {}),
    }
