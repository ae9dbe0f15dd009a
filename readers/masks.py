"""Masks drawn on a DICOM series (SEG segments, RTSTRUCT ROIs): the series' voxel grid, and one mask volume.

Invariant: every mask a SEG or RTSTRUCT gives is built on the grid of the laid-out
series it references (`SliceGrid.of(stack)`: voxel (i, j, k) as `_dicom_layout.py`
lays it out, i along a row, j down a column, k along the slice normal), then
reoriented exactly as the series' own pixels are (`io_orientation` of the same
affine), so mask and image share canonical voxels by construction.

One volume from several masks (`label_volume`): when no voxel is covered by two
of them it is a label map, one channel holding each mask's value; when any two
overlap it has one channel per mask, in mask order, each holding that mask's
value where it covers the voxel and 0 elsewhere -- so the class values stay
distinct across channels and a class's voxels are found in its channel alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from nibabel.orientations import apply_orientation, io_orientation

from ._dicom_layout import SeriesStack
from .reasons import Reason, Rejected
from .records import ByFields

__all__ = ["MaskClass", "SliceGrid", "label_volume"]

_LPS = np.diag([-1.0, -1.0, 1.0, 1.0])  # RAS <-> LPS, its own inverse


@dataclass(frozen=True, slots=True)
class MaskClass(ByFields):
    """One mask of a SEG or RTSTRUCT: its class value, its name, and its display colour (RGB) when given."""

    value: int
    name: str
    color: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class SliceGrid:
    """A laid-out series' voxel grid in patient (LPS) millimetres, with the instance and position of each slice."""

    lps: npt.NDArray[np.float64]  # (i, j, k, 1) -> LPS mm
    shape: tuple[int, int, int]  # (columns, rows, slices): the (i, j, k) extent
    instances: dict[str, int]  # SOPInstanceUID -> slice k
    positions: tuple[tuple[float, float, float] | None, ...]  # ImagePositionPatient of slice k, as stored

    @classmethod
    def of(cls, stack: SeriesStack) -> SliceGrid:
        """The grid of `stack`'s first volume."""
        if stack.layout != "volume":
            raise Rejected(Reason.UNSUPPORTED_FORMAT, "the referenced series is a 2D image, not a volume; "
                                                      "SEG and RTSTRUCT masks are placed on a volume's slices")
        first = stack.frames[: stack.n_slices]
        return cls(lps=_LPS @ np.array(stack.affine, dtype=np.float64),
                   shape=(stack.columns, stack.rows, stack.n_slices),
                   instances={f.instance: k for k, f in enumerate(first) if f.instance},
                   positions=tuple(f.position for f in first))

    @property
    def spacing(self) -> tuple[float, float]:
        """(row, column) spacing in mm: DICOM's PixelSpacing order."""
        norms = np.linalg.norm(self.lps[:3, :2], axis=0)
        return float(norms[1]), float(norms[0])

    @property
    def orientation(self) -> tuple[float, ...]:
        """ImageOrientationPatient of the slices: row then column direction cosines."""
        dirs = self.lps[:3, :2] / np.linalg.norm(self.lps[:3, :2], axis=0)
        return tuple(float(v) for v in (*dirs[:, 0], *dirs[:, 1]))

    def slice_position(self, k: int) -> npt.NDArray[np.float64]:
        """Where slice k's first voxel lies (LPS mm): its stored position, else the grid's."""
        stored = self.positions[k]
        return np.array(stored if stored is not None else (self.lps @ np.array([0.0, 0.0, k, 1.0]))[:3])

    def to_voxels(self, points: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """(N, 3) LPS mm -> (N, 3) continuous (i, j, k) voxel coordinates."""
        homogeneous = np.c_[points, np.ones(len(points))]
        out: npt.NDArray[np.float64] = (np.linalg.inv(self.lps) @ homogeneous.T).T[:, :3]
        return out

    def canonical(self, data: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        """(C, i, j, k) -> (C, X, Y, Z) canonical RAS, as the series' pixels are reoriented."""
        ornt = io_orientation(_LPS @ self.lps)
        return np.ascontiguousarray(np.stack([apply_orientation(c, ornt) for c in data]))


def label_volume(masks: npt.NDArray[np.bool_], classes: Sequence[MaskClass]) -> npt.NDArray[Any]:
    """(M, ...) booleans, one per class -> a label map (1, ...) when none overlap, else (M, ...) channels."""
    top = max((c.value for c in classes), default=0)
    dtype = np.uint8 if top <= np.iinfo(np.uint8).max else np.uint16 if top <= np.iinfo(np.uint16).max else np.uint32
    overlap = len(masks) > 1 and int(masks.sum(axis=0, dtype=np.uint16).max(initial=0)) > 1
    out = np.zeros((len(masks) if overlap else 1, *masks.shape[1:]), dtype=dtype)
    for channel, (m, c) in enumerate(zip(masks, classes)):
        out[channel if overlap else 0][m] = c.value
    return out
