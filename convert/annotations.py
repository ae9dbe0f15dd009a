"""Workbook annotations placed on an item's stored canonical grid; pure, no I/O.

Invariant: an annotation is either placed (an `Annotation` in canonical voxels, its
centre inside the volume) or refused with a reason and the measured numbers; none
is dropped. World coordinates (LPS or RAS millimetres) go through the inverse of
the stored affine (canonical voxel -> RAS mm), so an oblique volume places them
exactly; a diameter or box size becomes the extent, along each canonical axis, of
the sphere's or the world box's image in voxel space (its axis-aligned bound).
`voxel` coordinates index the source as stored (a NIfTI file's i, j, k; a DICOM
series' column, row and slice in increasing position along the slice normal) and
are flipped and permuted as the volume was when it was made canonical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from labzarr.readers import LabelCell, Reason
from labzarr.store.format.annotations import Annotation

from .spec import AnnotationsSpec

__all__ = ["AnnotationCells", "Geometry", "Refusal", "place"]

# The RAS axis and whether the source axis runs against it, by axis code (nibabel's ornt2axcodes labels).
_CODES = {"R": (0, False), "L": (0, True), "A": (1, False), "P": (1, True), "S": (2, False), "I": (2, True)}


@dataclass(frozen=True, slots=True)
class AnnotationCells:
    """One workbook row's annotation cells: the centre (x, y, z) and the extent (none, a diameter, or x, y, z)."""

    center: tuple[LabelCell, LabelCell, LabelCell]
    extent: tuple[LabelCell, ...] = ()

    @property
    def blank(self) -> bool:
        """No annotation on this row: every cell empty (a row that only labels its item)."""
        return not any(c.value.strip() or c.missing for c in (*self.center, *self.extent))


@dataclass(frozen=True, slots=True)
class Geometry:
    """An item's stored grid: canonical spatial shape (X, Y, Z), its affine to RAS mm, the source's axis codes."""

    shape: tuple[int, ...]
    affine: tuple[tuple[float, ...], ...]
    source_orientation: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """An annotation that could not be placed: the cell of its centre, why, and what was measured."""

    cell: str
    reason: Reason
    detail: str


def place(cells: AnnotationCells, spec: AnnotationsSpec, geometry: Geometry) -> Annotation | Refusal:
    """The annotation of one workbook row on `geometry`'s canonical grid, or why it has none."""
    at = cells.center[0].ref
    if len(geometry.shape) != 3:
        return Refusal(at, Reason.BAD_ANNOTATION, f"the item is a {len(geometry.shape)}D image; annotations "
                                                  "place points in volumes only")
    numbers: list[float] = []
    for cell in (*cells.center, *cells.extent):
        text = cell.value.strip()
        try:
            value = float(text)
        except ValueError:
            shown = f"({cell.missing})" if cell.missing else repr(text) if text else "(blank)"
            return Refusal(at, Reason.BAD_ANNOTATION, f"{cell.ref} is {shown}, not a number")
        if not math.isfinite(value):
            return Refusal(at, Reason.BAD_ANNOTATION, f"{cell.ref} is {text!r}, not a finite number")
        if cell in cells.extent and value < 0:
            return Refusal(at, Reason.BAD_ANNOTATION, f"{cell.ref} is {value:g}, a negative extent")
        numbers.append(value)
    center, extent = np.array(numbers[:3]), np.array(numbers[3:])
    placed = _voxel(center, extent, geometry, at) if spec.space == "voxel" else _world(center, extent, spec, geometry)
    if isinstance(placed, Refusal):
        return placed
    voxel, size = placed
    outside = [f"{a} {v:.4g} not in [-0.5, {n - 0.5:g})" for a, v, n in zip("xyz", voxel, geometry.shape)
               if not -0.5 <= v < n - 0.5]
    if outside:
        given = ", ".join(f"{v:g}" for v in center)
        return Refusal(at, Reason.ANNOTATION_OUTSIDE,
                       f"centre ({given}) {spec.space} is canonical voxel ({', '.join(f'{v:.4g}' for v in voxel)}): "
                       f"{'; '.join(outside)} of shape {'x'.join(map(str, geometry.shape))}")
    return Annotation(center=_three(voxel), size=_three(size), source=at)


def _world(center: np.ndarray, extent: np.ndarray, spec: AnnotationsSpec,
           geometry: Geometry) -> tuple[np.ndarray, np.ndarray]:
    flip = np.array([-1.0, -1.0, 1.0]) if spec.space == "LPS" else np.ones(3)
    inverse = np.linalg.inv(np.array(geometry.affine, dtype=np.float64))
    voxel = inverse[:3, :3] @ (center * flip) + inverse[:3, 3]
    linear = np.abs(inverse[:3, :3])
    if len(extent) == 1:  # a sphere: its image in voxel space is an ellipsoid, bounded by the rows' norms
        size = extent[0] * np.linalg.norm(inverse[:3, :3], axis=1)
    elif len(extent) == 3:  # a world box: the bound of its corners' images
        size = linear @ extent
    else:
        size = np.zeros(3)
    return voxel, size


def _voxel(center: np.ndarray, extent: np.ndarray, geometry: Geometry,
           at: str) -> tuple[np.ndarray, np.ndarray] | Refusal:
    codes = geometry.source_orientation
    axes = [_CODES.get(c) for c in codes]
    if len(codes) != 3 or None in axes or len({a[0] for a in axes if a is not None}) != 3:
        return Refusal(at, Reason.BAD_ANNOTATION, f"the source's axis codes {codes!r} do not name three axes; "
                                                  "give the annotations in world millimetres (LPS or RAS)")
    voxel, size = np.zeros(3), np.zeros(3)
    extents = extent if len(extent) == 3 else np.full(3, extent[0] if len(extent) else 0.0)
    for source_axis, pair in enumerate(axes):
        assert pair is not None
        target, flipped = pair
        v = center[source_axis]
        voxel[target] = geometry.shape[target] - 1 - v if flipped else v
        size[target] = extents[source_axis]
    return voxel, size


def _three(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    # Rounded so the index and attrs stay byte-stable across platforms' last-bit differences.
    a, b, c = (round(float(v), 6) for v in values)
    return a, b, c
