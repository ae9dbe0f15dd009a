"""A big volume written by several workers: the driver stages it, each part writes its slabs, the driver seals it.

See `plan/parts.py` for the invariant. The part task is total like `convert_item`:
through the task boundary (`boundary.py`) a failure becomes its `PartResult`'s
refusal, and the driver turns the parts' results into the item's one row -- the
lowest-numbered part's refusal (the first in file order, as one task would
have met it), else the volume sealed with every part's chunk digests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from labzarr.readers import Rejected, SeriesStack, StreamingReader, readers_with
from labzarr.store import Location, as_location

from ..intensity import Accumulator
from ..manifest import Row
from ..plan.build import VolumeTask
from ..plan.parts import PartResult, VolumePart, part_slabs
from ..validate import FiniteCheck
from ..write.arrays import codecs, discard
from ..write.image import begin_image
from ..write.writer import PartWriter, create_volume_array, open_volume_array, seal_volume, store_io
from .boundary import on_worker, refusal
from .settings import TaskSettings
from .slab_loop import write_slabs
from .slab_progress import SlabReporter
from .volume_task import attrs_for, ok_row, open_volume, record_attrs, volume_layout

__all__ = ["DICOM_PARTS_DIVISOR", "SCAN_RATIO", "convert_part", "finish_parts", "stage_parts", "worth_opening"]


# Files under parts_bytes / SCAN_RATIO on disk are not opened to see whether they are worth writing in parts:
# a volume that compresses better than 64:1 is mostly empty, and cheap to encode in one task anyway.
SCAN_RATIO = 64
# A DICOM series' parts read only their own files, with no stream to inflate up to a part's first slab, so a
# part costs a task and nothing is read twice: a series is written in parts from parts_bytes / DICOM_PARTS_DIVISOR
# (16 MiB by default, so that a DWI series of a few thousand small files is written by every worker, not one).
DICOM_PARTS_DIVISOR = 32


def worth_opening(task: VolumeTask, settings: TaskSettings, *, workers: int, parts_bytes: int) -> bool:
    """Whether `stage_parts` opens `task`'s volume to see whether it is worth writing in parts: what the plan alone
    tells (its size, its reader, a DICOM series' decoded size) does not rule it out. The driver asks this before it
    has a volume staged on a worker."""
    parts_bytes = _parts_bytes(task, parts_bytes)
    if parts_bytes <= 0 or workers < 2 or task.size * SCAN_RATIO < parts_bytes or not _streams(task, settings):
        return False
    # A series that fits one part is one part whatever its header says (`part_slabs`), and opening it would cost
    # its first file's dataset and acquisition metadata, series after series.
    return task.stack is None or _decoded_bytes(task.stack) > parts_bytes


def stage_parts(store: Location, task: VolumeTask, settings: TaskSettings, *, workers: int,
                parts_bytes: int) -> tuple[VolumePart, ...]:
    """Create `task`'s array in staging and return its parts, when its volume is worth writing in parts; else ().

    Reads the header only (never voxels). The run stages its volumes on the workers (`driver._staged_parts`),
    which have the readers' libraries imported. A header the reader refuses is left to the ordinary task, which
    meets the same refusal and reports it as the item's row.
    """
    if not worth_opening(task, settings, workers=workers, parts_bytes=parts_bytes):
        return ()
    parts_bytes = _parts_bytes(task, parts_bytes)
    try:
        source = open_volume(task, settings)
    except Exception:  # noqa: BLE001 - not a silent fallback: the item's own task reports this error
        return ()
    h = source.header
    if h.stream_axis is None:
        return ()
    chunks, shards = volume_layout(h, settings)
    volume_bytes = h.dtype.itemsize * math.prod(h.shape)
    ranges = part_slabs(source.slab_count(shards or chunks), volume_bytes, workers=workers, parts_bytes=parts_bytes)
    if len(ranges) < 2:
        return ()
    with store_io(store, f"cannot create {task.array}"):
        folder = begin_image(store, task.array)
        create_volume_array(folder, h, chunks=chunks, shards=shards, codecs=codecs(settings.store_spec),
                            attrs=attrs_for(task.item_id, task.source, task.sha256, h))
    last = len(ranges) - 1
    return tuple(VolumePart(task=task, header=h, folder=str(folder), index=i, count=len(ranges), first=first,
                            stop=None if i == last else stop) for i, (first, stop) in enumerate(ranges))


def convert_part(part: VolumePart, settings: TaskSettings) -> PartResult:
    """Write one part's slabs into the staged array (runs on a worker); returns its digests or its refusal."""
    with on_worker(part, settings):
        return _convert_part(part, settings, settings.location())


def _convert_part(part: VolumePart, settings: TaskSettings, store: Location) -> PartResult:
    writer: PartWriter | None = None
    try:
        source = open_volume(part.task, settings)
        h = source.header
        chunks, shards = volume_layout(h, settings)
        if h != part.header:
            raise RuntimeError(f"{part.task.source} changed while being converted: its header now reads {h}, "
                               f"when staged {part.header}")
        writer = PartWriter(store, part.task.array, h, as_location(part.folder, settings.store_options),
                            threads=settings.writer_threads())
        finite = FiniteCheck(h, settings.non_finite)
        stats = Accumulator(h.dtype, values=math.prod(h.shape)) if settings.store_spec.statistics else None
        stop = source.slab_count(shards or chunks) if part.stop is None else part.stop
        progress = SlabReporter(settings.slab_events, part.task.source, part=part.index, size=part.task.size,
                                voxels=math.prod(h.shape), slabs=stop - part.first)
        write_slabs(source.slabs(shards or chunks, first=part.first, stop=part.stop), finite=finite, writer=writer,
                    stats=() if stats is None else (stats,), progress=progress)
        bad, first = finite.tally()
        return PartResult(index=part.index, digests=writer.digests(), nonfinite=bad, first_nonfinite=first,
                          stats=None if stats is None else stats.partial())
    except Exception as exc:  # the task boundary, as in convert_item
        return PartResult(index=part.index, digests={},
                          rejected=refusal(exc, f"{part.task.source} (part {part.index + 1} of {part.count})"))
    finally:
        if writer is not None:
            writer.close()


def finish_parts(parts: Sequence[VolumePart], outcomes: Sequence[PartResult | Row], settings: TaskSettings) -> Row:
    """The item's row from every part's outcome, in part order (a `Row` where a part's worker died or hung).

    The first part in file order that failed decides, as if one task had read the file; when none did,
    the volume is sealed with every part's chunk digests and installed. Otherwise the staged array is
    removed. Raises `StoreWriteError` (and `Superseded`) like a task that installs its own array.
    """
    task, h = parts[0].task, parts[0].header
    folder = as_location(parts[0].folder, settings.store_options)
    base = task.base_row()
    finite = FiniteCheck(h, settings.non_finite)
    # The parts' statistics in file order: exactly those of the volume written by one task (convert/intensity.py).
    stats = Accumulator(h.dtype, values=math.prod(h.shape)) if settings.store_spec.statistics else None
    sealed = False
    try:
        for o in outcomes:
            if isinstance(o, Row):
                return o
            if o.rejected:
                return base.rejected(*o.rejected)
            finite.absorb(o.nonfinite, o.first_nonfinite)
            if stats is not None and o.stats is not None:
                stats.absorb(o.stats)
        try:
            row = ok_row(base, task, h, finite.outcome(), stats)
        except Rejected as exc:
            return base.rejected(exc.reason, exc.detail)
        store = settings.location()
        with store_io(store, f"cannot open {task.array}"):
            array = open_volume_array(folder)
        digests = {k: v for o in outcomes if isinstance(o, PartResult) for k, v in o.digests.items()}
        seal_volume(store, task.array, folder, array, digests,
                    attrs=record_attrs(row, settings.fingerprint), complete=task.sha256,
                    run_id=settings.run_id, pyramid=settings.pyramid())
        sealed = True
        return row
    finally:
        if not sealed:
            discard(folder.parent)  # the staged image group


def _parts_bytes(task: VolumeTask, parts_bytes: int) -> int:
    """`[run] parts_bytes` as it applies to `task`: a DICOM series' is smaller (`DICOM_PARTS_DIVISOR`)."""
    if task.stack is not None and parts_bytes > 0:
        return max(1, parts_bytes // DICOM_PARTS_DIVISOR)
    return parts_bytes


def _decoded_bytes(stack: SeriesStack) -> int:
    """A streamed series' decoded size, as its source's header gives it (`DicomSource`: n_volumes x samples
    channels of columns x rows x n_slices voxels of the stack's dtype), from the plan alone."""
    voxels = stack.n_volumes * stack.samples * stack.columns * stack.rows * stack.n_slices
    return voxels * np.dtype(stack.dtype).itemsize


def _streams(task: VolumeTask, settings: TaskSettings) -> bool:
    """Whether the item streams slabs (opening it reads no voxels): a DICOM volume, or a streaming reader's file."""
    if task.stack is not None:
        return task.stack.layout == "volume"
    reader = next((r for r in readers_with(settings.readers) if r.kind == task.kind), None)
    return isinstance(reader, StreamingReader)
