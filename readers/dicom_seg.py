"""DICOM-SEG: a segmentation object's segments as masks on the grid of the series it references.

highdicom reads and checks the object and names its segments; each frame is
then placed by what it says about itself, never by its rank in the file: the
source instance it references (Derivation Image Sequence) gives its slice, and
its Plane Position Sequence must lie on that slice; a frame that references no
instance of the series is placed by its position alone, which must lie on a
slice. A position off by more than `tolerance` mm, another pixel spacing or
orientation, or another frame size is `geometry_mismatch` with both values.

Binary frames are in the segment where non-zero; fractional frames (probability
or occupancy) where `value / MaximumFractionalValue >= threshold`; a LABELMAP
frame holds each segment's number. Frames a writer omitted (highdicom omits
empty ones) leave their slice empty.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydicom.dataset import Dataset
from pydicom.errors import InvalidDicomError

from ._dicom_layout import SeriesStack
from .masks import MaskClass, SliceGrid
from .reasons import Reason, Rejected

__all__ = ["ORIENTATION_TOLERANCE", "SegMasks", "read_seg"]

ORIENTATION_TOLERANCE = 1e-3  # direction cosines of the SEG's planes vs the series' (as [dicom] orientation)

SegMasks = tuple[tuple[MaskClass, ...], npt.NDArray[np.bool_]]  # segments by number; (S, X, Y, Z) canonical


def read_seg(path: Path, stack: SeriesStack, *, threshold: float, tolerance: float) -> SegMasks:
    """The SEG at `path` on `stack`'s grid: its segments (ascending number) and one canonical mask per segment."""
    import highdicom as hd  # here, not at the top: a run or a worker that meets no SEG never pays for importing it

    grid = SliceGrid.of(stack)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # highdicom and pydicom warn about non-conformant values and carry on
            seg = hd.seg.segread(path)
            frames = np.asarray(seg.pixel_array)
    except (InvalidDicomError, ValueError, KeyError, AttributeError, TypeError, IndexError) as exc:
        raise Rejected(Reason.BAD_HEADER, f"highdicom cannot read the SEG: {type(exc).__name__}: {exc}") from exc
    if frames.ndim == 2:
        frames = frames[np.newaxis]
    kind = str(seg.SegmentationType)
    segments = _segments(seg)
    _check_plane(seg, grid, tolerance)
    numbers = {s.value: n for n, s in enumerate(segments)}
    out = np.zeros((len(segments), *grid.shape), dtype=bool)
    per_frame: Sequence[Dataset] = seg.get("PerFrameFunctionalGroupsSequence") or ()
    if len(per_frame) != len(frames):
        raise Rejected(Reason.BAD_HEADER, f"{len(per_frame)} per-frame functional groups for {len(frames)} frames")
    top = float(seg.get("MaximumFractionalValue") or 255)
    for f, (group, frame) in enumerate(zip(per_frame, frames)):
        k = _slice_of(f, group, seg, grid, tolerance)
        plane = frame.T  # (rows, columns) -> (i, j)
        if kind == "LABELMAP":
            for value, n in numbers.items():
                out[n, :, :, k] |= plane == value
            continue
        number = _segment_number(f, group, seg)
        if number not in numbers:
            raise Rejected(Reason.BAD_HEADER, f"frame {f + 1} belongs to segment {number}, which the Segment "
                                              f"Sequence does not describe (segments {sorted(numbers)})")
        if kind == "FRACTIONAL":
            out[numbers[number], :, :, k] |= plane / top >= threshold
        else:
            out[numbers[number], :, :, k] |= plane != 0
    return segments, np.asarray(grid.canonical(out), dtype=bool)


def _segments(seg: Any) -> tuple[MaskClass, ...]:
    import highdicom as hd

    out = []
    for item in seg.SegmentSequence:
        lab = item.get("RecommendedDisplayCIELabValue")
        color = hd.color.CIELabColor.from_dicom_value([int(v) for v in lab]).to_rgb(clip=True) if lab else None
        out.append(MaskClass(value=int(item.SegmentNumber), name=str(item.get("SegmentLabel", "") or ""),
                             color=None if color is None else (int(color[0]), int(color[1]), int(color[2]))))
    if not out:
        raise Rejected(Reason.BAD_HEADER, "the SEG describes no segment (empty Segment Sequence)")
    return tuple(sorted(out, key=lambda c: c.value))


def _shared(seg: Any, group: Dataset | None, keyword: str) -> Dataset | None:
    """A functional group macro of a frame (`group`), else the shared one."""
    for source in (group, *(seg.get("SharedFunctionalGroupsSequence") or ())):
        if source is not None and source.get(keyword):
            item: Dataset = source.get(keyword)[0]
            return item
    return None


def _check_plane(seg: Any, grid: SliceGrid, tolerance: float) -> None:
    """Frame size, pixel spacing and orientation against the series'."""
    columns, rows, _ = grid.shape
    if (int(seg.Rows), int(seg.Columns)) != (rows, columns):
        raise Rejected(Reason.GEOMETRY_MISMATCH, f"SEG frames are {int(seg.Rows)}x{int(seg.Columns)} (rows x columns)"
                                                 f", the series' slices {rows}x{columns}; expected equal")
    measures = _shared(seg, None, "PixelMeasuresSequence")
    if measures is not None and measures.get("PixelSpacing"):
        _agree("pixel spacing", measures.PixelSpacing, grid.spacing, tolerance, " mm")
    plane = _shared(seg, None, "PlaneOrientationSequence")
    if plane is not None and plane.get("ImageOrientationPatient"):
        _agree("planes oriented", plane.ImageOrientationPatient, grid.orientation, ORIENTATION_TOLERANCE, "")


def _agree(what: str, seg_values: Any, series: Sequence[float], tolerance: float, unit: str) -> None:
    """Reject unless the SEG's `what` equals the series' within `tolerance`, naming both and the difference."""
    measured = tuple(float(v) for v in seg_values)
    off = max(abs(a - b) for a, b in zip(measured, series))
    if off > tolerance:
        raise Rejected(Reason.GEOMETRY_MISMATCH, f"SEG {what} {_fmt(measured)}{unit}, the series' {_fmt(series)}"
                                                 f"{unit}; differs by {off:.4g}{unit}, tolerance {tolerance:g}{unit}")


def _segment_number(f: int, group: Dataset, seg: Any) -> int:
    """The segment of frame `f`: per frame, or shared by every frame (a one-segment SEG)."""
    ident = _shared(seg, group, "SegmentIdentificationSequence")
    if ident is None or ident.get("ReferencedSegmentNumber") is None:
        raise Rejected(Reason.BAD_HEADER, f"frame {f + 1} names no segment (no Segment Identification Sequence)")
    return int(ident.ReferencedSegmentNumber)


def _referenced(group: Dataset) -> list[str]:
    return [str(src.ReferencedSOPInstanceUID) for d in group.get("DerivationImageSequence") or ()
            for src in d.get("SourceImageSequence") or () if src.get("ReferencedSOPInstanceUID")]


def _slice_of(f: int, group: Dataset, seg: Any, grid: SliceGrid, tolerance: float) -> int:
    """The slice frame `f` lies on: its referenced instance's, checked against its position; else by position."""
    where = _shared(seg, group, "PlanePositionSequence")
    position = None
    if where is not None and where.get("ImagePositionPatient"):
        position = np.array([float(v) for v in where.ImagePositionPatient], dtype=np.float64)
    refs = _referenced(group)
    known = [uid for uid in refs if uid in grid.instances]
    n = grid.shape[2]
    if refs and not known:
        raise Rejected(Reason.GEOMETRY_MISMATCH, f"SEG frame {f + 1} references instance {refs[0]}, which is not a "
                                                 f"slice of the referenced series ({n} slices)")
    if known:
        k = grid.instances[known[0]]
        if position is not None:
            expected = grid.slice_position(k)
            off = float(np.linalg.norm(position - expected))
            if off > tolerance:
                raise Rejected(Reason.GEOMETRY_MISMATCH,
                               f"SEG frame {f + 1} lies at {_fmt(position)} mm but references slice {k + 1} of {n} "
                               f"(instance {known[0]}) at {_fmt(expected)} mm: {off:.4g} mm apart, tolerance "
                               f"{tolerance:g} mm")
        return k
    if position is None:
        raise Rejected(Reason.GEOMETRY_MISMATCH, f"SEG frame {f + 1} has neither a referenced instance nor a position"
                                                 "; it cannot be placed on the series")
    voxel = grid.to_voxels(position[np.newaxis])[0]
    k = int(np.clip(np.rint(voxel[2]), 0, n - 1))
    expected = grid.slice_position(k)
    off = float(np.linalg.norm(position - expected))
    if off > tolerance:
        raise Rejected(Reason.GEOMETRY_MISMATCH, f"SEG frame {f + 1} lies at {_fmt(position)} mm, on no slice of the "
                                                 f"series: the nearest, slice {k + 1} of {n}, is at {_fmt(expected)} "
                                                 f"mm, {off:.4g} mm away; tolerance {tolerance:g} mm")
    return k


def _fmt(values: Sequence[float] | npt.NDArray[np.float64]) -> str:
    return "(" + ", ".join(f"{float(v):.6g}" for v in values) + ")"
