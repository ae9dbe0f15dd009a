"""Single-image TIFF files (Pillow, with its bundled libtiff for compressed strips and tiles).

Invariant: as `_pillow`; multi-page TIFFs (z-stacks, pyramids) are refused as
`unsupported_format`, and 16-bit colour TIFFs as `decoder_missing`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from PIL import Image

from ._head import Head
from ._pillow import PillowReader
from .reasons import Reason, Rejected

__all__ = ["TiffReader"]

_IMAGE_WIDTH, _IMAGE_LENGTH, _BITS_PER_SAMPLE, _ORIENTATION = 256, 257, 258, 274


class TiffReader(PillowReader):
    """Reads classic and BigTIFF files with one image, whatever they are named."""

    kind: ClassVar[str] = "tiff"
    format: ClassVar[str] = "TIFF"
    magics: ClassVar[tuple[bytes, ...]] = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")

    def narrowed(self, im: Image.Image, head: Head) -> str | None:
        """More than 8 bits per sample in a colour mode, which Pillow maps to 8-bit RGB."""
        bits = _tags(im).get(_BITS_PER_SAMPLE, (1,))
        bits = bits if isinstance(bits, tuple) else (bits,)
        if im.mode in ("RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "LA") and max(bits) > 8:
            return f"{max(bits)}-bit {im.mode}"
        return None

    def stored_size(self, im: Image.Image) -> tuple[int, int]:
        """ImageWidth x ImageLength as stored: recent Pillow reports the *oriented* size in `im.size`."""
        tags = _tags(im)
        return int(tags.get(_IMAGE_WIDTH, im.size[0])), int(tags.get(_IMAGE_LENGTH, im.size[1]))

    def oriented_on_load(self, im: Image.Image) -> bool:
        """Recent Pillow applies (and then drops) the Orientation tag itself when it loads a TIFF."""
        return _ORIENTATION not in _tags(im)

    def unidentified(self, path: Path, head: Head) -> Rejected:
        """A TIFF whose first image directory does not fit in the file was cut short (writers often put it last)."""
        data = head.data
        if len(data) >= 8 and data[2:4] in (b"*\x00", b"\x00*"):
            order: Literal["little", "big"] = "little" if data[:2] == b"II" else "big"
            ifd = int.from_bytes(data[4:8], order)
            if ifd + 2 > head.size:
                return Rejected(Reason.TRUNCATED, f"first image directory (IFD) at byte {ifd:,}, past the end of the "
                                                  f"{head.size:,}-byte file")
            with path.open("rb") as f:
                f.seek(ifd)
                entries = int.from_bytes(f.read(2), order)
            end = ifd + 2 + 12 * entries + 4
            if end > head.size:
                return Rejected(Reason.TRUNCATED, f"first image directory (IFD) at byte {ifd:,} has {entries} entries "
                                                  f"and ends at byte {end:,}, "
                                                  f"past the end of the {head.size:,}-byte file")
        return Rejected(Reason.CORRUPT_DATA, "TIFF signature present but Pillow finds no readable image directory")


def _tags(im: Image.Image) -> Mapping[int, Any]:
    """A TIFF image's tags (Pillow's TiffImageFile.tag_v2)."""
    return getattr(im, "tag_v2", {})
