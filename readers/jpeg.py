"""JPEG images, decoded by libjpeg-turbo; anything libjpeg only warns about is a rejection, never half an image.

Invariant: a returned Volume is (C, H, W) with C = 1 (grey) or 3 (RGB), uint8
for 8-bit files and uint16 for 12- to 16-bit ones, EXIF orientation applied.
Its header passed the caps before any pixel was decoded, its marker structure
was intact with an EOI after the scans, and the decoder reported nothing.

Decoders: libjpeg-turbo (PyTurboJPEG on Debian's libturbojpeg0 2.1) for 8-bit
baseline, extended, progressive and arithmetic-coded files; pylibjpeg-libjpeg
for what libjpeg-turbo 2.1 cannot decode (12-bit, lossless, hierarchical,
JPEG-LS), or `decoder_missing` when it is not installed. CMYK and YCCK become
RGB the way Pillow converts them (Adobe inverted-CMYK convention, no ICC).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from PIL import Image
from turbojpeg import TJERR_WARNING, TJFLAG_LIMITSCANS, TJPF_CMYK, TJPF_GRAY, TJPF_RGB, TurboJPEG

from ._head import Head
from ._jpeg_markers import JpegHeader, ends_with_eoi, read_header, read_header_bytes
from ._planar import check_plane, exif_orientation, orient, orientation_warning, oriented_plane, planar_volume
from .reasons import Reason, Rejected
from .records import Limits, Plane, Volume

__all__ = ["JpegReader", "turbo_decodes"]

_TURBO_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})  # 8-bit sequential/progressive, Huffman or arithmetic
_PIXEL_FORMATS = {1: TJPF_GRAY, 3: TJPF_RGB, 4: TJPF_CMYK}


def turbo_decodes(header: JpegHeader) -> bool:
    """True when libjpeg-turbo 2.1 decodes this file itself (else the fallback decoder is needed)."""
    return header.sof in _TURBO_SOF and header.precision == 8


class JpegReader:
    """Reads JPEG files (JFIF, EXIF, Adobe, bare), whatever the file is named."""

    kind: ClassVar[str] = "jpeg"

    def sniff(self, head: bytes) -> bool:
        """SOI followed by another marker: FF D8 FF."""
        return head[:3] == b"\xff\xd8\xff"

    def plane(self, path: Path, head: Head) -> Plane:
        """(C, H, W) and dtype from the marker segments alone; raises `Rejected` on a broken header."""
        with path.open("rb") as f:
            header = read_header(f, head.size)
        return _plane(header)[0]

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Check header and caps, then decode the whole file; raise `Rejected` on any libjpeg complaint."""
        if head.size > limits.max_bytes:
            raise Rejected(Reason.TOO_LARGE,
                           f"file is {head.size:,} B, cap {limits.max_bytes:,} B ([validate] max_bytes)")
        data = path.read_bytes()
        header = read_header_bytes(data)
        plane, orientation = _plane(header)
        check_plane(plane, limits)
        if not ends_with_eoi(data, header):
            raise Rejected(Reason.TRUNCATED, f"no EOI marker after the first scan (byte {header.scan_offset:,}); the "
                                             f"file ends at byte {len(data):,}, inside the compressed data")
        hwc = _decode_turbo(data, header) if turbo_decodes(header) else _decode_fallback(data, header)
        warnings: tuple[str, ...] = ()
        if header.components == 4:
            hwc = _cmyk_to_rgb(hwc)
            kind = "YCCK" if header.adobe_transform == 2 else "CMYK"
            warnings += (f"{kind} converted to RGB (Adobe inverted-CMYK convention, no ICC profile, as Pillow)",)
        hwc = orient(hwc, orientation)
        if (hwc.shape[2], *hwc.shape[:2]) != plane.shape or hwc.dtype != np.dtype(plane.dtype):
            raise Rejected(Reason.CORRUPT_DATA, f"decoded {hwc.shape[2]}x{hwc.shape[0]}x{hwc.shape[1]} {hwc.dtype}, "
                                                f"the header announced {'x'.join(map(str, plane.shape))} {plane.dtype}")
        warnings += orientation_warning(orientation) + exif_orientation(header.exif)[1]
        return planar_volume(hwc, self.kind, warnings)


def _plane(header: JpegHeader) -> tuple[Plane, int]:
    if header.components == 4 and header.precision > 8:
        raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{header.precision}-bit CMYK JPEG; CMYK is read at 8 bits only")
    orientation, _ = exif_orientation(header.exif)
    dtype = "uint8" if header.precision <= 8 else "uint16"
    channels = 1 if header.components == 1 else 3
    return oriented_plane(channels, header.height, header.width, dtype, orientation), orientation


class _LibjpegError(Exception):
    def __init__(self, message: str, *, warning: bool) -> None:
        super().__init__(message)
        self.message, self.warning = message, warning


class _StrictTurboJPEG(TurboJPEG):  # type: ignore[misc]  # PyTurboJPEG ships no type hints
    """PyTurboJPEG, raising on libjpeg *warnings* too.

    PyTurboJPEG 1.x turns a libjpeg warning ("Premature end of JPEG file") into
    `warnings.warn` and returns the half-decoded buffer, and does the same with
    TJFLAG_STOPONWARNING (libjpeg-turbo still reports that stop as a warning).
    Both go through its private `__report_error`, overridden here (PyTurboJPEG
    is pinned <2): unlike `warnings.catch_warnings`, this is thread-safe.
    """

    def _TurboJPEG__report_error(self, handle: Any) -> None:  # noqa: N802 (the name-mangled hook)
        get_code = self._TurboJPEG__get_error_code
        warning = get_code is not None and get_code(handle) == TJERR_WARNING
        raise _LibjpegError(str(self._TurboJPEG__get_error_string(handle)), warning=warning)


@functools.cache
def _turbo() -> _StrictTurboJPEG:
    # One handle per process: it loads libturbojpeg once; decoding state lives in per-call tj handles.
    return _StrictTurboJPEG()


def _decode_turbo(data: bytes, header: JpegHeader) -> npt.NDArray[np.uint8]:
    try:
        # LIMITSCANS: a progressive file with thousands of tiny scans is a known denial-of-service; refuse it.
        out: npt.NDArray[np.uint8] = _turbo().decode(data, pixel_format=_PIXEL_FORMATS[header.components],
                                                     flags=TJFLAG_LIMITSCANS)
    except _LibjpegError as exc:
        msg = exc.message
        if "premature end" in msg.lower():  # of the file, or of a scan's data ("... of data segment")
            reason = Reason.TRUNCATED
        elif not exc.warning and msg.startswith("Unsupported"):
            reason = Reason.DECODER_MISSING
        else:
            reason = Reason.CORRUPT_DATA
        what = "warning (every libjpeg warning rejects the file)" if exc.warning else "error"
        raise Rejected(reason,
                       f"libjpeg-turbo {what}: {msg} ({header.process}, {header.width}x{header.height})") from exc
    return out


def _ycbcr(header: JpegHeader) -> bool:
    # libjpeg's own rule for three components (jdapimin.c default_decompress_parms).
    if header.adobe_transform is not None:
        return header.adobe_transform != 0
    if header.jfif:
        return True
    return header.component_ids != (82, 71, 66)  # "RGB" component IDs mean no transform


def _decode_fallback(data: bytes, header: JpegHeader) -> npt.NDArray[np.generic]:
    what = f"{header.precision}-bit {header.process} JPEG"
    try:
        import libjpeg  # pylibjpeg-libjpeg
    except ImportError as exc:
        raise Rejected(Reason.DECODER_MISSING, f"{what}: libjpeg-turbo 2.1 decodes only 8-bit non-lossless JPEG and "
                                               "the fallback decoder is not installed "
                                               "(pip install pylibjpeg-libjpeg)") from exc
    transform = 1 if header.components == 3 and _ycbcr(header) else 0
    try:
        out = libjpeg.decode(data, colour_transform=transform)  # type: ignore[attr-defined]
    except (RuntimeError, ValueError) as exc:
        raise Rejected(Reason.CORRUPT_DATA, f"{what}: pylibjpeg-libjpeg: {exc}") from exc
    out = np.asarray(out)
    if out.ndim == 2:
        out = out[:, :, np.newaxis]
    want = np.uint8 if header.precision <= 8 else np.uint16
    if out.dtype != want:
        out = out.astype(want)
    return out


def _cmyk_to_rgb(hwc: npt.NDArray[np.generic]) -> npt.NDArray[np.uint8]:
    h, w, _ = hwc.shape
    image = Image.frombuffer("CMYK", (w, h), np.ascontiguousarray(hwc, dtype=np.uint8), "raw", "CMYK;I", 0, 1)
    return np.asarray(image.convert("RGB"))
