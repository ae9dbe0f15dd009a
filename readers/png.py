"""PNG images (Pillow), checked chunk by chunk: every chunk's CRC is verified before the image is decoded.

Invariant: as `_pillow`; a PNG whose IHDR declares 16-bit colour (RGB, RGBA
or grey+alpha) is refused, since Pillow would decode it to 8 bits per sample.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import ClassVar

from PIL import Image

from ._head import Head
from ._pillow import PillowReader
from .reasons import Reason, Rejected

__all__ = ["PngReader"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the whole, fixed 12-byte end chunk
_TAIL = 1 << 16  # how much of the file's end may follow IEND (appended data) and still be looked at
_COLOUR_TYPES = {0: "grey", 2: "RGB", 3: "palette", 4: "grey+alpha", 6: "RGBA"}


class PngReader(PillowReader):
    """Reads PNG files, whatever they are named (a PNG named `.jpg` is read as the PNG it is)."""

    kind: ClassVar[str] = "png"
    format: ClassVar[str] = "PNG"
    magics: ClassVar[tuple[bytes, ...]] = (_SIGNATURE,)

    def narrowed(self, im: Image.Image, head: Head) -> str | None:
        """16-bit RGB, RGBA and grey+alpha, read from IHDR (bit depth at byte 24, colour type at 25)."""
        if len(head.data) >= 26 and head.data[12:16] == b"IHDR":
            depth, colour = head.data[24], head.data[25]
            if depth == 16 and colour in (2, 4, 6):
                return f"16-bit {_COLOUR_TYPES[colour]}"
        return None

    def _verify(self, path: Path, head: Head) -> None:
        # Pillow skips the CRCs of the chunks it decodes; verify() checks every chunk's CRC and the stream's end.
        try:
            with Image.open(path, formats=[self.format]) as im:
                im.verify()
        except (OSError, SyntaxError, ValueError, EOFError, zlib.error) as exc:
            msg = str(exc) or type(exc).__name__
            if "truncated" in msg.lower():
                raise Rejected(Reason.TRUNCATED, f"Pillow: {msg} (PNG, {head.size:,} B)") from exc
            raise Rejected(Reason.CORRUPT_DATA, f"Pillow: {msg} (PNG)") from exc
        # verify() stops at IEND's type without reading its CRC: a file cut inside IEND passes it.
        with path.open("rb") as f:
            f.seek(max(0, head.size - _TAIL))
            tail = f.read()
        if _IEND not in tail:
            raise Rejected(Reason.TRUNCATED, f"no complete IEND chunk at the end; the file ends at byte {head.size:,}")
