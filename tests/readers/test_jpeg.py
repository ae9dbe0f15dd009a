from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image
from turbojpeg import TJSAMP_444

from labzarr.readers import JpegReader, Limits, Reason, Rejected, read_head, reader_for

from ..imaging import (
    PYDICOM_DATA,
    dicom_jpeg,
    jpegtran,
    mr_slices,
    pillow_decode,
    pillow_image,
    turbo_decode,
    turbo_jpeg,
)


def read(path: Path, limits: Limits = Limits()):
    head = read_head(path)
    reader = reader_for(head.data)
    assert isinstance(reader, JpegReader), f"{path.name} not sniffed as JPEG"
    return reader.read(path, limits, head)


def write(tmp: Path, data: bytes, name: str = "x.jpg") -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def baseline() -> bytes:
    return turbo_jpeg(mr_slices(75, 101))


def progressive() -> bytes:
    return pillow_image(mr_slices(80, 96, seed=1), "JPEG", quality=92, progressive=True)


# name -> the JPEG's bytes; every one decodes, equals PyTurboJPEG exactly and Pillow within 2 levels.
GOOD: dict[str, Callable[[], bytes]] = {
    "baseline-420-odd-size": baseline,
    "baseline-444": lambda: turbo_jpeg(mr_slices(64, 48, seed=2), subsample=TJSAMP_444),
    "greyscale": lambda: turbo_jpeg(mr_slices(40, 56, channels=1, seed=3)),
    "progressive": progressive,
    "arithmetic": lambda: jpegtran(baseline(), "-arithmetic"),
    "arithmetic-progressive": lambda: jpegtran(baseline(), "-arithmetic", "-progressive"),
    "restart-markers": lambda: jpegtran(baseline(), "-restart", "1"),
    "dcmtk-ybr": lambda: dicom_jpeg("SC_rgb_jpeg_dcmtk.dcm"),
    "rgb-no-colour-transform": lambda: dicom_jpeg("SC_jpeg_no_color_transform.dcm"),
    "adobe-app14-rgb": lambda: dicom_jpeg("SC_rgb_jpeg_app14_dcmd.dcm"),
    "gdcm-lossy": lambda: dicom_jpeg("SC_rgb_jpeg_lossy_gdcm.dcm"),
    "3x3-odd": lambda: dicom_jpeg("SC_rgb_small_odd_jpeg.dcm"),
}


@pytest.mark.parametrize("name", GOOD)
def test_pixels_equal_turbojpeg_and_pillow(tmp_path: Path, name: str) -> None:
    data = GOOD[name]()
    path = write(tmp_path, data)
    vol = read(path)
    want = turbo_decode(data)
    np.testing.assert_array_equal(vol.data, want)
    assert vol.data.dtype == np.uint8 and vol.data.flags.c_contiguous
    diff = np.abs(vol.data.astype(np.int16) - pillow_decode(data).astype(np.int16))
    assert diff.max() <= 2, f"Pillow differs by {diff.max()} levels"  # different IDCT/upsampling builds
    plane = JpegReader().plane(path, read_head(path))
    assert (plane.shape, plane.dtype) == (vol.data.shape, "uint8")
    assert vol.warnings == ()


def test_greyscale_stays_one_channel_cmyk_becomes_rgb(tmp_path: Path) -> None:
    grey = read(write(tmp_path, GOOD["greyscale"](), "g.jpg"))
    assert grey.data.shape == (1, 40, 56)
    cmyk = pillow_image(mr_slices(48, 64, seed=4), "JPEG", mode="CMYK", quality=95)
    vol = read(write(tmp_path, cmyk, "c.jpg"))
    assert vol.data.shape == (3, 48, 64)
    diff = np.abs(vol.data.astype(np.int16) - pillow_decode(cmyk).astype(np.int16))
    assert diff.max() <= 2
    assert any("CMYK converted to RGB" in w for w in vol.warnings)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_applied_and_recorded(tmp_path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = pillow_image(mr_slices(30, 50, seed=orientation), "JPEG", quality=95, exif=exif.tobytes())
    path = write(tmp_path, data)
    vol = read(path)
    want = pillow_decode(data, transpose_exif=True)
    assert vol.data.shape == want.shape == ((3, 50, 30) if orientation >= 5 else (3, 30, 50))
    assert np.abs(vol.data.astype(np.int16) - want.astype(np.int16)).max() <= 2
    assert JpegReader().plane(path, read_head(path)).shape == vol.data.shape
    if orientation == 1:
        assert vol.warnings == ()
    else:
        assert len(vol.warnings) == 1 and vol.warnings[0].startswith(f"EXIF orientation {orientation} applied (")


def test_12bit_goes_to_the_fallback_decoder(tmp_path: Path) -> None:
    vol = read(write(tmp_path, dicom_jpeg("JPGExtended.dcm")))
    want = pydicom.dcmread(PYDICOM_DATA / "JPGExtended.dcm").pixel_array
    assert vol.data.dtype == np.uint16 and vol.data.shape == (1, *want.shape)
    np.testing.assert_array_equal(vol.data[0], want)
    assert 0 < vol.data.max() < 4096


def test_lossless_equals_pillow_exactly(tmp_path: Path) -> None:
    data = dicom_jpeg("SC_rgb_jpeg_gdcm.dcm")  # SOF3: libjpeg-turbo 2.1 cannot, Pillow's bundled 3.x can
    vol = read(write(tmp_path, data))
    np.testing.assert_array_equal(vol.data, pillow_decode(data))


def test_decoder_missing_without_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, dicom_jpeg("JPGExtended.dcm"))
    monkeypatch.setitem(sys.modules, "libjpeg", None)  # a deployment without pylibjpeg-libjpeg
    with pytest.raises(Rejected) as info:
        read(path)
    assert info.value.reason is Reason.DECODER_MISSING
    assert "12-bit extended sequential" in info.value.detail and "pylibjpeg-libjpeg" in info.value.detail


def _cut(build: Callable[[], bytes], frac: float) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        data = build()
        return write(tmp, data[: int(len(data) * frac)])
    return make


def _bytes(build: Callable[[], bytes]) -> Callable[[Path], Path]:
    return lambda tmp: write(tmp, build())


def _with_sof(width: int, height: int) -> bytes:
    data = bytearray(baseline())
    at = data.find(b"\xff\xc0")
    data[at + 5 : at + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def _scan_cut_eoi_kept() -> bytes:
    data = baseline()
    return data[: int(len(data) * 0.6)] + b"\xff\xd9"


def _wrong_restart_marker() -> bytes:
    data = bytearray(jpegtran(baseline(), "-restart", "1"))
    at = data.find(b"\xff\xd1", data.find(b"\xff\xda"))  # RST1 becomes RST5: the decoder resyncs and warns
    data[at + 1] = 0xD5
    return bytes(data)


def _sos_before_sof() -> bytes:
    data = baseline()
    sof, sos = data.find(b"\xff\xc0"), data.find(b"\xff\xda")
    length = int.from_bytes(data[sof + 2 : sof + 4], "big")
    return data[:sof] + data[sof + 2 + length : sos] + data[sos:]


BAD = [
    *(pytest.param(_cut(baseline, f), Reason.TRUNCATED, id=f"baseline-cut-{int(f * 100)}pct")
      for f in (0.1, 0.5, 0.9, 0.99)),
    *(pytest.param(_cut(progressive, f), Reason.TRUNCATED, id=f"progressive-cut-{int(f * 100)}pct")
      for f in (0.1, 0.5, 0.9, 0.99)),
    pytest.param(_cut(lambda: jpegtran(baseline(), "-arithmetic"), 0.5), Reason.TRUNCATED, id="arithmetic-cut-50pct"),
    pytest.param(_cut(lambda: dicom_jpeg("JPGExtended.dcm"), 0.5), Reason.TRUNCATED, id="12bit-cut-50pct"),
    pytest.param(_cut(lambda: dicom_jpeg("SC_rgb_jpeg_gdcm.dcm"), 0.9), Reason.TRUNCATED, id="lossless-cut-90pct"),
    pytest.param(_bytes(_scan_cut_eoi_kept), Reason.TRUNCATED, id="scan-cut-eoi-kept"),
    pytest.param(_bytes(_wrong_restart_marker), Reason.CORRUPT_DATA, id="wrong-restart-marker-warning"),
    pytest.param(_bytes(lambda: dicom_jpeg("JPEG-lossy.dcm")), Reason.CORRUPT_DATA, id="12bit-bad-scan-header"),
    pytest.param(_bytes(lambda: b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9"),
                 Reason.CORRUPT_DATA, id="no-frame-no-scan"),
    pytest.param(_bytes(_sos_before_sof), Reason.BAD_HEADER, id="scan-before-frame"),
    pytest.param(_bytes(lambda: _with_sof(60000, 60000)), Reason.TOO_LARGE, id="bomb-60000x60000"),
    pytest.param(_bytes(lambda: _with_sof(101, 0)), Reason.UNSUPPORTED_FORMAT, id="dnl-height-0"),
]


@pytest.mark.parametrize(("build", "reason"), BAD)
def test_bad_jpeg_rejected_with_reason(tmp_path: Path, build: Callable[[Path], Path], reason: Reason) -> None:
    path = build(tmp_path)
    with pytest.raises(Rejected) as info:
        read(path)
    assert info.value.reason is reason, info.value.detail
    assert info.value.detail


def test_libjpeg_message_in_detail(tmp_path: Path) -> None:
    with pytest.raises(Rejected) as info:
        read(write(tmp_path, _wrong_restart_marker()))
    assert "libjpeg-turbo warning" in info.value.detail
    assert "Corrupt JPEG data: found marker 0xd5 instead of RST1" in info.value.detail
    with pytest.raises(Rejected) as info:
        read(write(tmp_path, _scan_cut_eoi_kept()))
    assert "premature end of data segment" in info.value.detail


def test_pixel_cap_checked_on_the_header_first(tmp_path: Path) -> None:
    bomb = _with_sof(60000, 60000)
    path = write(tmp_path, bomb[: bomb.find(b"\xff\xda") + 20])  # the header and 20 B of scan data: nothing else
    with pytest.raises(Rejected) as info:
        read(path)
    assert info.value.reason is Reason.TOO_LARGE
    assert "60,000x60,000 = 3,600,000,000 pixels, cap 178,956,970" in info.value.detail
    with pytest.raises(Rejected, match=r"101x75 = 7,575 pixels, cap 7,000 \(\[validate\] max_pixels\)"):
        read(write(tmp_path, baseline(), "ok.jpg"), Limits(max_pixels=7000))
