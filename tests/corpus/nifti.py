"""NIfTI bad inputs: truncated at several points, flipped bytes, bad CRC, missing trailer, bad header fields,
huge dims, bombs, unsupported variants, non-finite voxels."""

from __future__ import annotations

import struct
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert.demo import NIBABEL_DATA
from labzarr.readers import Reason

from ._util import canonical, gz, gzip_members_of_zeros, nifti, put, volume


def _gz_volume(seed: int) -> bytes:
    return gz(nifti(volume(seed)))


def cut_gz(frac: float):
    def build(raw: Path, slot: str, seed: int) -> str:
        blob = _gz_volume(seed)
        return put(raw, f"{slot}/scan.nii.gz", blob[: int(len(blob) * frac)])
    return build


def cut_plain(at: str):
    def build(raw: Path, slot: str, seed: int) -> str:
        blob = nifti(volume(seed))
        end = {"in-header": 200, "after-header": 352 + 10, "mid-data": len(blob) // 2, "last-byte": len(blob) - 1}[at]
        return put(raw, f"{slot}/scan.nii", blob[:end])
    return build


def gz_no_trailer(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.nii.gz", _gz_volume(seed)[:-8])


def gz_bad_crc(raw: Path, slot: str, seed: int) -> str:
    b = bytearray(_gz_volume(seed))
    b[-8] ^= 0x01
    return put(raw, f"{slot}/scan.nii.gz", bytes(b))


def gz_bad_isize(raw: Path, slot: str, seed: int) -> str:
    b = bytearray(_gz_volume(seed))
    b[-1] ^= 0x01  # ISIZE, the inflated length mod 2^32
    return put(raw, f"{slot}/scan.nii.gz", bytes(b))


def gz_flipped(raw: Path, slot: str, seed: int) -> str:
    b = bytearray(_gz_volume(seed))
    b[len(b) // 2] ^= 0xFF
    return put(raw, f"{slot}/scan.nii.gz", bytes(b))


def gz_junk_after_trailer(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.nii.gz", _gz_volume(seed) + b"this is not gzip" * 8)


def gz_broken_at_start(raw: Path, slot: str, seed: int) -> str:
    b = bytearray(_gz_volume(seed))
    b[10:20] = b"\xff" * 10  # the first deflate block header
    return put(raw, f"{slot}/scan.nii.gz", bytes(b))


def gz_header_only(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.nii.gz", gz(nifti(volume(seed))[:352]))


def _header(seed: int) -> bytearray:
    img = nib.Nifti1Image(volume(seed, (6, 5, 4)), np.eye(4))
    return bytearray(img.to_bytes())


def _set(blob: bytearray, offset: int, fmt: str, value: object) -> bytes:
    blob[offset : offset + struct.calcsize(fmt)] = struct.pack("<" + fmt, value)
    return bytes(blob)


def field(offset: int, fmt: str, value: object):
    def build(raw: Path, slot: str, seed: int) -> str:
        return put(raw, f"{slot}/scan.nii", _set(_header(seed), offset, fmt, value))
    return build


def huge_dims(raw: Path, slot: str, seed: int) -> str:
    hdr = nib.Nifti1Header()
    hdr.set_data_shape((30000, 30000, 3000 + seed))
    hdr.set_data_dtype(np.int16)
    return put(raw, f"{slot}/scan.nii", bytes(hdr.binaryblock) + b"\x00" * 4)


def over_voxel_cap(raw: Path, slot: str, seed: int) -> str:
    hdr = nib.Nifti1Header()
    hdr.set_data_shape((32000, 32000, 3 + seed % 2))  # 3e9 uint8 voxels: under the 4 GiB byte cap, over the voxel cap
    hdr.set_data_dtype(np.uint8)
    return put(raw, f"{slot}/scan.nii.gz", gz(bytes(hdr.binaryblock) + b"\x00" * 4 + seed.to_bytes(4, "little")))


def gzip_bomb(raw: Path, slot: str, seed: int) -> str:
    """~4 MB on disk, 4 GiB inflated, behind a header that allows 2 KiB: refused after ~1 MiB."""
    head = nifti(volume(seed, (8, 8, 8)))
    return put(raw, f"{slot}/scan.nii.gz", gz(head) + gzip_members_of_zeros(4 << 30))


def plain_trailing_garbage(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.nii", nifti(volume(seed, (4, 4, 4))) + bytes(2 << 20))


def complex_voxels(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.nii", nifti(volume(seed, (4, 4, 4)).astype(np.complex64)))


def cifti(raw: Path, slot: str, seed: int) -> str:
    img = nib.Nifti2Image(volume(seed, (1, 1, 1, 1, 5, 7)).astype(np.float32), np.eye(4))
    img.header.set_intent("ConnDenseSeries")
    return put(raw, f"{slot}/scan.dtseries.nii", bytes(img.to_bytes()))


def non_finite(value: float):
    def build(raw: Path, slot: str, seed: int) -> str:
        data = volume(seed, (8, 8, 8)).astype(np.float32)
        data[1, 2, 3] = value
        return put(raw, f"{slot}/scan.nii.gz", gz(nifti(data)))
    return build


def pair_hdr(raw: Path, slot: str, seed: int) -> str:
    img = nib.Nifti1Pair(volume(seed, (4, 4, 4)), np.eye(4))
    return put(raw, f"{slot}/scan.hdr", bytes(img.header.binaryblock))


def pair_img(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.img", volume(seed, (4, 4, 4)).tobytes())


def analyze(raw: Path, slot: str, seed: int) -> str:
    img = nib.AnalyzeImage(volume(seed, (4, 4, 4)), np.eye(4))
    return put(raw, f"{slot}/scan.hdr", bytes(img.header.binaryblock))


def nifti2_cut(raw: Path, slot: str, seed: int) -> str:
    blob = gz(nifti(volume(seed), version=2))
    return put(raw, f"{slot}/scan.nii.gz", blob[: len(blob) * 2 // 3])


def nifti2_header_cut(raw: Path, slot: str, seed: int) -> str:
    return put(raw, f"{slot}/scan.nii", nifti(volume(seed), version=2)[:400])


NIFTI = [
    pytest.param(cut_gz(0.1), Reason.TRUNCATED, id="nifti-gz-cut-10pct"),
    pytest.param(cut_gz(0.5), Reason.TRUNCATED, id="nifti-gz-cut-50pct"),
    pytest.param(cut_gz(0.9), Reason.TRUNCATED, id="nifti-gz-cut-90pct"),
    pytest.param(cut_gz(0.99), Reason.TRUNCATED, id="nifti-gz-cut-99pct"),
    pytest.param(gz_no_trailer, Reason.TRUNCATED, id="nifti-gz-no-trailer"),
    pytest.param(gz_header_only, Reason.TRUNCATED, id="nifti-gz-header-only"),
    pytest.param(gz_bad_crc, Reason.CORRUPT_DATA, id="nifti-gz-bad-crc"),
    pytest.param(gz_bad_isize, Reason.CORRUPT_DATA, id="nifti-gz-bad-isize"),
    pytest.param(gz_flipped, Reason.CORRUPT_DATA, id="nifti-gz-flipped-byte"),
    pytest.param(gz_junk_after_trailer, Reason.CORRUPT_DATA, id="nifti-gz-junk-after-trailer"),
    pytest.param(gz_broken_at_start, Reason.CORRUPT_DATA, id="nifti-gz-broken-first-block"),
    pytest.param(cut_plain("in-header"), Reason.TRUNCATED, id="nifti-cut-in-header"),
    pytest.param(cut_plain("after-header"), Reason.TRUNCATED, id="nifti-cut-after-header"),
    pytest.param(cut_plain("mid-data"), Reason.TRUNCATED, id="nifti-cut-mid-data"),
    pytest.param(cut_plain("last-byte"), Reason.TRUNCATED, id="nifti-cut-last-byte"),
    pytest.param(nifti2_cut, Reason.TRUNCATED, id="nifti2-gz-cut"),
    pytest.param(nifti2_header_cut, Reason.TRUNCATED, id="nifti2-cut-in-header"),
    pytest.param(field(40, "h", 0), Reason.BAD_HEADER, id="nifti-dim0-zero"),
    pytest.param(field(40, "h", 9), Reason.BAD_HEADER, id="nifti-dim0-nine"),
    pytest.param(field(42, "h", -6), Reason.BAD_HEADER, id="nifti-negative-dim"),
    pytest.param(field(70, "h", 999), Reason.BAD_HEADER, id="nifti-unknown-datatype"),
    pytest.param(field(108, "f", 12.0), Reason.BAD_HEADER, id="nifti-vox-offset-inside-header"),
    pytest.param(huge_dims, Reason.TOO_LARGE, id="nifti-huge-dims"),
    pytest.param(over_voxel_cap, Reason.TOO_LARGE, id="nifti-over-voxel-cap"),
    pytest.param(gzip_bomb, Reason.TOO_LARGE, id="nifti-gzip-bomb-4gib"),
    pytest.param(plain_trailing_garbage, Reason.TOO_LARGE, id="nifti-2mib-past-its-data"),
    pytest.param(complex_voxels, Reason.UNSUPPORTED_FORMAT, id="nifti-complex-voxels"),
    pytest.param(cifti, Reason.UNSUPPORTED_FORMAT, id="nifti-cifti-dense-series"),
    pytest.param(pair_hdr, Reason.UNSUPPORTED_FORMAT, id="nifti-pair-hdr"),
    pytest.param(pair_img, Reason.UNSUPPORTED_FORMAT, id="nifti-pair-img"),
    pytest.param(analyze, Reason.UNSUPPORTED_FORMAT, id="analyze-7.5"),
    pytest.param(non_finite(np.nan), Reason.NON_FINITE, id="nifti-nan-voxel"),
    pytest.param(non_finite(np.inf), Reason.NON_FINITE, id="nifti-inf-voxel"),
]


def _good_file(name: str, rel: str):
    def build(raw: Path) -> str:
        return put(raw, rel, (NIBABEL_DATA / name).read_bytes())
    return build


def _good_generated(rel: str, seed: int, *, compress: bool, version: int = 1):
    def build(raw: Path) -> str:
        blob = nifti(volume(seed), version=version)
        return put(raw, rel, gz(blob) if compress else blob)
    return build


def _from_file(raw: Path, source: str) -> np.ndarray:
    return canonical(raw / source)


# (build(raw) -> source, expected(raw, source) -> the array the store must hold)
NIFTI_GOOD = [
    (_good_file("anatomical.nii", "good_001/anatomical.nii"), _from_file),
    (_good_file("example4d.nii.gz", "good_002/example4d.nii.gz"), _from_file),
    (_good_file("example_nifti2.nii.gz", "good_003/example_nifti2.nii.gz"), _from_file),
    (_good_file("reoriented_anat_moved.nii", "good_004/reoriented_anat_moved.nii"), _from_file),
    (_good_generated("good_005/ct.nii.gz", 905, compress=True), _from_file),
    (_good_generated("good_006/ct.jpg", 906, compress=False), _from_file),  # a NIfTI named .jpg: content wins
    (_good_generated("good_007/ct.nii", 907, compress=True), _from_file),  # gzipped but named .nii
    (_good_generated("good_008/ct2.nii.gz", 908, compress=True, version=2), _from_file),
]
