"""Thumbnails for the QC page, read from the store (never from the raw files).

A volume `(C, X, Y, Z)` in RAS order shows its first channel as three
orthogonal mid-slices (axial, coronal, sagittal), in radiological convention
(patient's right on the viewer's left, anterior or superior up), in physical
proportions from the voxel spacing, all three windowed together at the 0.5 and
99.5 percentiles. A sample's mask (its `mask` role, same grid as the image) is
laid over those planes, one colour per class (`class_color`), class 0 clear.
A 2D image (one slot of an `(N, C, H, W)` stack) is shown as stored (8-bit) or
windowed the same way, and only ever downscaled.
Only the three planes are read: a few chunks of the array, not the volume.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

from labzarr.store import ArrayReader
from labzarr.store.format.ngff import class_color  # one colour per class, on the QC page and in the label images

__all__ = ["VIEW_NAMES", "class_color", "image_thumbnail", "thumbnail", "volume_planes", "volume_thumbnail", "window"]

VIEW_NAMES = ("axial", "coronal", "sagittal")
_GAP = 4  # px between the three views
_ALPHA = 0.45  # mask opacity: the anatomy stays visible under the classes


def window(planes: Sequence[np.ndarray], *, percentiles: tuple[float, float] = (0.5, 99.5)) -> list[np.ndarray]:
    """Map `planes` to uint8 with one shared window; NaN and Inf show as black."""
    finite = np.concatenate([p[np.isfinite(p)].ravel() for p in planes]).astype(np.float64)
    lo, hi = np.percentile(finite, percentiles) if finite.size else (0.0, 1.0)
    if hi <= lo:  # a constant image: show it mid-grey rather than divide by zero
        lo, hi = lo - 1.0, hi + 1.0
    out = []
    for p in planes:
        scaled = (np.asarray(p, np.float64) - lo) * (255.0 / (hi - lo))
        out.append(np.nan_to_num(np.clip(scaled, 0, 255), nan=0.0, posinf=0.0, neginf=0.0).astype(np.uint8))
    return out


def volume_planes(arr: ArrayReader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The axial, coronal and sagittal mid-slices of channel 0, as display images (rows top to bottom)."""
    _, nx, ny, nz = arr.shape
    axial = np.asarray(arr[0, :, :, nz // 2])  # (X, Y)
    coronal = np.asarray(arr[0, :, ny // 2, :])  # (X, Z)
    sagittal = np.asarray(arr[0, nx // 2, :, :])  # (Y, Z)
    # RAS: the second axis grows anterior/superior (shown up), the first grows to the patient's right (shown left).
    return axial[::-1, ::-1].T, coronal[::-1, ::-1].T, sagittal[::-1, ::-1].T


def _spacing(spacing: Sequence[float]) -> tuple[float, float, float]:
    sp = [float(s) for s in spacing[:3]]
    sp += [1.0] * (3 - len(sp))
    return (sp[0], sp[1], sp[2]) if all(np.isfinite(s) and s > 0 for s in sp) else (1.0, 1.0, 1.0)


def _resize(img: Image.Image, size: tuple[int, int]) -> Image.Image:
    # Enlarged views show voxels as blocks (honest about resolution); reduced ones are low-passed.
    up = size[0] > img.width or size[1] > img.height
    return img.resize(size, Image.Resampling.NEAREST if up else Image.Resampling.LANCZOS)


def _overlay(gray: Image.Image, classes: np.ndarray) -> Image.Image:
    """`gray` in colour with each class k >= 1 of `classes` (same size) blended in `class_color(k)`."""
    rgb = np.repeat(np.asarray(gray, np.float32)[..., None], 3, axis=2)
    for k in np.unique(classes):
        if k <= 0:
            continue
        where = classes == k
        rgb[where] = (1 - _ALPHA) * rgb[where] + _ALPHA * np.array(class_color(int(k)), np.float32)
    return Image.fromarray(rgb.round().astype(np.uint8))


def volume_thumbnail(arr: ArrayReader, spacing: Sequence[float], *, size: int = 160,
                     mask: ArrayReader | None = None) -> Image.Image:
    """Three views side by side, scaled together so the longest physical extent spans `size` px; `mask` overlaid."""
    sx, sy, sz = _spacing(spacing)
    _, nx, ny, nz = arr.shape
    if mask is not None and tuple(mask.shape[1:]) != (nx, ny, nz):
        raise ValueError(f"mask shape {mask.shape} does not match image shape {arr.shape}")
    mm_per_px = max(nx * sx, ny * sy, nz * sz) / size
    planes = window(volume_planes(arr))
    labels = volume_planes(mask) if mask is not None else (None, None, None)
    pixel_mm = [(sy, sx), (sz, sx), (sz, sy)]  # (row, column) spacing of each display plane
    views = []
    for plane, label, (row_mm, col_mm) in zip(planes, labels, pixel_mm):
        h = max(1, round(plane.shape[0] * row_mm / mm_per_px))
        w = max(1, round(plane.shape[1] * col_mm / mm_per_px))
        view = _resize(Image.fromarray(plane), (w, h))
        if label is not None:  # classes are resized by nearest neighbour: no invented in-between class
            classes = np.asarray(Image.fromarray(label.astype(np.int32)).resize((w, h), Image.Resampling.NEAREST))
            view = _overlay(view, classes)
        views.append(view)
    mode = "RGB" if mask is not None else "L"
    sheet = Image.new(mode, (sum(v.width for v in views) + _GAP * (len(views) - 1), max(v.height for v in views)))
    x = 0
    for v in views:
        sheet.paste(v, (x, (sheet.height - v.height) // 2))
        x += v.width + _GAP
    return sheet


def image_thumbnail(pixels: np.ndarray, *, size: int = 256, mask: np.ndarray | None = None) -> Image.Image:
    """One 2D image `(C, H, W)`: gray for one channel, RGB for three or more; downscaled to fit `size`.

    With `mask` (`(1, H, W)` classes), the image is shown in grey with the classes blended in, as volumes are.
    """
    if pixels.ndim != 3:
        raise ValueError(f"expected (C, H, W), got shape {pixels.shape}")
    if mask is not None and tuple(mask.shape[1:]) != tuple(pixels.shape[1:]):
        raise ValueError(f"mask shape {mask.shape} does not match image shape {pixels.shape}")
    chans = pixels[:3] if pixels.shape[0] >= 3 else pixels[:1]
    planes = list(chans) if pixels.dtype == np.uint8 else window(list(chans))
    img = Image.fromarray(np.stack(planes, axis=-1) if len(planes) == 3 else planes[0])
    img.thumbnail((size, size), Image.Resampling.LANCZOS)
    if mask is not None:  # classes resized by nearest neighbour: no invented in-between class
        classes = np.asarray(Image.fromarray(mask[0].astype(np.int32)).resize(img.size, Image.Resampling.NEAREST))
        img = _overlay(img.convert("L"), classes)
    return img


def thumbnail(arr: ArrayReader, *, slot: int | None, spacing: Sequence[float],
              mask: ArrayReader | None = None) -> Image.Image:
    """The thumbnail of one store item: a slot of a 2D stack, a 2D image or a `(C, X, Y, Z)` volume with its mask."""
    if slot is not None:
        return image_thumbnail(np.asarray(arr[slot]))
    if arr.ndim == 3:  # a 2D image of a sample (`volumes/<id>/image`), with its mask if any
        return image_thumbnail(np.asarray(arr[...]), mask=None if mask is None else np.asarray(mask[...]))
    if arr.ndim != 4:
        raise ValueError(f"expected a (C, X, Y, Z) volume, got shape {arr.shape}")
    return volume_thumbnail(arr, spacing, mask=mask)
