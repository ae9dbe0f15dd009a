"""2D formats decoded by Pillow (PNG, TIFF): header facts without decoding, then a whole, checked decode.

Invariant: Pillow never narrows what it stores. Pillow reads 16-bit colour PNG
and TIFF as 8-bit RGB; such files are refused (`decoder_missing`) rather than
stored with half their bits. `ImageFile.LOAD_TRUNCATED_IMAGES` is never set,
so a truncated file raises instead of loading grey.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image, UnidentifiedImageError

from ._head import Head
from ._planar import (
    ORIENTATION_TAG,
    check_plane,
    checked_orientation,
    orient,
    orientation_warning,
    oriented_plane,
    planar_volume,
)
from .reasons import Reason, Rejected
from .records import Limits, Plane, Volume

__all__ = ["PillowReader"]

# Pillow mode -> (mode to convert to before numpy, channels, dtype). Modes not listed are refused.
_MODES: dict[str, tuple[str, int, str]] = {
    "1": ("L", 1, "uint8"),  # bilevel becomes 0/255
    "L": ("L", 1, "uint8"),
    "LA": ("LA", 2, "uint8"),
    "P": ("RGB", 3, "uint8"),  # palette: RGBA instead when the file declares a transparent entry
    "PA": ("RGBA", 4, "uint8"),
    "RGB": ("RGB", 3, "uint8"),
    "RGBA": ("RGBA", 4, "uint8"),
    "RGBX": ("RGB", 3, "uint8"),
    "CMYK": ("RGB", 3, "uint8"),
    "YCbCr": ("RGB", 3, "uint8"),
    "I;16": ("I;16", 1, "uint16"),
    "I;16L": ("I;16L", 1, "uint16"),
    "I;16B": ("I;16B", 1, "uint16"),
    "I;16N": ("I;16N", 1, "uint16"),
    "I": ("I", 1, "int32"),
    "F": ("F", 1, "float32"),
}
# Modes whose stored values are class indices when the image is a label map (`read_labels`): kept as they are.
_LABEL_MODES = frozenset({"P", "1"})


class PillowReader:
    """Base of the Pillow-decoded readers; a subclass names its `kind`, Pillow `format` and magic numbers."""

    kind: ClassVar[str]
    format: ClassVar[str]
    magics: ClassVar[tuple[bytes, ...]]

    def sniff(self, head: bytes) -> bool:
        """True when `head` starts with one of the format's magic numbers."""
        return head.startswith(self.magics)

    def plane(self, path: Path, head: Head) -> Plane:
        """(C, H, W) and dtype from the header alone; raises `Rejected` for files Pillow cannot open faithfully."""
        with self._open(path, head) as im:
            return self._facts(im, head)[0]

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Check header and caps, verify, decode the whole image; raise `Rejected` on any decoder complaint."""
        return self._read(path, limits, head, labels=False)

    def read_labels(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Read a label map: as `read`, except that a palette image gives its indices (the classes, as in Pascal
        VOC's masks; `read` gives the colours) and a bilevel one 0/1 (`read`: 0/255), one channel each."""
        return self._read(path, limits, head, labels=True)

    def _read(self, path: Path, limits: Limits, head: Head, *, labels: bool) -> Volume:
        self._verify(path, head)
        with self._open(path, head) as im:
            plane, target, orientation, warnings = self._facts(im, head)
            if labels and im.mode in _LABEL_MODES:
                target = im.mode
                plane = Plane(channels=1, height=plane.height, width=plane.width, dtype="uint8")
            check_plane(plane, limits)
            try:
                im.load()
                converted = im.convert(target) if im.mode != target else im
                hwc = np.asarray(converted)
            except (OSError, SyntaxError, ValueError, EOFError, zlib.error) as exc:
                raise _decode_error(exc, self.format) from exc
            pillow_oriented = orientation != 1 and self.oriented_on_load(im)
        if hwc.dtype == np.bool_:  # a bilevel label map: classes 0 and 1
            hwc = hwc.astype(np.uint8)  # not a view: Pillow backs its True with 255
        if hwc.ndim == 2:
            hwc = hwc[:, :, np.newaxis]
        if not pillow_oriented:
            hwc = orient(hwc, orientation)
        if (hwc.shape[2], *hwc.shape[:2]) != plane.shape or hwc.dtype.name != plane.dtype:
            raise Rejected(Reason.CORRUPT_DATA, f"decoded {hwc.shape[2]}x{hwc.shape[0]}x{hwc.shape[1]} {hwc.dtype}, "
                                                f"the header announced {'x'.join(map(str, plane.shape))} {plane.dtype}")
        return planar_volume(hwc, self.kind, warnings + orientation_warning(orientation))

    def narrowed(self, im: Image.Image, head: Head) -> str | None:
        """What Pillow would narrow in this file (e.g. "16-bit RGB"), or None when it reads it faithfully."""
        return None

    def stored_size(self, im: Image.Image) -> tuple[int, int]:
        """(width, height) as stored, before any orientation."""
        return im.size

    def oriented_on_load(self, im: Image.Image) -> bool:
        """True when Pillow itself applied the orientation tag while loading `im`."""
        return False

    def unidentified(self, path: Path, head: Head) -> Rejected:
        """The rejection for a file with this format's magic that Pillow cannot open."""
        return Rejected(Reason.BAD_HEADER, f"{self.format} signature present but Pillow cannot parse the header")

    def _verify(self, path: Path, head: Head) -> None:
        """A whole-file integrity check before decoding, where the format has one (PNG's chunk CRCs)."""

    @contextmanager
    def _open(self, path: Path, head: Head) -> Iterator[Image.Image]:
        try:
            im = Image.open(path, formats=[self.format])
        except Image.DecompressionBombError as exc:
            raise Rejected(Reason.TOO_LARGE, f"Pillow refuses it as a decompression bomb: {exc}") from exc
        except UnidentifiedImageError as exc:
            raise self.unidentified(path, head) from exc
        except (OSError, SyntaxError, ValueError, EOFError, zlib.error) as exc:
            raise _decode_error(exc, self.format) from exc
        with im:
            yield im

    def _facts(self, im: Image.Image, head: Head) -> tuple[Plane, str, int, tuple[str, ...]]:
        frames = getattr(im, "n_frames", 1)
        if frames > 1:
            raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{self.format} holds {frames} images (pages/frames); only "
                                                      "single-image files are read (a z-stack is a volume)")
        if im.mode not in _MODES:
            raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{self.format} pixel mode {im.mode!r} is not read; "
                                                      f"supported: {', '.join(_MODES)}")
        narrowed = self.narrowed(im, head)
        if narrowed:
            raise Rejected(Reason.DECODER_MISSING, f"{narrowed} {self.format}: Pillow would decode it to 8 bits per "
                                                   "sample; not stored rather than silently losing precision")
        target, channels, dtype = _MODES[im.mode]
        if im.mode == "P" and "transparency" in im.info:
            target, channels = "RGBA", 4
        warnings: tuple[str, ...] = ()
        if im.mode in ("CMYK", "YCbCr"):
            warnings += (f"{im.mode} converted to RGB (Pillow's conversion, no ICC profile)",)
        try:
            orientation, bad = checked_orientation(im.getexif().get(ORIENTATION_TAG, 1))
        except (OSError, SyntaxError, ValueError, KeyError, IndexError, TypeError) as exc:
            orientation, bad = 1, (f"EXIF block unreadable ({type(exc).__name__}: {exc}); orientation not applied",)
        width, height = self.stored_size(im)
        if width < 1 or height < 1:
            raise Rejected(Reason.BAD_HEADER, f"{self.format} header gives size {width}x{height}")
        return oriented_plane(channels, height, width, dtype, orientation), target, orientation, warnings + bad


def _decode_error(exc: BaseException, fmt: str) -> Rejected:
    msg = str(exc) or type(exc).__name__
    if "truncated" in msg.lower():
        return Rejected(Reason.TRUNCATED, f"Pillow: {msg} ({fmt})")
    return Rejected(Reason.CORRUPT_DATA, f"Pillow: {type(exc).__name__}: {msg} ({fmt})")
