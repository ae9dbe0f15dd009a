"""What every 2D reader shares: the header-first caps, EXIF orientation, and the (C, H, W) Volume."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .reasons import Reason, Rejected
from .records import Limits, Plane, Volume

__all__ = ["ORIENTATIONS", "ORIENTATION_TAG", "check_plane", "checked_orientation", "exif_orientation", "orient",
           "orientation_warning", "oriented_plane", "planar_volume"]

# EXIF Orientation (tag 0x0112) -> what displaying the image correctly takes (as Pillow's ImageOps.exif_transpose).
ORIENTATIONS: dict[int, str] = {
    2: "mirrored left-right", 3: "rotated 180°", 4: "mirrored top-bottom", 5: "transposed",
    6: "rotated 90° clockwise", 7: "transversed", 8: "rotated 90° counter-clockwise",
}
ORIENTATION_TAG = 0x0112


def check_plane(plane: Plane, limits: Limits) -> None:
    """Raise `too_large` for an image over the pixel or byte cap; called on the header, before decoding."""
    if plane.pixels > limits.max_pixels:
        raise Rejected(Reason.TOO_LARGE, f"{plane.width:,}x{plane.height:,} = {plane.pixels:,} pixels, "
                                         f"cap {limits.max_pixels:,} ([validate] max_pixels)")
    if plane.nbytes > limits.max_bytes:
        raise Rejected(Reason.TOO_LARGE, f"{'x'.join(map(str, plane.shape))} x {np.dtype(plane.dtype).itemsize} B "
                                         f"= {plane.nbytes:,} B decoded, cap {limits.max_bytes:,} B "
                                         "([validate] max_bytes)")


def exif_orientation(exif: bytes) -> tuple[int, tuple[str, ...]]:
    """The EXIF orientation (1..8) in an APP1/eXIf payload, and a warning when it cannot be used."""
    if not exif:
        return 1, ()
    from PIL import Image  # here: the plan checks planes (`check_plane`) on the driver, which decodes no image

    try:
        value = Image.Exif()
        value.load(exif)
        orientation = value.get(ORIENTATION_TAG, 1)
    except (OSError, SyntaxError, ValueError, KeyError, IndexError, TypeError) as exc:  # Pillow's TIFF IFD parser
        return 1, (f"EXIF block unreadable ({type(exc).__name__}: {exc}); orientation not applied",)
    return checked_orientation(orientation)


def checked_orientation(value: object) -> tuple[int, tuple[str, ...]]:
    """An EXIF Orientation tag's value as 1..8, with a warning when it is out of range (then 1)."""
    if value == 1:
        return 1, ()
    if not isinstance(value, int) or value not in ORIENTATIONS:
        return 1, (f"EXIF orientation {value!r} is not 1..8; not applied",)
    return value, ()


def oriented_plane(channels: int, height: int, width: int, dtype: str, orientation: int) -> Plane:
    """The Plane after `orient`: orientations 5..8 swap height and width."""
    if orientation >= 5:
        height, width = width, height
    return Plane(channels=channels, height=height, width=width, dtype=dtype)


def orient(hwc: npt.NDArray[np.generic], orientation: int) -> npt.NDArray[np.generic]:
    """Apply an EXIF orientation to an (H, W, C) array, as Pillow's ImageOps.exif_transpose does."""
    t = (1, 0, 2)
    out: npt.NDArray[np.generic] = {
        1: lambda a: a,
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.transpose(t),
        6: lambda a: a[::-1].transpose(t),
        7: lambda a: a[::-1, ::-1].transpose(t),
        8: lambda a: a[:, ::-1].transpose(t),
    }[orientation](hwc)
    return out


def orientation_warning(orientation: int) -> tuple[str, ...]:
    """The manifest warning recording an applied orientation (none for 1)."""
    if orientation == 1:
        return ()
    return (f"EXIF orientation {orientation} applied ({ORIENTATIONS[orientation]})",)


def planar_volume(hwc: npt.NDArray[np.generic], kind: str, warnings: tuple[str, ...]) -> Volume:
    """The (C, H, W) Volume of an (H, W, C) image; 2D images have no physical spacing or affine here."""
    data = hwc.transpose(2, 0, 1).copy()  # C order; faster than ascontiguousarray(moveaxis(...)) on uint8
    if data.dtype.byteorder not in ("=", "|"):
        data = data.astype(data.dtype.newbyteorder("="))
    return Volume(kind=kind, data=data, spacing=(), affine=(), orientation="", warnings=warnings)
