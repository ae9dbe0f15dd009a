from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert.demo import NIBABEL_DATA
from labzarr.readers import Limits, NiftiReader, Reason, Rejected, read_head, reader_for

NIFTI_FILES = ["anatomical.nii", "functional.nii", "example4d.nii.gz", "example_nifti2.nii.gz", "standard.nii.gz",
               "reoriented_anat_moved.nii", "resampled_anat_moved.nii"]


def read(path: Path, limits: Limits = Limits()):
    head = read_head(path)
    reader = reader_for(head.data)
    assert isinstance(reader, NiftiReader), f"{path.name} not sniffed as NIfTI"
    return reader.read(path, limits, head)


def canonical(path: Path) -> tuple[np.ndarray, np.ndarray]:
    img = nib.as_closest_canonical(nib.load(path))
    data = np.asanyarray(img.dataobj)
    spatial = data.shape[:3] + (1,) * (3 - min(3, data.ndim))
    data = np.moveaxis(data.reshape(spatial + (-1,), order="F"), 3, 0)
    return data, img.affine


@pytest.mark.parametrize("name", NIFTI_FILES)
def test_nibabel_files_equal_closest_canonical(name: str) -> None:
    vol = read(NIBABEL_DATA / name)
    expected, affine = canonical(NIBABEL_DATA / name)
    assert vol.data.shape == expected.shape
    np.testing.assert_array_equal(vol.data, expected.astype(vol.data.dtype))
    np.testing.assert_allclose(np.array(vol.affine), affine, atol=1e-6)
    np.testing.assert_allclose(vol.spacing, np.sqrt((affine[:3, :3] ** 2).sum(0)), atol=1e-6)
    assert vol.data.dtype.isnative


def test_sniffs_content_not_extension(tmp_path: Path) -> None:
    src = NIBABEL_DATA / "anatomical.nii"
    gz_as_nii = tmp_path / "a.nii"
    gz_as_nii.write_bytes(gzip.compress(src.read_bytes(), mtime=0))
    upper = tmp_path / "B.NII.GZ"
    shutil.copyfile(NIBABEL_DATA / "example4d.nii.gz", upper)
    np.testing.assert_array_equal(read(gz_as_nii).data, canonical(src)[0])
    assert read(upper).data.shape == (2, 128, 96, 24)
    text = tmp_path / "c.nii.gz"
    text.write_text("not an image\n")
    assert reader_for(read_head(text).data) is None


def _gz_ct(tmp: Path) -> bytes:
    img = nib.Nifti1Image(np.arange(40 * 40 * 20, dtype=np.int16).reshape(40, 40, 20), np.eye(4))
    return gzip.compress(bytes(img.to_bytes()), mtime=0)


def _write(tmp: Path, data: bytes, name: str = "x.nii.gz") -> Path:
    (tmp / name).write_bytes(data)
    return tmp / name


def cut(frac: float) -> Callable[[Path], Path]:
    return lambda tmp: _write(tmp, _gz_ct(tmp)[: int(len(_gz_ct(tmp)) * frac)])


def flip_middle(tmp: Path) -> Path:
    b = bytearray(_gz_ct(tmp))
    b[len(b) // 2] ^= 0xFF
    return _write(tmp, bytes(b))


def bad_crc(tmp: Path) -> Path:
    b = bytearray(_gz_ct(tmp))
    b[-8] ^= 0x01  # the CRC-32 in the gzip trailer
    return _write(tmp, bytes(b))


def no_trailer(tmp: Path) -> Path:
    return _write(tmp, _gz_ct(tmp)[:-8])


def huge_dims(tmp: Path) -> Path:
    hdr = nib.Nifti1Header()
    hdr.set_data_shape((30000, 30000, 3000))
    hdr.set_data_dtype(np.int16)
    return _write(tmp, bytes(hdr.binaryblock) + b"\x00" * 4, "x.nii")


def short_plain(tmp: Path) -> Path:
    img = nib.Nifti1Image(np.zeros((20, 20, 20), np.int16), np.eye(4))
    return _write(tmp, bytes(img.to_bytes())[:-100], "x.nii")


def bad_datatype(tmp: Path) -> Path:
    img = nib.Nifti1Image(np.zeros((4, 4, 4), np.int16), np.eye(4))
    b = bytearray(img.to_bytes())
    b[70:72] = (999).to_bytes(2, "little")
    return _write(tmp, bytes(b), "x.nii")


def bad_dim0(tmp: Path) -> Path:
    img = nib.Nifti1Image(np.zeros((4, 4, 4), np.int16), np.eye(4))
    b = bytearray(img.to_bytes())
    b[40:42] = (9).to_bytes(2, "little")
    return _write(tmp, bytes(b), "x.nii")


def gzip_bomb(tmp: Path) -> Path:
    # A tiny header that claims 4x4x4 voxels, followed by 64 MiB of zeros: far more than the header allows.
    img = nib.Nifti1Image(np.zeros((4, 4, 4), np.int16), np.eye(4))
    return _write(tmp, gzip.compress(bytes(img.to_bytes()) + b"\x00" * (64 << 20), mtime=0))


def nifti_pair(tmp: Path) -> Path:
    return _write(tmp, (NIBABEL_DATA / "nifti1.hdr").read_bytes(), "x.hdr")


CORRUPTIONS = [
    pytest.param(cut(0.1), Reason.TRUNCATED, id="gz-cut-10pct"),
    pytest.param(cut(0.6), Reason.TRUNCATED, id="gz-cut-60pct"),
    pytest.param(cut(0.99), Reason.TRUNCATED, id="gz-cut-99pct"),
    pytest.param(no_trailer, Reason.TRUNCATED, id="gz-no-trailer"),
    pytest.param(flip_middle, Reason.CORRUPT_DATA, id="gz-flipped-deflate-byte"),
    pytest.param(bad_crc, Reason.CORRUPT_DATA, id="gz-bad-crc"),
    pytest.param(huge_dims, Reason.TOO_LARGE, id="huge-dims-tiny-file"),
    pytest.param(short_plain, Reason.TRUNCATED, id="nii-shorter-than-header-implies"),
    pytest.param(bad_datatype, Reason.BAD_HEADER, id="unknown-datatype"),
    pytest.param(bad_dim0, Reason.BAD_HEADER, id="dim0-out-of-range"),
    pytest.param(gzip_bomb, Reason.TOO_LARGE, id="gzip-inflates-past-header"),
    pytest.param(nifti_pair, Reason.UNSUPPORTED_FORMAT, id="hdr-img-pair"),
]


@pytest.mark.parametrize(("build", "reason"), CORRUPTIONS)
def test_corruption_rejected_with_reason(tmp_path: Path, build: Callable[[Path], Path], reason: Reason) -> None:
    path = build(tmp_path)
    with pytest.raises(Rejected) as info:
        read(path)
    assert info.value.reason is reason
    assert info.value.detail  # a measured detail, never empty


def test_too_large_cap_is_configurable(tmp_path: Path) -> None:
    path = _write(tmp_path, _gz_ct(tmp_path))
    with pytest.raises(Rejected, match=r"cap 1,000 B") as info:
        read(path, Limits(max_bytes=1000))
    assert info.value.reason is Reason.TOO_LARGE
    assert read(path, Limits(max_bytes=64000)).data.shape == (1, 40, 40, 20)


def test_scaled_int_becomes_float32(tmp_path: Path) -> None:
    img = nib.Nifti1Image(np.arange(24, dtype=np.int16).reshape(2, 3, 4), np.eye(4))
    img.header.set_slope_inter(0.5, -3)
    path = _write(tmp_path, bytes(img.to_bytes()), "s.nii")
    vol = read(path)
    assert vol.data.dtype == np.float32
    np.testing.assert_allclose(vol.data[0], np.arange(24).reshape(2, 3, 4) * 0.5 - 3)
