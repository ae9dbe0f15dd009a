"""DICOM bad inputs: broken series (a slice missing, a member cut, two images at one position, gantry tilt,
uneven spacing, too few slices), files no decoder reads, broken and non-image files, junk in series folders;
built from pydicom's real CT slices (tests/dicom_data.py), so every series has its own UIDs and bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.uid import generate_uid

from labzarr.readers import Reason

from ..dicom_data import CT5N, DICOMDIR_TESTS, PYDICOM_DATA, canonical, ct_series, dcm2niix, read, write


def _series(slot: str) -> str:
    return f"{slot}/ (series 5)"  # CT5N's SeriesNumber is 5


def missing_slice(raw: Path, slot: str, seed: int) -> str:
    ct_series(raw / slot, f"c{seed}", lambda k, ds: None if k == 2 else ds)
    return _series(slot)


def too_short(raw: Path, slot: str, seed: int) -> str:
    ct_series(raw / slot, f"c{seed}", lambda k, ds: ds if k < 2 else None)
    return _series(slot)


def member_cut(raw: Path, slot: str, seed: int) -> str:
    cut = ct_series(raw / slot, f"c{seed}")[3]
    cut.write_bytes(cut.read_bytes()[:-200])
    return _series(slot)


def two_images_one_position(raw: Path, slot: str, seed: int) -> str:
    ct_series(raw / slot, f"c{seed}")
    other = read(raw / slot / CT5N[1].name)
    other.SOPInstanceUID = generate_uid(entropy_srcs=[str(seed), "again"])
    other.file_meta.MediaStorageSOPInstanceUID = other.SOPInstanceUID
    pixels = np.flipud(other.pixel_array)
    other.PixelData = pixels.tobytes()
    write(other, raw / slot / "reexported.dcm")
    return _series(slot)


def _shifted(by_mm: float):
    def edit(k: int, ds: pydicom.Dataset) -> pydicom.Dataset:
        if k == 3:
            ipp = [float(v) for v in ds.ImagePositionPatient]
            ds.ImagePositionPatient = [ipp[0], ipp[1], ipp[2] + by_mm]
        return ds
    return edit


def uneven_spacing(raw: Path, slot: str, seed: int) -> str:
    ct_series(raw / slot, f"c{seed}", _shifted(0.9))  # steps 2.5, 2.5, 3.4, 1.6 mm
    return _series(slot)


def gantry_tilt(raw: Path, slot: str, seed: int) -> str:
    def tilt(k: int, ds: pydicom.Dataset) -> pydicom.Dataset:
        ipp = [float(v) for v in ds.ImagePositionPatient]
        ds.ImagePositionPatient = [ipp[0], ipp[1] + ipp[2] * 0.27, ipp[2]]  # ~15 degrees
        return ds
    ct_series(raw / slot, f"c{seed}", tilt)
    return _series(slot)


def no_decoder(raw: Path, slot: str, seed: int) -> str:
    def encapsulate(k: int, ds: pydicom.Dataset) -> pydicom.Dataset:
        ds.compress(pydicom.uid.RLELossless)
        ds.file_meta.TransferSyntaxUID = pydicom.uid.MPEG2MPML  # a syntax nothing installed decodes
        return ds
    ct_series(raw / slot, f"c{seed}", encapsulate)
    return _series(slot)


def shipped(name: str, source: str | None = None):
    def build(raw: Path, slot: str, seed: int) -> str:
        (raw / slot).mkdir(parents=True)
        shutil.copyfile(PYDICOM_DATA / name, raw / slot / name)
        return f"{slot}/{source or name}"
    return build


def junk_in_series_folder(raw: Path, slot: str, seed: int) -> str:
    ct_series(raw / slot, f"c{seed}")
    (raw / slot / "junk.dcm").write_bytes(bytes((i * 11 + seed) % 256 for i in range(2048)))
    return f"{slot}/junk.dcm"


def dicomdir(raw: Path, slot: str, seed: int) -> str:
    ct_series(raw / slot, f"c{seed}")
    shutil.copyfile(DICOMDIR_TESTS / "DICOMDIR", raw / slot / "DICOMDIR")
    return f"{slot}/DICOMDIR"


def series_twice(raw: Path, slot: str, seed: int) -> str:
    """The same series delivered again under another case's folder (another item ID): one item, one copy."""
    files = ct_series(raw / slot, f"c{seed}")
    copy = raw / f"redelivered_{seed}"
    copy.mkdir()
    for f in files:
        shutil.copyfile(f, copy / f.name)
    return f"redelivered_{seed}/ (series 5)"


DICOM = [
    pytest.param(missing_slice, Reason.SERIES_MISSING_SLICES, id="dicom-series-missing-slice"),
    pytest.param(too_short, Reason.SERIES_TOO_SHORT, id="dicom-series-two-slices"),
    pytest.param(member_cut, Reason.TRUNCATED, id="dicom-member-cut-in-pixel-data"),
    pytest.param(two_images_one_position, Reason.MIXED_SERIES, id="dicom-two-images-one-position"),
    pytest.param(uneven_spacing, Reason.SERIES_INCONSISTENT_GEOMETRY, id="dicom-uneven-spacing"),
    pytest.param(gantry_tilt, Reason.SERIES_INCONSISTENT_GEOMETRY, id="dicom-gantry-tilt"),
    pytest.param(no_decoder, Reason.DECODER_MISSING, id="dicom-no-decoder-for-syntax"),
    pytest.param(shipped("MR_truncated.dcm", "MR_truncated.dcm (series 1)"), Reason.TRUNCATED, id="dicom-mr-truncated"),
    pytest.param(shipped("badVR.dcm"), Reason.BAD_HEADER, id="dicom-bad-vr"),
    pytest.param(shipped("no_meta.dcm"), Reason.UNSUPPORTED_FORMAT, id="dicom-stray-byte-before-first-element"),
    pytest.param(junk_in_series_folder, Reason.UNSUPPORTED_FORMAT, id="dicom-junk-in-series-folder"),
    pytest.param(shipped("test-SR.dcm"), "ignored", id="dicom-structured-report"),
    pytest.param(shipped("rtplan.dcm"), "ignored", id="dicom-rt-plan"),
    pytest.param(dicomdir, "ignored", id="dicom-dicomdir"),
    pytest.param(series_twice, Reason.DUPLICATE_CONTENT, id="dicom-series-delivered-twice"),
]


def _good_series(raw: Path) -> str:
    ct_series(raw / "good_040", "good40")
    return "good_040/ (series 5)"


def _as_dcm2niix_writes(raw: Path, source: str) -> np.ndarray:
    """The contract for DICOM (issue 4): what dcm2niix writes for the same files, after as_closest_canonical."""
    folder = raw / source.split("/")[0]
    (nii,) = dcm2niix(folder, raw.parent / "dcm2niix" / folder.name)
    return canonical(nii)[0]


DICOM_GOOD = [(_good_series, _as_dcm2niix_writes)]
