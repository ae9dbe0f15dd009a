"""2D bad inputs (JPEG, PNG, TIFF): truncated at several points, flipped bytes, missing trailer, bad header
fields, pixel bombs; and 2D items the same delivery must store exactly."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from labzarr.readers import Reason

from ..imaging import turbo_decode
from ._util import jpeg, put


def _png(seed: int, shape: tuple[int, ...] = (16, 16, 3)) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _tiff(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
        buf, format="TIFF", compression="tiff_deflate")
    return buf.getvalue()


def _flip(blob: bytes, at: int) -> bytes:
    b = bytearray(blob)
    b[at] ^= 0xFF
    return bytes(b)


def cut(make, frac: float, name: str = "scan.jpg"):
    def build(raw: Path, slot: str, seed: int) -> str:
        blob = make(seed)
        return put(raw, f"{slot}/{name}", blob[: int(len(blob) * frac)])
    return build


def edit(make, change, name: str = "scan.jpg"):
    def build(raw: Path, slot: str, seed: int) -> str:
        return put(raw, f"{slot}/{name}", change(make(seed)))
    return build


def _rgb_jpeg(seed: int) -> bytes:
    return jpeg(seed, (32, 40, 3))


def _jpeg_sof_dims(blob: bytes, height: int, width: int) -> bytes:
    at = blob.find(b"\xff\xc0")
    return blob[: at + 5] + struct.pack(">HH", height, width) + blob[at + 9 :]


def _png_ihdr(blob: bytes, width: int, height: int) -> bytes:
    """A PNG whose IHDR says `width` x `height`, with a correct CRC: only the size is a lie."""
    ihdr = b"IHDR" + struct.pack(">II", width, height) + blob[24:29]
    return blob[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + blob[33:]


PLANAR = [
    pytest.param(cut(_rgb_jpeg, 0.1), Reason.TRUNCATED, id="jpeg-cut-10pct"),
    pytest.param(cut(_rgb_jpeg, 0.5), Reason.TRUNCATED, id="jpeg-cut-50pct"),
    pytest.param(cut(_rgb_jpeg, 0.9), Reason.TRUNCATED, id="jpeg-cut-90pct"),
    pytest.param(cut(_rgb_jpeg, 0.99), Reason.TRUNCATED, id="jpeg-cut-99pct"),
    pytest.param(edit(_rgb_jpeg, lambda b: b[:-2]), Reason.TRUNCATED, id="jpeg-no-eoi"),
    pytest.param(edit(_rgb_jpeg, lambda b: b[: b.find(b"\xff\xc0")]), Reason.TRUNCATED, id="jpeg-cut-before-sof"),
    pytest.param(edit(_rgb_jpeg, lambda b: _flip(b, len(b) // 2)), Reason.CORRUPT_DATA, id="jpeg-flipped-byte"),
    pytest.param(edit(_rgb_jpeg, lambda b: _flip(b, b.find(b"\xff\xda") + 5)), Reason.CORRUPT_DATA,
                 id="jpeg-bad-sos-component"),
    pytest.param(edit(_rgb_jpeg, lambda b: b[: b.find(b"\xff\xc0")] + b[b.find(b"\xff\xda") :]), Reason.BAD_HEADER,
                 id="jpeg-no-frame-header"),
    pytest.param(edit(_rgb_jpeg, lambda b: _jpeg_sof_dims(b, 32, 0)), Reason.BAD_HEADER, id="jpeg-zero-width"),
    pytest.param(edit(_rgb_jpeg, lambda b: _jpeg_sof_dims(b, 60000, 60000)), Reason.TOO_LARGE,
                 id="jpeg-pixel-bomb-60000x60000"),
    pytest.param(cut(_png, 0.5, "scan.png"), Reason.TRUNCATED, id="png-cut-50pct"),
    pytest.param(edit(_png, lambda b: b[:-12], "scan.png"), Reason.TRUNCATED, id="png-no-iend"),
    pytest.param(edit(_png, lambda b: _flip(b, len(b) // 2), "scan.png"), Reason.CORRUPT_DATA,
                 id="png-flipped-idat-byte"),
    pytest.param(edit(_png, lambda b: _flip(b, 29), "scan.png"), Reason.BAD_HEADER, id="png-bad-ihdr-crc"),
    pytest.param(edit(_png, lambda b: _png_ihdr(b, 60000, 60000), "scan.png"), Reason.TOO_LARGE,
                 id="png-pixel-bomb-60000x60000"),
    pytest.param(cut(_tiff, 0.5, "scan.tif"), Reason.TRUNCATED, id="tiff-cut-50pct"),
    pytest.param(edit(_tiff, lambda b: _flip(b, len(b) // 2), "scan.tif"), Reason.CORRUPT_DATA,
                 id="tiff-flipped-byte"),
]


def _good(rel: str, blob) -> object:
    def build(raw: Path) -> str:
        return put(raw, rel, blob())
    return build


def _turbo(raw: Path, source: str) -> np.ndarray:
    return turbo_decode((raw / source).read_bytes())


def _pillow(raw: Path, source: str) -> np.ndarray:
    data = np.asarray(Image.open(raw / source))
    return data[np.newaxis] if data.ndim == 2 else np.moveaxis(data, 2, 0)


PLANAR_GOOD = [
    (_good("good_030/rgb.jpg", lambda: jpeg(930, (32, 40, 3))), _turbo),
    (_good("good_031/grey.jpeg", lambda: jpeg(931, (32, 40, 1))), _turbo),
    (_good("good_032/photo.jpg", lambda: _png(932)), _pillow),  # a PNG named .jpg: read as PNG, with a warning
    (_good("good_033/slide.tif", lambda: _tiff(933)), _pillow),
    (_good("good_034/mask.png", lambda: _png(934, (16, 16))), _pillow),
]
