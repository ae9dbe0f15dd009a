"""Typed records a reader returns, and the limits it is handed. Frozen: they cross processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ByFields", "Limits", "Metadata", "MetaValue", "Plane", "Slab", "Volume", "VolumeHeader"]

GiB = 1 << 30

# A metadata value as JSON writes it: a number, a string, or a tuple of them (b-values, an ImageType).
MetaValue = float | int | str | tuple[float | int | str, ...] | tuple[tuple[float, ...], ...]
Metadata = tuple[tuple[str, MetaValue], ...]


class ByFields:
    """Base of a frozen, slotted record that crosses processes by the thousand (probes, DICOM headers): pickled as
    its class and its field values, rebuilt by its constructor. dataclasses pickle such a class through a
    `__setstate__` that calls `fields()` for every object, on both sides, which made sending a DWI's 2,000 probes to
    the driver about twice as slow (bench/dicom.py)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        names: tuple[str, ...] = self.__slots__  # the dataclass's own slots: its fields, in order
        return type(self), tuple([getattr(self, name) for name in names])


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps a reader checks *before* decoding, so a bomb is refused with bounded memory."""

    max_bytes: int = 4 * GiB  # decoded size of one item (voxels x itemsize)
    max_voxels: int = 1 << 31  # elements of one item (all channels), whatever their itemsize
    max_pixels: int = 178_956_970  # per 2D image; Pillow's DecompressionBombError default x 2


@dataclass(frozen=True, slots=True)
class Plane(ByFields):
    """What a 2D image decodes to, known from its header alone: shape (C, H, W) and dtype.

    Planning groups 2D items into stacks by this, before any pixel is decoded;
    `height` and `width` are after any orientation the reader applies (EXIF).
    """

    channels: int
    height: int
    width: int
    dtype: str  # numpy dtype name, native byte order: "uint8", "uint16", "int32", "float32"

    @property
    def shape(self) -> tuple[int, int, int]:
        """(C, H, W), the shape of the decoded `Volume.data`."""
        return (self.channels, self.height, self.width)

    @property
    def pixels(self) -> int:
        """H x W, what `Limits.max_pixels` caps."""
        return self.height * self.width

    @property
    def nbytes(self) -> int:
        """Decoded size in bytes, what `Limits.max_bytes` caps."""
        return self.channels * self.pixels * int(np.dtype(self.dtype).itemsize)


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
    metadata: Metadata = ()


@dataclass(frozen=True, slots=True)
class VolumeHeader:
    """What a volume is, known before any voxel is decoded: canonical shape, dtype and geometry.

    `shape` is (C, X, Y, Z) in canonical RAS order, `dtype` the stored dtype
    (native byte order). `stream_axis` is the canonical axis (1, 2 or 3) along
    which the source delivers slabs in file order, or None when the source holds
    the whole volume in memory; `voxel_bytes` is what the source keeps in memory
    per voxel of one slab, so a planner can bound a slab's memory.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    spacing: tuple[float, ...]
    affine: tuple[tuple[float, ...], ...]
    orientation: str
    stream_axis: int | None = None
    voxel_bytes: int = 0
    warnings: tuple[str, ...] = field(default=())
    # Acquisition facts a reader found (a DICOM series' scaling convention, echo time, b-values ...), as sorted
    # (name, value) pairs so the record stays frozen and hashable; the array's attrs hold them as a mapping.
    metadata: Metadata = ()


@dataclass(frozen=True, slots=True, eq=False)
class Slab:
    """A block of canonical voxels: `data[...]` belongs at `region` of the (C, X, Y, Z) array.

    `data` may be a view of a buffer the source reuses: it is valid until the
    next slab is requested.
    """

    region: tuple[slice, ...]
    data: npt.NDArray[Any]
