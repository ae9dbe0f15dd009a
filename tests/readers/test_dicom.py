"""The DICOM reader on pydicom's and nibabel's shipped files: sniffing, headers, decoding, corruptions."""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.pixels import apply_modality_lut

from labzarr.readers import DicomReader, Limits, Reason, Rejected, read_dicom_header, read_head, reader_for

from ..dicom_data import (
    CT5N,
    DICOMDIR_TESTS,
    NICOM_DATA,
    PYDICOM_DATA,
    copy_files,
    read,
    with_syntax,
    without_preamble,
    write,
)


def load(path: Path, limits: Limits = Limits()):
    head = read_head(path)
    reader = reader_for(head.data)
    assert isinstance(reader, DicomReader), f"{path.name} not sniffed as DICOM"
    return reader.read(path, limits, head)


def _write(tmp: Path, data: bytes, name: str = "x.dcm") -> Path:
    (tmp / name).write_bytes(data)
    return tmp / name


SNIFF = [
    pytest.param(lambda tmp: PYDICOM_DATA / "CT_small.dcm", True, id="preamble-and-DICM"),
    pytest.param(lambda tmp: without_preamble(PYDICOM_DATA / "CT_small.dcm", tmp / "x"), True,
                 id="no-preamble-implicit"),
    pytest.param(lambda tmp: PYDICOM_DATA / "ExplVR_LitEndNoMeta.dcm", True, id="no-preamble-explicit-le"),
    pytest.param(lambda tmp: PYDICOM_DATA / "ExplVR_BigEndNoMeta.dcm", True, id="no-preamble-explicit-be"),
    pytest.param(lambda tmp: PYDICOM_DATA / "rtstruct.dcm", True, id="no-preamble-rtstruct"),
    pytest.param(lambda tmp: NICOM_DATA / "siemens_dwi_0.dcm.gz", True, id="gzipped-dicom"),
    pytest.param(lambda tmp: copy_files(tmp, [NICOM_DATA / "0.dcm"])[0], True, id="analyze-header-in-preamble"),
    # pydicom's no_meta.dcm starts with a stray byte before its first element: not a DICOM stream.
    pytest.param(lambda tmp: PYDICOM_DATA / "no_meta.dcm", False, id="stray-leading-byte"),
    pytest.param(lambda tmp: _write(tmp, b""), False, id="empty"),
    pytest.param(lambda tmp: _write(tmp, b"Patient list\nCASE-1, CT\n" * 40), False, id="text"),
    pytest.param(lambda tmp: _write(tmp, bytes(range(256)) * 4), False, id="junk-bytes"),
    pytest.param(lambda tmp: _write(tmp, b"\x00" * 1024), False, id="zeros"),
    pytest.param(lambda tmp: _write(tmp, b"\xff\xd8\xff\xe0\x00\x10JFIF" + b"\x00" * 500), False, id="jpeg"),
    pytest.param(lambda tmp: _write(tmp, (Path(__import__("nibabel").__file__).parent / "tests/data/anatomical.nii")
                                    .read_bytes()), False, id="nifti"),
    # group 0008 first, but the second element is a tag no dictionary knows: force=True would accept it
    pytest.param(lambda tmp: _write(tmp, b"\x08\x00\x05\x00CS\x0a\x00ISO_IR 100\x08\x00\x11\x99CS\x02\x00AB"
                                         b"\x08\x00\x12\x99CS\x02\x00AB" + b"\x00" * 64), False, id="unknown-tags"),
]


@pytest.mark.parametrize(("build", "expected"), SNIFF)
def test_sniffing(tmp_path: Path, build: Callable[[Path], Path], expected: bool) -> None:
    head = read_head(build(tmp_path))
    assert DicomReader().sniff(head.data) is expected
    if expected:
        assert isinstance(reader_for(head.data), DicomReader)


def test_header_record_of_a_ct_slice() -> None:
    path = PYDICOM_DATA / "CT_small.dcm"
    h = read_dicom_header(path, read_head(path))
    ds = pydicom.dcmread(path)
    assert (h.modality, h.sop_class_name, h.rows, h.columns, h.signed, h.bits_stored) == ("CT", "CT Image Storage",
                                                                                          128, 128, True, 16)
    assert h.series_uid == ds.SeriesInstanceUID and h.sop_instance == ds.SOPInstanceUID
    (frame,) = h.frames
    assert frame.position == tuple(float(v) for v in ds.ImagePositionPatient)
    assert (frame.slope, frame.intercept) == (1.0, -1024.0)
    assert h.spatial and h.defect is None and len(h.pixel_hash) == 32


@pytest.mark.parametrize(("name", "sop"), [("test-SR.dcm", "Comprehensive SR Storage"),
                                           ("rtplan.dcm", "RT Plan Storage"),
                                           ("dicomdirtests/DICOMDIR", "Media Storage Directory Storage"),
                                           ("waveform_ecg.dcm", "12-lead ECG Waveform Storage")])
def test_non_image_objects_have_no_frames_and_name_their_sop_class(name: str, sop: str) -> None:
    path = PYDICOM_DATA / name
    h = read_dicom_header(path, read_head(path))
    assert not h.has_pixels and h.sop_class_name == sop
    with pytest.raises(Rejected, match=sop):
        load(path)


def test_ct_slice_values_are_modality_lut_and_canonical() -> None:
    path = PYDICOM_DATA / "CT_small.dcm"
    vol = load(path)
    ds = pydicom.dcmread(path)
    expected = apply_modality_lut(ds.pixel_array, ds)  # (rows, cols) in HU
    # canonical RAS from an LPS axial slice: both in-plane axes flip; x = columns, y = rows
    np.testing.assert_array_equal(vol.data[0, :, :, 0], expected.T[::-1, ::-1])
    assert vol.data.dtype == np.int32  # 16 bits stored, signed, intercept -1024: int16 cannot hold every value
    assert vol.orientation == "LPS"


def _dataset(path: Path) -> pydicom.Dataset | None:
    """The dataset of a shipped file (nibabel's are gzipped), or None when it is no DICOM stream pydicom reads."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return pydicom.dcmread(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - a shipped file that is not DICOM (a dump, a JSON, an ICC profile) is skipped
        return None


def _rescaled_files() -> list[Path]:
    """Every shipped DICOM file (pydicom's and nibabel's) whose header carries a RescaleSlope or RescaleIntercept."""
    out = []
    for path in sorted([*PYDICOM_DATA.rglob("*"), *NICOM_DATA.rglob("*")]):
        if path.is_file() and (ds := _dataset(path)) is not None and (
                "RescaleSlope" in ds or "RescaleIntercept" in ds) and "PixelData" in ds:
            out.append(path)
    return out


RESCALED = _rescaled_files()


@pytest.mark.parametrize("path", RESCALED, ids=[p.name for p in RESCALED])
def test_a_rescaled_file_is_stored_as_integers_exactly_when_its_rescale_is_integral(path: Path) -> None:
    """An integer slope and intercept give an integer dtype holding every value the stored bits allow (CT's
    intercept of -1024 too, written "-1024" or "-1024.0"); a fractional one float32. Values are pydicom's."""
    ds = _dataset(path)
    assert ds is not None
    slope, intercept = float(ds.get("RescaleSlope", 1)), float(ds.get("RescaleIntercept", 0))
    vol = load(path)
    want = np.asarray(apply_modality_lut(ds.pixel_array, ds))
    integral = slope.is_integer() and intercept.is_integer()
    assert (vol.data.dtype.kind in "iu") == integral, (vol.data.dtype, slope, intercept)
    got = np.sort(vol.data.ravel())  # the same values, whatever the canonical reorientation did to their order
    if integral:
        bits = int(ds.BitsStored)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if ds.PixelRepresentation else (0, (1 << bits) - 1)
        info, ends = np.iinfo(vol.data.dtype), (lo * slope + intercept, hi * slope + intercept)
        assert info.min <= min(ends) and max(ends) <= info.max
        np.testing.assert_array_equal(got, np.sort(want.ravel()))
    else:
        assert vol.data.dtype == np.float32
        np.testing.assert_allclose(got, np.sort(want.ravel().astype(np.float32)), rtol=1e-6)


def test_integral_rescale_values_written_as_decimals_keep_integers(tmp_path: Path) -> None:
    """RescaleIntercept "-1024.000" and RescaleSlope "1.0" are integers: the series is stored as integers."""
    ds = read(CT5N[0])
    ds.RescaleSlope, ds.RescaleIntercept = "1.0", "-1024.000"
    vol = load(write(ds, tmp_path / "x.dcm"))
    assert vol.data.dtype.kind == "i"
    np.testing.assert_array_equal(np.sort(vol.data.ravel()), np.sort(ds.pixel_array.ravel().astype(np.int64) - 1024))


LOSSLESS = [  # (variant, twin): different encodings of the same pixels
    *[(f"MR_small_{v}.dcm", "MR_small.dcm") for v in ("RLE", "bigendian", "expb", "implicit", "jp2klossless",
                                                     "jpeg_ls_lossless", "padded")],
    ("zipMR.gz", "MR_small.dcm"),
    ("rtdose_rle.dcm", "rtdose.dcm"), ("rtdose_expb.dcm", "rtdose.dcm"),
    ("rtdose_rle_1frame.dcm", "rtdose_1frame.dcm"),
    ("SC_rgb_jpeg_gdcm.dcm", "SC_rgb_rle.dcm"),  # JPEG lossless (process 14) vs RLE
    ("SC_rgb_gdcm_KY.dcm", "SC_rgb_rle.dcm"),  # JPEG 2000, reversible wavelet
    ("SC_rgb_small_odd_big_endian.dcm", "SC_rgb_small_odd.dcm"),
    ("image_dfl.dcm", None),  # deflated transfer syntax: checked against pydicom's own read below
]


@pytest.mark.parametrize(("variant", "twin"), LOSSLESS, ids=[v for v, _ in LOSSLESS])
def test_lossless_variants_decode_to_their_twins_pixels(variant: str, twin: str | None) -> None:
    got = load(PYDICOM_DATA / variant)
    if twin is None:
        ds = pydicom.dcmread(PYDICOM_DATA / variant)
        np.testing.assert_array_equal(got.data[0], ds.pixel_array)
        return
    want = load(PYDICOM_DATA / twin)
    assert got.data.shape == want.data.shape
    np.testing.assert_array_equal(got.data, want.data)
    assert got.affine == want.affine


# Lossy encodings can only be held to what their encoder promises. JPEG-LS near-lossless bounds every pixel by its
# NEAR parameter (2 in these files); JPEG baseline bounds nothing per pixel, so the floor is a PSNR: 45 dB for
# full-resolution colour, 28 dB where dcmtk/gdcm subsampled the chroma (sharp colour edges in these test images).
LOSSY = [
    ("SC_rgb_jls_lossy_line.dcm", "max", 2), ("SC_rgb_jls_lossy_sample.dcm", "max", 2),
    ("SC_rgb_dcmtk_+eb+cr.dcm", "psnr", 45), ("SC_rgb_dcmtk_+eb+cy+n2.dcm", "psnr", 45),
    ("SC_rgb_dcmtk_+eb+cy+s2.dcm", "psnr", 45), ("SC_rgb_dcmtk_+eb+cy+s4.dcm", "psnr", 45),
    ("SC_rgb_jpeg_dcmtk.dcm", "psnr", 45), ("SC_ybr_full_422_uncompressed.dcm", "psnr", 45),
    ("SC_rgb_dcmtk_+eb+cy+n1.dcm", "psnr", 28), ("SC_rgb_dcmtk_+eb+cy+np.dcm", "psnr", 28),
    ("SC_rgb_jpeg_lossy_gdcm.dcm", "psnr", 28),
]


@pytest.mark.parametrize(("variant", "measure", "bound"), LOSSY, ids=[v for v, _, _ in LOSSY])
def test_lossy_variants_within_their_tolerance(variant: str, measure: str, bound: float) -> None:
    got = load(PYDICOM_DATA / variant).data.astype(np.float64)
    want = load(PYDICOM_DATA / "SC_rgb_rle.dcm").data.astype(np.float64)
    assert got.shape == want.shape == (3, 100, 100)
    if measure == "max":
        assert np.abs(got - want).max() <= bound
    else:
        mse = float(((got - want) ** 2).mean())
        assert 10 * np.log10(255**2 / mse) >= bound


# The RLE files at 16 and 32 bits hold SC_rgb_rle.dcm's image scaled to the full range (x 257, x 16843009).
@pytest.mark.parametrize(("variant", "scale"), [("SC_rgb_rle_16bit.dcm", 257), ("SC_rgb_rle_32bit.dcm", 16843009)])
def test_rle_bit_depths_are_the_8_bit_image_scaled(variant: str, scale: int) -> None:
    got = load(PYDICOM_DATA / variant).data
    want = load(PYDICOM_DATA / "SC_rgb_rle.dcm").data
    assert got.dtype == np.dtype(f"uint{16 if scale == 257 else 32}")
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64) * scale)


# Shipped compressed files without an uncompressed twin: what the DICOM path stores equals pydicom's own decode
# (its pixel backends + the pylibjpeg plugins) after the modality LUT. 2D images keep (C, rows, cols) exactly;
# volumes are reoriented to canonical, so their voxels are compared as a multiset (orientation: dcm2niix tests).
NO_TWIN = ["JPEG2000.dcm", "examples_jpeg2k.dcm", "GDCMJ2K_TextGBR.dcm", "693_J2KI.dcm", "J2K_pixelrep_mismatch.dcm",
           "JPEGLSNearLossless_08.dcm", "JPEGLSNearLossless_16.dcm", "JPGExtended.dcm", "SC_rgb_jpeg.dcm",
           "SC_rgb_jpeg_dcmd.dcm", "SC_rgb_jpeg_app14_dcmd.dcm", "SC_rgb_small_odd_jpeg.dcm",
           "SC_jpeg_no_color_transform.dcm", "SC_jpeg_no_color_transform_2.dcm", "examples_ybr_color.dcm",
           "SC_rgb_rle_2frame.dcm", "SC_rgb_rle_16bit_2frame.dcm", "SC_rgb_rle_32bit_2frame.dcm"]


@pytest.mark.parametrize("name", NO_TWIN)
def test_compressed_files_without_a_twin_equal_pydicoms_decode(name: str) -> None:
    got = load(PYDICOM_DATA / name).data
    ds = pydicom.dcmread(PYDICOM_DATA / name)
    want = np.asarray(apply_modality_lut(ds.pixel_array, ds))
    if int(ds.get("SamplesPerPixel", 1)) == 1:
        want = want[..., None]
    assert got.size == want.size
    if got.ndim == 3:  # a 2D image: (C, rows, cols)
        np.testing.assert_array_equal(got.astype(np.float64), np.moveaxis(want, -1, 0).astype(np.float64))
    else:
        np.testing.assert_array_equal(np.sort(got.astype(np.float64), axis=None),
                                      np.sort(want.astype(np.float64), axis=None))


@pytest.mark.parametrize("name", ["JPEG-lossy.dcm", "JPEG2000-embedded-sequence-delimiter.dcm"])
def test_shipped_files_pydicom_cannot_decode_are_corrupt_data(name: str) -> None:
    ds = pydicom.dcmread(PYDICOM_DATA / name)
    with pytest.raises(RuntimeError, match="Unable to decode"):
        ds.pixel_array  # noqa: B018 - the reference decoders refuse these bitstreams too
    with pytest.raises(Rejected) as err:
        load(PYDICOM_DATA / name)
    assert err.value.reason is Reason.CORRUPT_DATA and "cannot be decoded" in err.value.detail


def _cut(src: Path, frac: float) -> Callable[[Path], Path]:
    return lambda tmp: _write(tmp, src.read_bytes()[: int(src.stat().st_size * frac)])


def _cut_at(src: Path, n: int) -> Callable[[Path], Path]:
    return lambda tmp: _write(tmp, src.read_bytes()[:n])


def _relabel(uid: str) -> Callable[[Path], Path]:
    return lambda tmp: with_syntax(PYDICOM_DATA / "MR_small_RLE.dcm", tmp / "x.dcm", uid)


def _unknown_syntax(tmp: Path) -> Path:
    # pydicom refuses to write a transfer syntax it does not know: swap a same-length UID in the bytes instead.
    blob = (PYDICOM_DATA / "MR_small_RLE.dcm").read_bytes()
    assert blob.count(b"1.2.840.10008.1.2.5\x00") == 1
    return _write(tmp, blob.replace(b"1.2.840.10008.1.2.5\x00", b"1.2.840.10008.1.2.9\x00"))


def _bad_mosaic(tmp: Path) -> Path:
    return copy_files(tmp, [NICOM_DATA / "0.dcm"])[0]


def _dicm_then_junk(tmp: Path) -> Path:
    return _write(tmp, b"\x00" * 128 + b"DICM" + bytes(range(256)) * 8)


def _short_native(tmp: Path) -> Path:
    ds = read(PYDICOM_DATA / "MR_small.dcm")
    ds.PixelData = ds.PixelData[:4000]  # a well-formed element, shorter than Rows x Columns x 2 B
    return write(ds, tmp / "x.dcm")


CORRUPTIONS = [
    pytest.param(lambda tmp: PYDICOM_DATA / "MR_truncated.dcm", Reason.TRUNCATED, r"8,130 of its 8,192 B",
                 id="pydicom-MR_truncated"),
    pytest.param(_cut(PYDICOM_DATA / "CT_small.dcm", 0.5), Reason.TRUNCATED, r"pixel data ends", id="native-cut-50pct"),
    pytest.param(_cut(PYDICOM_DATA / "MR_small_RLE.dcm", 0.8), Reason.TRUNCATED, r"fragment", id="rle-cut-80pct"),
    pytest.param(_cut(PYDICOM_DATA / "MR_small_jp2klossless.dcm", 0.95), Reason.TRUNCATED, r"", id="j2k-cut-95pct"),
    pytest.param(_cut_at(PYDICOM_DATA / "CT_small.dcm", 200), Reason.TRUNCATED, r"File Meta", id="cut-in-meta"),
    pytest.param(_cut_at(PYDICOM_DATA / "CT_small.dcm", 1176), Reason.TRUNCATED, r"2 B into the element after",
                 id="cut-in-element-header"),
    pytest.param(_cut_at(PYDICOM_DATA / "CT_small.dcm", 1170), Reason.TRUNCATED, r"ends after 8 of its 12 B",
                 id="cut-in-element-value"),
    pytest.param(_short_native, Reason.TRUNCATED, r"4,000 B, the header implies 8,192 B", id="short-pixel-element"),
    pytest.param(lambda tmp: PYDICOM_DATA / "JPEG2000-embedded-sequence-delimiter.dcm", Reason.CORRUPT_DATA,
                 r"cannot be decoded", id="broken-j2k-stream"),
    pytest.param(lambda tmp: PYDICOM_DATA / "JPEG-lossy.dcm", Reason.CORRUPT_DATA, r"cannot be decoded",
                 id="invalid-jpeg-sos"),
    pytest.param(_relabel("1.2.840.10008.1.2.4.100"), Reason.DECODER_MISSING, r"MPEG2", id="mpeg2-no-decoder"),
    pytest.param(_unknown_syntax, Reason.DECODER_MISSING, r"1\.2\.840\.10008\.1\.2\.9 is not one pydicom knows",
                 id="syntax-pydicom-does-not-know"),
    pytest.param(_bad_mosaic, Reason.BAD_HEADER, r"not a whole number of 7x7 tiles", id="mosaic-not-whole-tiles"),
    pytest.param(_dicm_then_junk, Reason.BAD_HEADER, r"", id="DICM-then-junk"),
    pytest.param(lambda tmp: PYDICOM_DATA / "meta_missing_tsyntax.dcm", Reason.BAD_HEADER, r"Rows", id="no-rows"),
]


@pytest.mark.parametrize(("build", "reason", "detail"), CORRUPTIONS)
def test_corruption_rejected_with_reason(tmp_path: Path, build: Callable[[Path], Path], reason: Reason,
                                         detail: str) -> None:
    path = build(tmp_path)
    with pytest.raises(Rejected) as info:
        load(path)
    assert info.value.reason is reason
    assert info.value.detail and re.search(detail, info.value.detail), info.value.detail


def test_truncation_is_found_from_the_header_alone(tmp_path: Path) -> None:
    path = PYDICOM_DATA / "MR_truncated.dcm"
    h = read_dicom_header(path, read_head(path))
    assert h.defect is not None and h.defect.reason is Reason.TRUNCATED
    assert h.frames  # still an image with geometry: it can be named as a series member


def test_size_cap_checked_before_decoding() -> None:
    with pytest.raises(Rejected, match=r"cap 1,000 B") as info:
        load(PYDICOM_DATA / "CT_small.dcm", Limits(max_bytes=1000))
    assert info.value.reason is Reason.TOO_LARGE


def test_preamble_less_file_reads_like_its_source(tmp_path: Path) -> None:
    plain = without_preamble(CT5N[0], tmp_path / "noheader")
    got, want = load(plain), load(CT5N[0])
    np.testing.assert_array_equal(got.data, want.data)
    assert got.affine == want.affine


def test_radiograph_is_a_2d_image_with_modality_lut() -> None:
    path = DICOMDIR_TESTS / "77654033" / "CR1" / "6154"
    img = load(path)
    ds = pydicom.dcmread(path)
    assert img.data.shape == (1, 16, 16) and img.data.dtype == np.float32
    np.testing.assert_allclose(img.data[0], apply_modality_lut(ds.pixel_array, ds), rtol=1e-6)
    assert img.spacing == (0.1, 0.1)  # ImagerPixelSpacing of the detector
    assert any(w.startswith("MONOCHROME1") for w in img.warnings)


def test_rgb_image_is_channels_first() -> None:
    img = load(PYDICOM_DATA / "examples_rgb_color.dcm")
    ds = pydicom.dcmread(PYDICOM_DATA / "examples_rgb_color.dcm")
    np.testing.assert_array_equal(img.data, np.moveaxis(ds.pixel_array, 2, 0))


def test_palette_colour_becomes_rgb() -> None:
    img = load(PYDICOM_DATA / "examples_palette.dcm")
    ds = pydicom.dcmread(PYDICOM_DATA / "examples_palette.dcm")
    from pydicom.pixels import apply_color_lut

    np.testing.assert_array_equal(img.data, np.moveaxis(apply_color_lut(ds.pixel_array, ds), 2, 0))


def test_rt_dose_grid_uses_frame_offsets_and_dose_scaling() -> None:
    path = PYDICOM_DATA / "rtdose.dcm"
    vol = load(path)
    ds = pydicom.dcmread(path)
    assert vol.data.shape == (1, 10, 10, 15)
    assert vol.spacing == pytest.approx((10.0, 10.0, 5.0))  # GridFrameOffsetVector steps by 5 mm
    # frame k of the file is slice k along the normal (offsets increase), rows -> y, columns -> x, LPS -> RAS flips
    expected = ds.pixel_array.astype(np.float64) * float(ds.DoseGridScaling)
    np.testing.assert_allclose(vol.data[0], np.transpose(expected, (2, 1, 0))[::-1, ::-1, :], rtol=1e-6)


def test_multiframe_without_geometry_stacks_frames() -> None:
    vol = load(PYDICOM_DATA / "SC_rgb_rle_2frame.dcm")
    ds = pydicom.dcmread(PYDICOM_DATA / "SC_rgb_rle_2frame.dcm")
    assert vol.data.shape == (3, 100, 100, 2)
    np.testing.assert_array_equal(vol.data[:, :, :, 1], np.transpose(ds.pixel_array[1], (2, 1, 0))[:, ::-1, ::-1])
    assert any("no patient geometry" in w for w in vol.warnings)


@pytest.mark.parametrize("chunk", [1, 2, 3, 64])
@pytest.mark.parametrize(("geometry", "axis", "shape"), [("axial", 3, (1, 16, 16, 5)), ("flipped", 3, (1, 16, 16, 5)),
                                                         ("sagittal", 1, (1, 5, 16, 16))])
def test_series_streams_chunk_aligned_slabs_along_the_slice_axis(tmp_path: Path, chunk: int, geometry: str, axis: int,
                                                                 shape: tuple[int, ...]) -> None:
    from labzarr.readers import SeriesRules, assemble
    from labzarr.readers.dicom import Member, layout_series, open_series, read_series

    from .. import dicom_data

    edit = {"axial": None, "flipped": dicom_data._flipped, "sagittal": dicom_data._sagittal}[geometry]
    files = dicom_data.ct_series(tmp_path, "p", edit)
    stack = layout_series([Member(str(p), p.name, read_dicom_header(p, read_head(p))) for p in files], SeriesRules())
    source = open_series(stack, Limits())
    h = source.header
    assert h.stream_axis == axis and h.shape == shape  # the slice axis, wherever canonical order put it
    chunks = tuple(chunk if i == axis else n for i, n in enumerate(shape))
    slabs = list(source.slabs(chunks))
    assert len(slabs) == source.slab_count(chunks) == -(-5 // chunk)
    for slab in slabs:  # whole chunks along the slice axis
        cut = slab.region[axis]
        assert cut.start % chunk == 0 and cut.stop - cut.start == min(chunk, 5 - cut.start)
    whole = read_series(stack, Limits()).data
    np.testing.assert_array_equal(assemble(source), whole)
    for resumed, slab in zip(source.slabs(chunks, first=1), slabs[1:], strict=True):  # a later start skips the rest
        assert resumed.region == slab.region
        np.testing.assert_array_equal(resumed.data, whole[resumed.region])
