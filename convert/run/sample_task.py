"""The per-sample task: image and mask (and any other role) checked against each other, then written side by side.

A member is a file or a DICOM series (decoded from its planned layout, as a
DICOM item without roles is); either way its reader gives canonical RAS
geometry, so a series is compared with a NIfTI mask on the same terms.

A sample's arrays share one group `volumes/<name>/`, an NGFF image (the image at
`0`, the mask at `labels/mask/0`, another role at `roles/<role>/0`; store/ngff.py): the
same canonical RAS orientation (each reader reorients its own file), the same
chunk shape (planned from the image), and the mask as the smallest integer
dtype that holds its classes, with `locations` (class voxel samples) beside it.

Order, cheapest refusal first: every header is read and each role's geometry
compared with the image's before any voxel is decoded (`geometry_mismatch`,
both values in the detail); then the mask streams twice, slab by slab
(`masks.py`): once to count and check its classes, once to write it and draw
its class locations; then the image and any other role stream into their
arrays. The image's statistics per mask class (`convert/intensity.py`) read
each slab's classes back from the mask just written, which costs a cheap
decode of a small integer array instead of a second decode of a source. The
group's `complete` attr, a digest of every member's sha256, is written last.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
import zarr.storage

from labzarr.readers import (
    LabelMapReader,
    MemorySource,
    Reason,
    Rejected,
    Slab,
    Volume,
    VolumeHeader,
    VolumeSource,
    open_source,
    read_head,
    readers_with,
)
from labzarr.readers.dicom import RTSTRUCT_CLASS
from labzarr.store import STATS, ChannelStats, ItemStats, Location
from labzarr.store.format.index import encode_stats
from labzarr.store.format.ngff import role_path
from labzarr.store.format.written import STORED, StoredFiles

from ..intensity import Accumulator, ClassAccumulator
from ..manifest import ClassCount, RoleSource, Row
from ..masks import ClassLocator, MaskScan, as_classes
from ..plan.dicom_masks import MASK_KINDS
from ..plan.samples import RoleFile, SampleTask
from ..spec import MASK_ROLE, MasksSpec
from ..validate import FiniteCheck
from ..write.arrays import codecs, discard
from ..write.image import create_role_groups, finish_sample
from ..write.writer import VolumeWriter, store_io
from .boundary import on_worker, refusal
from .settings import TaskSettings
from .slab_loop import write_slabs
from .volume_task import attrs_for, volume_layout

if TYPE_CHECKING:
    from labzarr.readers.masks import MaskClass

# The readers of DICOM series and masks (pydicom, nibabel) are imported where a task reads one: the driver imports this
# module to submit its task and reads nothing (convert/run/driver.py); a worker has them preloaded (worker_start.py).

__all__ = ["LOCATIONS", "convert_sample", "geometry_problem", "sample_complete"]


LOCATIONS = "locations"  # the mask's class locations, (N, 3) int32 canonical (x, y, z) ((N, 2) (y, x) in 2D)
_LOCATION_ROWS = 4096  # rows per chunk: a Dataset reads one location per foreground patch, so keep chunks small


def sample_complete(files: Sequence[RoleFile] | Sequence[RoleSource]) -> str:
    """The group's `complete` value: sha256 over its members' (role, sha256), in role order."""
    return hashlib.sha256("".join(f"{f.role}:{f.sha256}\n" for f in files).encode()).hexdigest()


@contextmanager
def _blame(f: RoleFile) -> Iterator[None]:
    """Name the member a rejection came from: the row is the sample's, the fault one file's."""
    try:
        yield
    except Rejected as exc:
        raise Rejected(exc.reason, f"{f.role} {f.source}: {exc.detail}") from exc


def convert_sample(task: SampleTask, settings: TaskSettings) -> Row:
    """Convert one sample; returns its manifest row for every outcome (total, idempotent)."""
    with on_worker(task, settings):
        return _convert(task, settings, settings.location())


def _convert(task: SampleTask, settings: TaskSettings, store: Location) -> Row:
    base = task.base_row()
    masks = settings.masks
    try:
        sources: list[tuple[RoleFile, VolumeSource]] = []
        named: tuple[MaskClass, ...] = ()  # a DICOM mask's classes: SEG segments, RTSTRUCT classes
        unmapped: tuple[str, ...] = ()  # RTSTRUCT ROIs left out
        for f in task.files:
            with _blame(f):
                if f.kind in MASK_KINDS.values():
                    source, named, unmapped = _open_dicom_mask(f, task.reference, sources[0][1].header, masks)
                    sources.append((f, source))
                else:
                    sources.append((f, _open(f, settings)))
        ref = sources[0][1].header
        warnings = [*task.warnings, *ref.warnings]
        for f, src in sources[1:]:
            problem = geometry_problem(f.role, src.header, ref, masks.tolerance,
                                       channels=f.kind in MASK_KINDS.values())
            if problem:
                raise Rejected(Reason.GEOMETRY_MISMATCH, f"{f.role} {f.source}: {problem}")
            if src.header.orientation != ref.orientation:
                warnings.append(f"{f.role} stored {src.header.orientation}, image {ref.orientation}; "
                                "both reoriented to RAS")
            warnings += src.header.warnings
        if len(ref.shape) == 3:  # a 2D image: one chunk per channel plane, as in the stacks of 2D images; no shards
            chunks: tuple[int, ...] = (1, *ref.shape[1:])
            shards = None
        else:
            chunks, shards = volume_layout(ref, settings)
        with store_io(store, f"cannot create {task.group}"):
            discard(store / task.group)  # a rerun replaces the whole sample
            group = zarr.create_group(store.zarr(), path=task.group,
                                      attributes={"item_id": task.item_id, "kind": "sample",
                                                  "roles": {f.role: f.source for f in task.files}})
            create_role_groups(store, task.group, [f.role for f in task.files])
        roles: dict[str, RoleSource] = {}
        classes: tuple[ClassCount, ...] = ()
        stats: ItemStats | None = None
        for f, src in sorted(sources, key=lambda fs: fs[0].role != MASK_ROLE):  # the mask first
            with _blame(f):
                if f.role == MASK_ROLE:
                    dtype, classes, more = _write_mask(store, task, f, src, chunks, shards, settings, masks)
                    warnings += more
                else:
                    measure = settings.store_spec.statistics and f.role == task.reference.role
                    # Statistics per class read a label map's one channel; a mask of overlapping classes has several.
                    masked = measure and any(g.role == MASK_ROLE for g, m in sources if m.header.shape[0] == 1)
                    mask = role_path(task.group, MASK_ROLE) if masked else None
                    dtype, more, measured = _write_volume(store, task, f, src, chunks, shards, settings,
                                                          measure=measure, mask=mask)
                    stats = measured or stats
                    warnings += more
            roles[f.role] = RoleSource(f.role, f.source, f.sha256, array=role_path(task.group, f.role), dtype=dtype)
        with store_io(store, f"cannot finish {task.group}"):
            finish_sample(store, task.group, {r.role: r.array for r in roles.values()}, settings.pyramid(),
                          [c.value for c in classes], {c.value: (c.name, c.color) for c in named})
            # Reopened: `group`'s attrs are those read before `finish_sample` gave it its `ome`, and an update
            # from them would write the stale copy back.
            group = zarr.open_group(store.zarr(), path=task.group, mode="r+")
            about = {c.value: c for c in named}
            listed: dict[str, Any] = {str(c.value): {"voxels": c.voxels, "locations": [c.start, c.stop]}
                                      | _naming(about.get(c.value)) for c in classes}
            group.attrs.update({"classes": listed})
            group.attrs.update({"complete": sample_complete(task.files)})
    except Exception as exc:  # the task boundary: a decoder bug must cost one sample, not the run
        reason, detail = refusal(exc, task.source)
        discard(store / task.group)
        return base.rejected(reason, detail)
    return replace(base, shape=tuple(ref.shape), dtype=str(ref.dtype), spacing=ref.spacing,
                   orientation=ref.orientation, array=role_path(task.group, task.reference.role),
                   warnings=tuple(warnings), roles=tuple(roles[f.role] for f in task.files), classes=classes,
                   stats=stats, unmapped=unmapped,
                   detail=f"RTSTRUCT ROIs not drawn (no [masks] rois rule maps them, or no closed contour): "
                          f"{', '.join(map(repr, unmapped))}" if unmapped else "")


def geometry_problem(role: str, h: VolumeHeader, ref: VolumeHeader, tolerance: float, *,
                     channels: bool = False) -> str | None:
    """Why `h` (canonical) does not lie on `ref`'s voxel grid, with both values; None when it does.

    2D images (C, H, W) are compared by height and width, and by spacing and affine only where
    both have them: PNG, JPEG and TIFF carry no physical frame (a DICOM radiograph does). `channels`:
    the mask may have several (a DICOM mask of overlapping classes, one channel each).
    """
    axes, order = ("(h,w)", "") if len(ref.shape) == 3 else ("(x,y,z)", " (both in canonical RAS order)")
    if len(h.shape) != len(ref.shape) or tuple(h.shape[1:]) != tuple(ref.shape[1:]):
        return (f"shape {axes} {'x'.join(map(str, h.shape[1:]))} vs image {'x'.join(map(str, ref.shape[1:]))}"
                f"{order}; expected equal")
    if role == MASK_ROLE and h.shape[0] != 1 and not channels:
        return (f"{h.shape[0]} channels; a mask has 1 (a colour-coded label map needs its colours mapped to class "
                "values first; a palette image's indices are read as classes)")
    if not (h.spacing and ref.spacing):
        return None
    spacing = np.abs(np.subtract(h.spacing, ref.spacing))
    if spacing.max(initial=0.0) > tolerance:
        return (f"spacing {_fmt(h.spacing)} mm vs image {_fmt(ref.spacing)} mm; "
                f"differs by {spacing.max():.4g} mm, tolerance {tolerance:g} mm")
    affine = np.abs(np.subtract(h.affine, ref.affine))
    if affine.max(initial=0.0) > tolerance:
        return (f"affine {_fmt_affine(h.affine)} vs image {_fmt_affine(ref.affine)}; "
                f"differs by up to {affine.max():.4g} mm, tolerance {tolerance:g} mm")
    return None


def _fmt(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:.6g}" for v in values) + ")"


def _fmt_affine(affine: Sequence[Sequence[float]]) -> str:
    return "[" + ", ".join(_fmt(row) for row in affine[:3]) + "]"


def _open(f: RoleFile, settings: TaskSettings) -> VolumeSource:
    limits = settings.limits
    if f.stack is not None:  # a DICOM series: laid out when planning, streamed in canonical slabs like a file
        from labzarr.readers.dicom import open_series

        return open_series(f.stack, limits)
    # The run's plugin readers first, as for single items: the probe may have sniffed a member with one.
    reader = next(r for r in readers_with(settings.readers) if r.kind == f.kind)
    path = Path(f.path)
    if f.role == MASK_ROLE and isinstance(reader, LabelMapReader):  # a palette PNG mask: its indices are the classes
        return MemorySource(reader.read_labels(path, limits, read_head(path)))
    return open_source(reader, path, limits, read_head(path))


def _open_dicom_mask(f: RoleFile, image: RoleFile, grid: VolumeHeader,
                     masks: MasksSpec) -> tuple[VolumeSource, tuple[MaskClass, ...], tuple[str, ...]]:
    """A SEG's or RTSTRUCT's mask on its series' canonical grid (`grid`: the series' header), its classes, and
    the ROIs an RTSTRUCT left out (unmapped, or without a closed contour)."""
    from labzarr.readers.dicom_seg import read_seg
    from labzarr.readers.masks import label_volume
    from labzarr.readers.rtstruct import read_rtstruct

    assert image.stack is not None, "a DICOM mask is planned only with the series it references"
    left_out: tuple[str, ...] = ()
    if f.kind == MASK_KINDS[RTSTRUCT_CLASS]:
        rois = read_rtstruct(Path(f.path), image.stack, rules=masks.rois, tolerance=masks.tolerance)
        found, masked, left_out = rois.classes, rois.data, (*rois.unmapped, *rois.undrawn)
    else:
        found, masked = read_seg(Path(f.path), image.stack, threshold=masks.fractional_threshold,
                                 tolerance=masks.tolerance)
    data = label_volume(masked, found)
    volume = Volume(kind=f.kind, data=data, spacing=grid.spacing, affine=grid.affine, orientation=grid.orientation)
    return MemorySource(volume), found, left_out


def _naming(c: MaskClass | None) -> dict[str, Any]:
    """A class's name and colour for the group's `classes` attr, where the mask object gave them."""
    if c is None:
        return {}
    return {"name": c.name} | ({"color": list(c.color)} if c.color is not None else {})


def _write_volume(store: Location, task: SampleTask, f: RoleFile, src: VolumeSource, chunks: Sequence[int],
                  shards: Sequence[int] | None, settings: TaskSettings, *, measure: bool,
                  mask: str | None) -> tuple[str, list[str], ItemStats | None]:
    """Write one role's array; with `measure`, its statistics too, per class of the stored `mask` if given."""
    h = src.header
    finite = FiniteCheck(h, settings.non_finite)
    writer = VolumeWriter(store, role_path(task.group, f.role), h, chunks=chunks, shards=shards,
                          codecs=codecs(settings.store_spec), threads=settings.writer_threads(),
                          attrs=attrs_for(task.item_id, f.source, f.sha256, h) | {"role": f.role})
    stats = Accumulator(h.dtype, values=math.prod(h.shape)) if measure else None
    per_class = _ClassStats(store, mask, h.dtype) if measure and mask is not None else None
    try:
        # A slab holds whole shards along the stream axis.
        write_slabs(src.slabs(shards or chunks), finite=finite, writer=writer,
                    stats=tuple(c for c in (stats, per_class) if c is not None))
        warnings = list(finite.outcome())
        measured = None
        if stats is not None:
            channels = h.shape[0]
            measured = ItemStats(channels=stats.result(channels),
                                 classes={} if per_class is None else per_class.result(channels))
        writer.finish(attrs=None if measured is None else {STATS: encode_stats(measured)}, complete=f.sha256)
    finally:
        writer.close()
    return str(h.dtype), warnings, measured


class _ClassStats:
    """The image's statistics per class of the mask stored at `mask`, each slab's classes read back from it."""

    def __init__(self, store: Location, mask: str, dtype: np.dtype[Any]) -> None:
        self._store, self._mask = store, mask
        self._acc = ClassAccumulator(dtype)
        with store_io(store, f"cannot read {mask}"):
            self._stored = zarr.open_array(store.zarr(), path=mask, mode="r")

    def update(self, slab: Slab) -> None:
        """Add the slab's voxels, each to its class."""
        with store_io(self._store, f"cannot read {self._mask}"):
            labels = np.asarray(self._stored[(slice(0, 1), *slab.region[1:])])[0]
        first = slab.region[0].start or 0
        for i in range(slab.data.shape[0]):
            self._acc.add(first + i, slab.data[i], labels)

    def result(self, channels: int) -> dict[int, tuple[ChannelStats, ...]]:
        """Each class's statistics, by class value (`ClassAccumulator.result`)."""
        return self._acc.result(channels)


def _write_mask(store: Location, task: SampleTask, f: RoleFile, src: VolumeSource, chunks: Sequence[int],
                shards: Sequence[int] | None, settings: TaskSettings,
                masks: MasksSpec) -> tuple[str, tuple[ClassCount, ...], list[str]]:
    scan = MaskScan(classes=masks.classes, policy=masks.policy)
    for slab in src.slabs(shards or chunks):  # pass 1: counts and checks (and the whole stream's validity)
        scan.update(slab)
    summary = scan.outcome()
    h: VolumeHeader = replace(src.header, dtype=summary.dtype)
    locator = ClassLocator(summary.counts, cap=masks.locations, seed=int(f.sha256[:16], 16), axes=len(h.shape) - 1)
    writer = VolumeWriter(store, role_path(task.group, f.role), h, chunks=chunks, shards=shards,
                          codecs=codecs(settings.store_spec), threads=settings.writer_threads(),
                          attrs=attrs_for(task.item_id, f.source, f.sha256, h) | {"role": f.role})
    try:
        for slab in src.slabs(shards or chunks):  # pass 2: the same slabs, as class values in the stored dtype
            classes = Slab(region=slab.region, data=_as_dtype(slab.data, summary.dtype))
            locator.update(classes)
            writer.write(classes)
        writer.finish(complete=f.sha256)
    finally:
        writer.close()
    located, ranges = locator.locations()
    with store_io(store, f"cannot write {task.group}/{LOCATIONS}"):
        path = f"{task.group}/{LOCATIONS}"
        arr = zarr.create_array(store.zarr(), name=path, data=located,
                                chunks=(max(1, min(len(located), _LOCATION_ROWS)), 3),
                                compressors=codecs(settings.store_spec),
                                attributes={"axes": ["x", "y", "z"] if len(h.shape) == 4 else ["y", "x"],
                                            "role": f.role},
                                overwrite=True)
        # zarr skips all-zero chunks here: the record says which files hold rows, so those read as zeros
        arr.update_attributes({STORED: StoredFiles.of_array(arr, (store / path).sizes()).encode()})
    counts = tuple(ClassCount(value=v, voxels=n, start=a, stop=b) for v, n, a, b in ranges)
    return str(summary.dtype), counts, list(summary.warnings)


def _as_dtype(data: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Class values in the stored dtype (float masks rounded), keeping the slab's shape."""
    return as_classes(data).astype(dtype, copy=False)
