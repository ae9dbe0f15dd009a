"""Native pixel data read as stored (straight from its offset into the slab) against pydicom's `pixel_array`.

Every series here is decoded twice: as the reader lays it out (native frames read from their offsets), and with
the offsets taken away, so that pydicom decodes each file's Pixel Data element as before. The two must be equal,
value for value and dtype for dtype, on every file pydicom and nibabel ship that the reader can lay out, and on
generated files for what those lack: high bits set outside BitsStored (signed and unsigned), big-endian data,
integer and float rescales, RGB, 8- and 32-bit values and a multi-frame file; and Siemens mosaics, whose tiles are
cut from one stored frame a file (generated ones, nibabel's, and the dcm_qa corpus' where it is mirrored).
"""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.dataset import Dataset
from pydicom.uid import ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian, generate_uid

from labzarr.readers import Limits, Rejected, read_dicom_header, read_head
from labzarr.readers._dicom_layout import _native
from labzarr.readers.dicom import (
    Member,
    SeriesRules,
    SeriesStack,
    StackFrame,
    layout_series,
    looks_like_dicom,
    output_dtype,
    read_series,
)

from ..dicom_corpora import corpus_repo, extract
from ..dicom_data import CT5N, NICOM_DATA, PYDICOM_DATA, copy_files, mosaic, read, write


def _stack(paths: list[Path]) -> SeriesStack:
    members = [Member(str(p), p.name, read_dicom_header(p, read_head(p))) for p in paths]
    return layout_series(members, SeriesRules())


def _both(stack: SeriesStack) -> tuple[np.ndarray, np.ndarray]:
    native = read_series(stack, Limits()).data
    decoded = read_series(replace(stack, frames=tuple(replace(f, offset=-1) for f in stack.frames)), Limits()).data
    return native, decoded


def _assert_same(stack: SeriesStack) -> None:
    native, decoded = _both(stack)
    assert native.dtype == decoded.dtype and native.shape == decoded.shape
    np.testing.assert_array_equal(native, decoded)


def _shipped() -> list[Path]:
    files = [p for p in sorted(PYDICOM_DATA.rglob("*")) if p.is_file() and p.suffix.lower() in ("", ".dcm")]
    return files + [p for p in sorted(NICOM_DATA.glob("*.dcm"))]


def _frames_of(path: Path) -> SeriesStack | None:
    """Every frame of one file as a stack of its own, geometry aside (a single slice is no series to lay out);
    None when the file holds no natively readable pixels."""
    try:
        h = read_dicom_header(path, read_head(path))
    except Rejected:
        return None
    if h.native_at < 0 or not h.has_pixels:
        return None
    frames = tuple(StackFrame(str(path), path.name, f.index, f.slope, f.intercept, h.gzipped, *_native(h, f.index))
                   for f in h.frames)
    identity = tuple(tuple(float(i == j) for j in range(4)) for i in range(4))
    return SeriesStack("volume", frames, len(frames), 1, h.rows, h.columns, h.samples, h.photometric,
                       output_dtype(h, h.frames), affine=identity, spacing=(1.0, 1.0, 1.0))


def test_every_shipped_native_file_reads_as_pydicom_decodes_it() -> None:
    read_natively = []
    for path in _shipped():
        stack = _frames_of(path)
        if stack is None:
            continue
        native, decoded = _both(stack)
        assert native.dtype == decoded.dtype and native.shape == decoded.shape, path
        np.testing.assert_array_equal(native, decoded, err_msg=str(path))
        read_natively.append(path.name)
    # CT, MR, RT dose, RGB, 8/16/32-bit, little and big endian, multi-frame
    assert len(read_natively) >= 20, read_natively
    assert {"CT_small.dcm", "MR_small_bigendian.dcm", "rtdose.dcm", "examples_rgb_color.dcm"} <= set(read_natively)


def test_a_real_ct_series_reads_natively_and_as_pydicom(tmp_path: Path) -> None:
    stack = _stack(copy_files(tmp_path, CT5N))
    assert all(f.offset > 0 for f in stack.frames)
    _assert_same(stack)


def _slice(k: int, pixels: np.ndarray, *, bits_stored: int, signed: bool, syntax: str = ExplicitVRLittleEndian,
           slope: float = 1.0, intercept: float = 0.0, rgb: bool = False) -> Dataset:
    ds = read(CT5N[0])
    ds.file_meta.TransferSyntaxUID = syntax
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[str(k), syntax])
    ds.InstanceNumber = k + 1
    ds.ImagePositionPatient = [0.0, 0.0, 2.0 * k]
    ds.Rows, ds.Columns = pixels.shape[:2]
    ds.BitsAllocated = pixels.dtype.itemsize * 8
    ds.BitsStored, ds.HighBit, ds.PixelRepresentation = bits_stored, bits_stored - 1, int(signed)
    ds.RescaleSlope, ds.RescaleIntercept = slope, intercept
    if rgb:
        ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, "RGB", 0
    else:
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    big = syntax == ExplicitVRBigEndian
    ds.PixelData = pixels.astype(pixels.dtype.newbyteorder(">" if big else "<")).tobytes()
    return ds


CASES = {
    # name: (dtype, bits stored, signed, syntax, slope, intercept, rgb)
    "u16-12bit-garbage-high-bits": ("u2", 12, False, ExplicitVRLittleEndian, 1.0, 0.0, False),
    "i16-12bit-sign-extended": ("i2", 12, True, ExplicitVRLittleEndian, 1.0, 0.0, False),
    "u16-ct-intercept": ("u2", 12, False, ExplicitVRLittleEndian, 1.0, -1024.0, False),
    "i16-integer-slope": ("i2", 16, True, ImplicitVRLittleEndian, 2.0, -3.0, False),
    "u16-float-slope": ("u2", 16, False, ExplicitVRLittleEndian, 0.25, 1.5, False),
    "big-endian-i16": ("i2", 12, True, ExplicitVRBigEndian, 1.0, -1024.0, False),
    "u8": ("u1", 8, False, ExplicitVRLittleEndian, 1.0, 0.0, False),
    "u8-rgb": ("u1", 8, False, ExplicitVRLittleEndian, 1.0, 0.0, True),
    "i32": ("i4", 32, True, ExplicitVRLittleEndian, 1.0, 0.0, False),
    "u32-intercept": ("u4", 24, False, ExplicitVRLittleEndian, 1.0, 100.0, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_generated_native_series_read_as_pydicom_decodes_them(tmp_path: Path, case: str) -> None:
    dtype, bits, signed, syntax, slope, intercept, rgb = CASES[case]
    rng = np.random.default_rng(len(case))
    info = np.iinfo(dtype)
    shape = (12, 10, 3) if rgb else (12, 10)
    paths = []
    for k in range(4):
        # Every bit pattern of the allocated width, high bits outside BitsStored included: what the reader must
        # clear (unsigned) or sign-extend (signed) exactly as pydicom does.
        pixels = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        ds = _slice(k, pixels, bits_stored=bits, signed=signed, syntax=syntax, slope=slope, intercept=intercept,
                    rgb=rgb)
        path = tmp_path / f"s{k}.dcm"
        if syntax == ExplicitVRBigEndian:  # save_as keeps the template's encoding; dcmwrite may change it
            pydicom.dcmwrite(path, ds, implicit_vr=False, little_endian=False, enforce_file_format=True)
        else:
            write(ds, path)
        paths.append(path)
    stack = _stack(paths)
    assert all(f.offset > 0 for f in stack.frames), "expected every frame to be read natively"
    _assert_same(stack)


def test_a_multi_frame_file_reads_each_frame_at_its_offset(tmp_path: Path) -> None:
    src = PYDICOM_DATA / "rtdose.dcm"  # 15 frames of native 32-bit dose, 10x10
    stack = _frames_of(copy_files(tmp_path, [src])[0])
    assert stack is not None
    offsets = [f.offset for f in stack.frames]
    assert len(offsets) == pydicom.dcmread(src).NumberOfFrames == 15
    assert all(b - a == 10 * 10 * 4 for a, b in zip(offsets, offsets[1:]))
    native, decoded = _both(stack)
    np.testing.assert_array_equal(native, decoded)
    assert native.dtype == np.float32 and np.unique(native).size > 15  # DoseGridScaling applied, real values


def test_a_file_cut_after_probing_is_truncated_not_garbage(tmp_path: Path) -> None:
    (path,) = copy_files(tmp_path, CT5N[:1])
    stack = _frames_of(path)
    assert stack is not None
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(Rejected) as exc:
        read_series(stack, Limits())
    assert exc.value.reason.value == "truncated" and "ends after" in exc.value.detail


def test_mosaic_series_read_natively_as_pydicom_decodes_them(tmp_path: Path) -> None:
    # Siemens-style mosaics of real CT slices, three volumes: every tile cut from its file's one stored frame.
    paths = mosaic(tmp_path / "bold", volumes=3)
    stack = _stack(paths)
    assert stack.mosaic and len(stack.frames) == 3 * len(CT5N)
    assert all(f.offset > 0 for f in stack.frames)
    assert len({(f.path, f.offset) for f in stack.frames}) == len(paths)  # one stored frame a file, all its tiles
    _assert_same(stack)


@pytest.mark.parametrize("name", ["siemens_dwi_0.dcm.gz", "siemens_dwi_1000.dcm.gz"])
def test_a_real_scanner_mosaic_reads_natively_as_pydicom_decodes_it(tmp_path: Path, name: str) -> None:
    # nibabel's Siemens DWI mosaics, un-gzipped so that their pixel data can be read as stored.
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((NICOM_DATA / name).read_bytes()))
    stack = _stack([path])
    assert stack.mosaic and stack.n_slices > 4 and all(f.offset > 0 for f in stack.frames)
    native, decoded = _both(stack)
    assert native.dtype == decoded.dtype and native.shape == decoded.shape
    np.testing.assert_array_equal(native, decoded)


def test_the_corpus_mosaics_read_natively_as_pydicom_decodes_them(tmp_path: Path) -> None:
    # Real scanner mosaics with real pixels (nibabel ships its mosaics' pixels zeroed): every native one of dcm_qa.
    if corpus_repo("dcm_qa") is None:
        pytest.skip("corpus dcm_qa is not mirrored on this machine (../.mirror/neurolabusc+dcm_qa/repo)")
    checked = 0
    for path in extract("dcm_qa", tmp_path):
        head = read_head(path)
        if not looks_like_dicom(head.data):
            continue
        try:
            h = read_dicom_header(path, head)
        except Rejected:
            continue
        if not h.mosaic or h.native_at < 0:
            continue
        stack = _stack([path])
        native, decoded = _both(stack)
        assert native.dtype == decoded.dtype and native.shape == decoded.shape, path
        np.testing.assert_array_equal(native, decoded, err_msg=str(path))
        assert np.unique(native).size > 100, path  # real tiles
        checked += 1
    assert checked >= 20


def test_a_mosaic_cut_after_probing_is_truncated(tmp_path: Path) -> None:
    (path,) = mosaic(tmp_path / "m")
    stack = _stack([path])
    path.write_bytes(path.read_bytes()[: stack.frames[0].offset + 100])
    with pytest.raises(Rejected) as info:
        read_series(stack, Limits())
    assert info.value.reason.value == "truncated" and "pixel data ends after 100 of its" in info.value.detail
