from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from labzarr.readers import Limits, PngReader, Reason, Rejected, TiffReader, read_head, reader_for

from ..imaging import mr_slices, pillow_image


def read(path: Path, limits: Limits = Limits()):
    head = read_head(path)
    reader = reader_for(head.data)
    assert isinstance(reader, PngReader | TiffReader), f"{path.name} not sniffed as PNG/TIFF"
    return reader.read(path, limits, head)


def write(tmp: Path, data: bytes, name: str) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


GREY16 = (mr_slices(33, 47, channels=1, seed=5)[:, :, 0].astype(np.uint16) * 257 + 3)
RGB = mr_slices(40, 30, seed=6)
RGBA = np.concatenate([RGB, mr_slices(40, 30, channels=1, seed=7)], axis=2)
FLOAT = mr_slices(20, 25, channels=1, seed=8)[:, :, 0].astype(np.float32) / 7.0

# (name, bytes, expected (C, H, W) data): PNG and TIFF store these exactly.
EXACT = [
    ("rgb.png", lambda: pillow_image(RGB, "PNG"), np.moveaxis(RGB, 2, 0)),
    ("rgba.png", lambda: pillow_image(RGBA, "PNG"), np.moveaxis(RGBA, 2, 0)),
    ("grey16.png", lambda: pillow_image(GREY16[:, :, None], "PNG"), GREY16[None]),
    ("rgb-deflate.tif", lambda: pillow_image(RGB, "TIFF", compression="tiff_deflate"), np.moveaxis(RGB, 2, 0)),
    ("grey16.tif", lambda: pillow_image(GREY16[:, :, None], "TIFF"), GREY16[None]),
    ("float32-lzw.tif", lambda: pillow_image(FLOAT[:, :, None], "TIFF", compression="tiff_lzw"), FLOAT[None]),
    ("png-named.jpg", lambda: pillow_image(RGB, "PNG"), np.moveaxis(RGB, 2, 0)),
]


@pytest.mark.parametrize(("name", "build", "want"), EXACT, ids=[e[0] for e in EXACT])
def test_lossless_formats_store_exact_pixels(tmp_path: Path, name: str, build: Callable[[], bytes],
                                             want: np.ndarray) -> None:
    path = write(tmp_path, build(), name)
    vol = read(path)
    assert vol.data.dtype == want.dtype and vol.data.dtype.isnative
    np.testing.assert_array_equal(vol.data, want)
    head = read_head(path)
    plane = reader_for(head.data).plane(path, head)
    assert (plane.shape, plane.dtype) == (want.shape, want.dtype.name)


def test_palette_with_transparency_becomes_rgba(tmp_path: Path) -> None:
    image = Image.fromarray(RGB).quantize(colors=16)
    image.info["transparency"] = 0
    path = tmp_path / "p.png"
    image.save(path, transparency=0)
    vol = read(path)
    want = np.moveaxis(np.asarray(Image.open(path).convert("RGBA")), 2, 0)
    np.testing.assert_array_equal(vol.data, want)


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_label_maps_read_as_classes(tmp_path: Path, fmt: str) -> None:
    classes = (mr_slices(40, 30, channels=1, seed=9)[:, :, 0] // 64).astype(np.uint8)  # 0..3
    palette = Image.fromarray(classes, mode="P")
    palette.putpalette([0, 0, 0, 200, 0, 0, 0, 200, 0, 0, 0, 200] + [0] * (256 * 3 - 12))
    palette.save(tmp_path / f"p.{fmt}", fmt)
    Image.fromarray(classes > 1).save(tmp_path / f"b.{fmt}", fmt)  # bilevel
    Image.fromarray(RGB).save(tmp_path / f"rgb.{fmt}", fmt)
    reader = PngReader() if fmt == "PNG" else TiffReader()

    def labels(name: str) -> np.ndarray:
        path = tmp_path / f"{name}.{fmt}"
        return reader.read_labels(path, Limits(), read_head(path)).data

    np.testing.assert_array_equal(labels("p"), classes[None])  # the palette's indices, not its colours
    assert read(tmp_path / f"p.{fmt}").data.shape == (3, 40, 30)  # as an image: the colours
    np.testing.assert_array_equal(labels("b"), (classes > 1)[None].astype(np.uint8))  # 0/1, where `read` gives 0/255
    np.testing.assert_array_equal(read(tmp_path / f"b.{fmt}").data, (classes > 1)[None].astype(np.uint8) * 255)
    np.testing.assert_array_equal(labels("rgb"), np.moveaxis(RGB, 2, 0))  # other modes as `read`


def test_tiff_orientation_tag_applied(tmp_path: Path) -> None:
    path = tmp_path / "o.tif"
    Image.fromarray(RGB).save(path, tiffinfo={274: 6})  # 274 = Orientation: rotate 90 degrees clockwise
    vol = read(path)
    np.testing.assert_array_equal(vol.data, np.moveaxis(np.rot90(RGB, -1), 2, 0))
    assert vol.warnings == ("EXIF orientation 6 applied (rotated 90° clockwise)",)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png16(colour_type: int, channels: int) -> bytes:
    rows = (np.arange(4 * 5 * channels) * 1000).astype(">u2").reshape(4, 5 * channels)  # PNG is big-endian
    raw = b"".join(b"\x00" + r.tobytes() for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 5, 4, 16, colour_type, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(raw)) + _png_chunk(b"IEND", b""))


def _cut(build: Callable[[], bytes], frac: float, name: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        data = build()
        return write(tmp, data[: int(len(data) * frac)], name)
    return make


def _flipped_idat(tmp: Path) -> Path:
    data = bytearray(pillow_image(RGB, "PNG"))
    data[data.find(b"IDAT") + 40] ^= 0xFF
    return write(tmp, bytes(data), "flip.png")


def _bytes(build: Callable[[], bytes], name: str) -> Callable[[Path], Path]:
    return lambda tmp: write(tmp, build(), name)


def _png() -> bytes:
    return pillow_image(RGB, "PNG")


def _tiff() -> bytes:
    return pillow_image(RGB, "TIFF", compression="tiff_deflate")


def _raw_tiff() -> bytes:
    return pillow_image(RGB, "TIFF")


BAD = [
    *(pytest.param(_cut(_png, f, "a.png"), Reason.TRUNCATED, id=f"png-cut-{int(f * 100)}pct")
      for f in (0.1, 0.5, 0.9, 0.99)),
    *(pytest.param(_cut(_tiff, f, "a.tif"), Reason.TRUNCATED, id=f"tiff-deflate-cut-{int(f * 100)}pct")
      for f in (0.1, 0.5, 0.9, 0.99)),
    pytest.param(_cut(_raw_tiff, 0.5, "r.tif"), Reason.TRUNCATED, id="tiff-raw-cut-50pct"),
    pytest.param(_flipped_idat, Reason.CORRUPT_DATA, id="png-idat-crc"),
    pytest.param(_bytes(lambda: _png16(2, 3), "rgb16.png"), Reason.DECODER_MISSING, id="png-16bit-rgb"),
    pytest.param(_bytes(lambda: _png16(6, 4), "rgba16.png"), Reason.DECODER_MISSING, id="png-16bit-rgba"),
    pytest.param(_bytes(lambda: pillow_image(RGB, "TIFF", save_all=True, append_images=[Image.fromarray(RGB)]),
                        "stack.tif"), Reason.UNSUPPORTED_FORMAT, id="tiff-two-pages"),
]


@pytest.mark.parametrize(("build", "reason"), BAD)
def test_bad_png_tiff_rejected_with_reason(tmp_path: Path, build: Callable[[Path], Path], reason: Reason) -> None:
    with pytest.raises(Rejected) as info:
        read(build(tmp_path))
    assert info.value.reason is reason, info.value.detail
    assert info.value.detail


def test_16bit_grey_png_is_not_narrowed_but_rgb_is_refused(tmp_path: Path) -> None:
    vol = read(write(tmp_path, _png16(0, 1), "g16.png"))  # 16-bit grey: Pillow's I;16 keeps every bit
    np.testing.assert_array_equal(vol.data, (np.arange(20, dtype=np.uint16) * 1000).reshape(1, 4, 5))
    with pytest.raises(Rejected, match="16-bit RGB PNG: Pillow would decode it to 8 bits"):
        read(write(tmp_path, _png16(2, 3), "c16.png"))


def test_pixel_cap_before_decoding(tmp_path: Path) -> None:
    path = write(tmp_path, _png(), "a.png")
    with pytest.raises(Rejected, match=r"30x40 = 1,200 pixels, cap 1,000"):
        read(path, Limits(max_pixels=1000))
