"""RTSTRUCT: a structure set's ROI contours rasterised onto the grid of the series it references.

Each ROI's name is mapped to a class by the first rule (class name, regexes) one
of whose patterns fully matches it, case aside (`roi_class`): "GTV", "gtv_1" and
"Gross Tumour Volume" can all be one class, as med-imagetools maps ROI names.
ROIs no rule maps are listed, not drawn; ROIs without a closed planar contour
(points, open lines) are listed too.

A contour's points (LPS mm) are taken to the series' voxels (i, j, k); they
must lie on one slice, within `tolerance` mm of it, inside the series
(`geometry_mismatch` otherwise, with the measured distance). On each slice the
contours of one ROI combine by the even-odd rule: a voxel is inside when an odd
number of them encloses it, so a contour drawn inside another is a hole.
scikit-image's `polygon` fills each contour (the voxels whose centres lie inside
it).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pydicom
from pydicom.dataset import Dataset
from pydicom.errors import InvalidDicomError

from ._dicom_layout import SeriesStack
from .masks import MaskClass, SliceGrid
from .reasons import Reason, Rejected

__all__ = ["RoiMasks", "read_rtstruct", "roi_class"]

RoiRules = Sequence[tuple[str, Sequence[str]]]  # (class name, regexes), class k (1-based) = the k-th rule


@dataclass(frozen=True, slots=True, eq=False)
class RoiMasks:
    """The classes drawn (one per rule some ROI matched, by value), their canonical masks (K, X, Y, Z), and the
    ROI names left out: no rule maps them, or they hold no closed contour."""

    classes: tuple[MaskClass, ...]
    data: npt.NDArray[np.bool_]
    unmapped: tuple[str, ...]
    undrawn: tuple[str, ...]


def roi_class(name: str, rules: RoiRules) -> int | None:
    """The class value (1-based rule index) of the first rule a pattern of which fully matches `name`, case aside."""
    for k, (_, patterns) in enumerate(rules, start=1):
        if any(re.fullmatch(p, name.strip(), flags=re.IGNORECASE) for p in patterns):
            return k
    return None


def read_rtstruct(path: Path, stack: SeriesStack, *, rules: RoiRules, tolerance: float) -> RoiMasks:
    """The RTSTRUCT at `path` on `stack`'s grid: one mask per class of `rules` that some ROI maps to."""
    grid = SliceGrid.of(stack)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(path, force=True)
        names = {int(r.ROINumber): str(r.get("ROIName", "") or "") for r in ds.get("StructureSetROISequence") or ()}
        contours = {int(c.ReferencedROINumber): c for c in ds.get("ROIContourSequence") or ()}
    except (InvalidDicomError, ValueError, KeyError, AttributeError, TypeError, EOFError) as exc:
        raise Rejected(Reason.BAD_HEADER, f"pydicom cannot read the structure set: {type(exc).__name__}: {exc}"
                       ) from exc
    if not rules:  # no [masks] rois: each ROI name is its own class, in ROI number order
        rules = [(n, [re.escape(n.strip())]) for n in dict.fromkeys(names[k] for k in sorted(names))]
    out = np.zeros((len(rules), *grid.shape), dtype=bool)
    colors: dict[int, tuple[int, int, int]] = {}
    unmapped, undrawn, drawn = [], [], set()
    for number in sorted(names):
        name = names[number]
        value = roi_class(name, rules)
        if value is None:
            unmapped.append(name)
            continue
        item = contours.get(number)
        closed = [c for c in (item.get("ContourSequence") or () if item is not None else ())
                  if str(c.get("ContourGeometricType", "")) == "CLOSED_PLANAR"]
        if not closed:
            undrawn.append(name)
            continue
        _draw(out[value - 1], closed, grid, tolerance, name)
        drawn.add(value)
        color = item.get("ROIDisplayColor") if item is not None else None
        if color and value not in colors:
            colors[value] = (int(color[0]), int(color[1]), int(color[2]))
    keep = sorted(drawn)
    classes = tuple(MaskClass(value=v, name=rules[v - 1][0], color=colors.get(v)) for v in keep)
    # Reoriented with a background plane in front, so a structure set that draws nothing still has the grid's shape.
    data = grid.canonical(np.concatenate([np.zeros((1, *grid.shape), dtype=bool), out[[v - 1 for v in keep]]]))
    return RoiMasks(classes=classes, data=np.asarray(data[1:], dtype=bool), unmapped=tuple(unmapped),
                    undrawn=tuple(undrawn))


def _draw(into: npt.NDArray[np.bool_], contours: Sequence[Dataset], grid: SliceGrid, tolerance: float,
          name: str) -> None:
    """Fill one ROI's closed contours into its (i, j, k) mask, even-odd across the contours of each slice."""
    from skimage.draw import polygon  # here: only an RTSTRUCT needs scikit-image

    n = grid.shape[2]
    step = float(np.linalg.norm(grid.lps[:3, 2])) or 1.0
    for c in contours:
        points = np.asarray([float(v) for v in c.ContourData], dtype=np.float64).reshape(-1, 3)
        ijk = grid.to_voxels(points)
        k = int(np.rint(np.median(ijk[:, 2])))
        off = float(np.abs(ijk[:, 2] - k).max() * step)
        if not 0 <= k < n:
            raise Rejected(Reason.GEOMETRY_MISMATCH, f"ROI {name!r}: a contour at {_fmt(points[0])} mm lies outside "
                                                     f"the series' {n} slices (slice {k + 1})")
        if off > tolerance:
            raise Rejected(Reason.GEOMETRY_MISMATCH, f"ROI {name!r}: a contour near slice {k + 1} of {n} has points "
                                                     f"{off:.4g} mm off that slice, tolerance {tolerance:g} mm")
        rr, cc = polygon(ijk[:, 0], ijk[:, 1], shape=into.shape[:2])
        fill = np.zeros(into.shape[:2], dtype=bool)
        fill[rr, cc] = True
        into[:, :, k] ^= fill


def _fmt(values: npt.NDArray[np.float64]) -> str:
    return "(" + ", ".join(f"{float(v):.6g}" for v in values) + ")"
