"""Typed records a reader returns, and the limits it is handed. Frozen: they cross processes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["Limits", "Volume"]

GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps a reader checks *before* decoding, so a bomb is refused with bounded memory."""

    max_bytes: int = 4 * GiB  # decoded size of one item (voxels x itemsize)
    max_pixels: int = 178_956_970  # per 2D image; Pillow's DecompressionBombError default x 2


@dataclass(frozen=True, slots=True, eq=False)
class Volume:
    """A decoded image in canonical RAS voxel order.

    `data` has shape (C, X, Y, Z) for volumes; a 2D image is (C, H, W).
    `affine` maps canonical voxel indices (x, y, z) to RAS+ millimetres.
    `orientation` is the *source* axis codes before reorientation (e.g. "LPS").
    """

    kind: str
    data: npt.NDArray[np.generic]
    spacing: tuple[float, ...]
    affine: tuple[tuple[float, ...], ...]
    orientation: str
    warnings: tuple[str, ...] = field(default=())
