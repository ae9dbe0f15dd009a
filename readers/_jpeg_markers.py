"""The JPEG marker walk: frame size, precision, coding process, colour hints and EXIF, read without decoding.

libjpeg-turbo's tjDecompressHeader refuses 12-bit and lossless files before it
tells their size, and Pillow refuses 12-bit files outright, so the pixel cap
and the choice of decoder need their own walk over the marker segments up to
the first scan (ITU-T T.81, B.1). Segments are skipped by their length field,
so only the few segments we use are read.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import BinaryIO

from .reasons import Reason, Rejected

__all__ = ["PROCESSES", "JpegHeader", "ends_with_eoi", "read_header", "read_header_bytes"]

SOI = b"\xff\xd8"
EOI = b"\xff\xd9"
_SOS = 0xDA
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RST0..7 carry no length field

# Start-of-frame markers and the coding process each announces (T.81 Table B.1; 0xF7 is JPEG-LS, T.87).
PROCESSES: dict[int, str] = {
    0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive", 0xC3: "lossless",
    0xC5: "hierarchical sequential", 0xC6: "hierarchical progressive", 0xC7: "hierarchical lossless",
    0xC9: "arithmetic sequential", 0xCA: "arithmetic progressive", 0xCB: "arithmetic lossless",
    0xCD: "hierarchical arithmetic sequential", 0xCE: "hierarchical arithmetic progressive",
    0xCF: "hierarchical arithmetic lossless", 0xF7: "JPEG-LS",
}


@dataclass(frozen=True, slots=True)
class JpegHeader:
    """The facts of a JPEG's first frame header and the segments before its first scan."""

    sof: int  # the start-of-frame marker's second byte, a key of PROCESSES
    precision: int  # bits per sample: 8, 12 or (lossless) up to 16
    height: int
    width: int
    component_ids: tuple[int, ...]
    jfif: bool  # an APP0 JFIF segment: the three components are YCbCr
    adobe_transform: int | None  # APP14 "Adobe" transform flag: 0 none (RGB/CMYK), 1 YCbCr, 2 YCCK
    exif: bytes  # the APP1 EXIF payload ("Exif\0\0" + TIFF), b"" without one
    scan_offset: int  # byte offset of the first SOS marker

    @property
    def process(self) -> str:
        """The coding process in words, e.g. "progressive"."""
        return PROCESSES[self.sof]

    @property
    def components(self) -> int:
        return len(self.component_ids)


def read_header_bytes(data: bytes) -> JpegHeader:
    """`read_header` over an in-memory file."""
    return read_header(io.BytesIO(data), len(data))


def read_header(f: BinaryIO, size: int) -> JpegHeader:
    """Walk the markers of the `size`-byte JPEG in `f` up to its first scan; raise `Rejected` when malformed."""
    if f.read(2) != SOI:
        raise Rejected(Reason.BAD_HEADER, "no SOI marker (FF D8) at byte 0; not a JPEG stream")
    frame: tuple[int, int, int, int, tuple[int, ...]] | None = None
    jfif = False
    adobe: int | None = None
    exif = b""
    while True:
        at = f.tell()
        marker = _next_marker(f, at, size)
        if marker in _STANDALONE or marker == 0xD8:
            continue
        if marker == 0xD9:
            raise Rejected(Reason.CORRUPT_DATA, f"EOI marker at byte {at:,} before any scan; the stream holds no image")
        raw_len = f.read(2)
        if len(raw_len) < 2:
            raise _cut(size, "inside a marker's length field")
        length = int.from_bytes(raw_len, "big")
        if length < 2:
            raise Rejected(Reason.CORRUPT_DATA,
                           f"marker FF {marker:02X} at byte {at:,} has length {length}, expected >= 2")
        if marker == _SOS:
            if frame is None:
                raise Rejected(Reason.BAD_HEADER, f"scan (SOS) at byte {at:,} before any frame header (SOF)")
            sof, precision, height, width, ids = frame
            return JpegHeader(sof=sof, precision=precision, height=height, width=width, component_ids=ids,
                              jfif=jfif, adobe_transform=adobe, exif=exif, scan_offset=at)
        wanted = marker in PROCESSES or marker in (0xE0, 0xE1, 0xEE)
        if not wanted:
            f.seek(length - 2, io.SEEK_CUR)
            if f.tell() > size:
                raise _cut(size, f"inside the FF {marker:02X} segment that starts at byte {at:,}")
            continue
        payload = f.read(length - 2)
        if len(payload) < length - 2:
            raise _cut(size, f"inside the FF {marker:02X} segment that starts at byte {at:,}")
        if marker in PROCESSES:
            if frame is None:  # a hierarchical file has several frames; the first sets the decoder
                frame = _frame(marker, payload, at)
        elif marker == 0xE0 and payload.startswith(b"JFIF\x00"):
            jfif = True
        elif marker == 0xE1 and payload.startswith(b"Exif\x00\x00") and not exif:
            exif = payload
        elif marker == 0xEE and payload.startswith(b"Adobe") and len(payload) >= 12:
            adobe = payload[11]


def ends_with_eoi(data: bytes, header: JpegHeader) -> bool:
    """True when an EOI marker follows the first scan.

    Entropy-coded data never holds FF D9 (an FF there is stuffed as FF 00), so a
    file cut anywhere in or after its first scan has none; trailing bytes after
    the EOI (padding, a camera's appended data) are allowed.
    """
    return data.find(EOI, header.scan_offset) >= 0


def _next_marker(f: BinaryIO, at: int, size: int) -> int:
    b = f.read(1)
    if not b:
        raise _cut(size, "before the first scan (SOS): the header is incomplete")
    if b != b"\xff":
        raise Rejected(Reason.CORRUPT_DATA, f"expected a marker (FF) at byte {at:,}, found {b[0]:02X}")
    while b == b"\xff":  # any number of FF fill bytes may precede a marker
        b = f.read(1)
    if not b:
        raise _cut(size, "inside a marker, before the first scan (SOS)")
    return b[0]


def _frame(marker: int, payload: bytes, at: int) -> tuple[int, int, int, int, tuple[int, ...]]:
    if len(payload) < 6:
        raise Rejected(Reason.BAD_HEADER, f"frame header (SOF) at byte {at:,} is {len(payload) + 2} B, expected >= 8")
    precision = payload[0]
    height = int.from_bytes(payload[1:3], "big")
    width = int.from_bytes(payload[3:5], "big")
    n = payload[5]
    if len(payload) < 6 + 3 * n:
        raise Rejected(Reason.BAD_HEADER, f"frame header (SOF) at byte {at:,} lists {n} components in "
                                          f"{len(payload) + 2} B, expected {8 + 3 * n} B")
    if width == 0:
        raise Rejected(Reason.BAD_HEADER, f"frame header (SOF) at byte {at:,} gives width 0")
    if height == 0:
        raise Rejected(Reason.UNSUPPORTED_FORMAT,
                       "frame height 0: the height is defined later by a DNL marker, which no decoder here reads")
    if n not in (1, 3, 4):
        raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{n} colour components; 1 (grey), 3 (colour) or 4 (CMYK) are read")
    if not 2 <= precision <= 16:
        raise Rejected(Reason.BAD_HEADER, f"sample precision {precision} bits, expected 2..16")
    return marker, precision, height, width, tuple(payload[6 + 3 * i] for i in range(n))


def _cut(size: int, where: str) -> Rejected:
    return Rejected(Reason.TRUNCATED, f"the file ends at byte {size:,}, {where}")
