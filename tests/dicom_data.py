"""DICOM test data: pydicom's and nibabel's shipped files, and series built from their real slices.

Every builder writes into a folder it is given and returns the paths it wrote;
nothing here reaches the network (pydicom's `get_testdata_file` is never called).
"""

from __future__ import annotations

import copy
import gzip
import math
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.uid import generate_uid

PYDICOM_DATA = Path(os.path.dirname(pydicom.__file__)) / "data" / "test_files"
NICOM_DATA = Path(os.path.dirname(nib.__file__)) / "nicom" / "tests" / "data"
DICOMDIR_TESTS = PYDICOM_DATA / "dicomdirtests"
CT5N = sorted((DICOMDIR_TESTS / "98892001" / "CT5N").iterdir())  # 5 real CT slices, 2.5 mm apart
DCM2NIIX = Path(sys.executable).parent / "dcm2niix"  # the PyPI package's binary, in the same environment


def copy_files(dest: Path, files: Sequence[Path], names: Sequence[str] | None = None) -> list[Path]:
    """Copy `files` into `dest` (optionally renamed), gunzipping nibabel's `.dcm.gz` files."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i, src in enumerate(files):
        name = names[i] if names else src.name.removesuffix(".gz")
        target = dest / name
        if src.suffix == ".gz":
            target.write_bytes(gzip.decompress(src.read_bytes()))
        else:
            shutil.copyfile(src, target)
        out.append(target)
    return out


def read(path: Path) -> Dataset:
    """A full dataset, pixels included."""
    return pydicom.dcmread(path)


def write(ds: Dataset, path: Path) -> Path:
    """Write `ds` as a DICOM file with preamble and file meta."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)
    return path


def _renew(ds: Dataset, *, instance: int) -> Dataset:
    out = copy.deepcopy(ds)
    out.SOPInstanceUID = generate_uid(entropy_srcs=[str(ds.SOPInstanceUID), str(instance)])
    out.file_meta.MediaStorageSOPInstanceUID = out.SOPInstanceUID
    out.InstanceNumber = instance
    return out


def _set_pixels(ds: Dataset, pixels: np.ndarray) -> None:
    ds.PixelData = np.ascontiguousarray(pixels.astype(ds.pixel_array.dtype)).tobytes()


def four_d(dest: Path, slices: Sequence[Path] = CT5N, *, volumes: int = 3) -> list[Path]:
    """An fMRI-like series: the same positions repeated `volumes` times, each time point with other (real) pixels."""
    series = generate_uid(entropy_srcs=["four_d", str(volumes)])
    out = []
    for t in range(volumes):
        for k, src in enumerate(slices):
            ds = _renew(read(src), instance=t * len(slices) + k + 1)
            ds.Modality = "MR"
            ds.SeriesInstanceUID = series
            ds.AcquisitionNumber = t + 1
            ds.TemporalPositionIdentifier = t + 1
            _set_pixels(ds, np.roll(ds.pixel_array, 3 * t, axis=1))  # real content, shifted per time point
            out.append(write(ds, dest / f"vol{t + 1}_slice{k + 1}.dcm"))
    return out


def multi_echo(dest: Path, slices: Sequence[Path] = CT5N, *, echoes: int = 2) -> list[Path]:
    """One series holding `echoes` echoes of the same slices (dcm2niix writes one file per echo)."""
    series = generate_uid(entropy_srcs=["multi_echo", str(echoes)])
    out = []
    for e in range(echoes):
        for k, src in enumerate(slices):
            ds = _renew(read(src), instance=e * len(slices) + k + 1)
            ds.Modality = "MR"
            ds.SeriesInstanceUID = series
            ds.EchoNumbers = e + 1
            ds.EchoTime = 10.0 * (e + 1)
            _set_pixels(ds, np.flipud(ds.pixel_array) if e else ds.pixel_array)
            out.append(write(ds, dest / f"echo{e + 1}_{k + 1}.dcm"))
    return out


def csa2(tags: dict[str, tuple[str, Sequence[str]]]) -> bytes:
    """A Siemens CSA2 ("SV10") header holding `tags` (name -> (VR, values)), as nibabel and dcm2niix read it."""
    out = bytearray(b"SV10\x04\x03\x02\x01" + struct.pack("<2I", len(tags), 77))
    for name, (vr, values) in tags.items():
        out += struct.pack("<64si4s3i", name.encode(), len(values), vr.encode(), 0, len(values), 77)
        for value in values:
            data = value.encode() + b"\x00"
            out += struct.pack("<4i", len(data), len(data), 77, len(data)) + data + b"\x00" * (-len(data) % 4)
    return bytes(out)


def mosaic(dest: Path, slices: Sequence[Path] = CT5N, *, volumes: int = 1, name: str = "mosaic") -> list[Path]:
    """Siemens-style mosaics built from real slices: one file per volume, tiles in slice order along the normal."""
    dss = sorted((read(p) for p in slices), key=lambda d: float(np.dot(d.ImagePositionPatient, _normal(d))))
    first = dss[0]
    rows, cols = int(first.Rows), int(first.Columns)
    grid = math.ceil(math.sqrt(len(dss)))
    normal = _normal(first)
    step = float(np.dot(np.subtract(dss[1].ImagePositionPatient, first.ImagePositionPatient), normal))
    series = generate_uid(entropy_srcs=["mosaic", name, str(volumes)])
    out = []
    for t in range(volumes):
        tiles = np.zeros((grid * rows, grid * cols), dtype=first.pixel_array.dtype)
        for k, ds in enumerate(dss):
            r, c = divmod(k, grid)
            tiles[r * rows:(r + 1) * rows, c * cols:(c + 1) * cols] = np.roll(ds.pixel_array, 2 * t, axis=0)
        ds = _renew(first, instance=t + 1)
        ds.Modality = "MR"
        ds.Manufacturer = "SIEMENS"
        ds.ImageType = ["ORIGINAL", "PRIMARY", "M", "ND", "MOSAIC"]
        ds.SeriesInstanceUID = series
        ds.AcquisitionNumber = t + 1
        ds.Rows, ds.Columns = tiles.shape
        ds.SpacingBetweenSlices = step
        ds.PixelData = tiles.tobytes()
        # Siemens stores the position of the whole mosaic's corner; undo nibabel's documented correction.
        iop = np.array(first.ImageOrientationPatient, dtype=float).reshape(2, 3).T
        q = np.fliplr(iop) * np.array(first.PixelSpacing, dtype=float)
        shift = (np.array(tiles.shape) - np.array([rows, cols])) / 2
        ds.ImagePositionPatient = [round(float(v), 6) for v in np.array(first.ImagePositionPatient, float) - q @ shift]
        block = ds.private_block(0x0029, "SIEMENS CSA HEADER", create=True)
        block.add_new(0x10, "OB", csa2({"NumberOfImagesInMosaic": ("US", [str(len(dss))]),
                                        "SliceNormalVector": ("FD", [f"{v:.8f}" for v in normal])}))
        out.append(write(ds, dest / f"{name}_{t + 1}.dcm"))
    return out


def _normal(ds: Dataset) -> np.ndarray:
    iop = np.array(ds.ImageOrientationPatient, dtype=float)
    return np.cross(iop[:3], iop[3:])


def edit_series(dest: Path, slices: Sequence[Path], edit: Callable[[int, Dataset], Dataset | None]) -> list[Path]:
    """Copy a series, letting `edit(k, ds)` change slice k (return None to leave the slice out)."""
    out = []
    for k, src in enumerate(slices):
        ds = edit(k, read(src))
        if ds is not None:
            out.append(write(ds, dest / src.name))
    return out


def without_preamble(src: Path, dest: Path) -> Path:
    """The same dataset written with neither preamble nor File Meta (implicit VR little endian)."""
    ds = read(src)
    ds.preamble = None
    ds.file_meta = pydicom.dataset.FileMetaDataset()
    dest.parent.mkdir(parents=True, exist_ok=True)
    pydicom.dcmwrite(dest, ds, implicit_vr=True, little_endian=True, enforce_file_format=False)
    return dest


def with_syntax(src: Path, dest: Path, transfer_syntax: str) -> Path:
    """`src` relabelled with another transfer syntax UID (its pixel bytes unchanged)."""
    ds = read(src)
    ds.file_meta.TransferSyntaxUID = transfer_syntax
    return write(ds, dest)


def dcm2niix(folder: Path, out: Path) -> list[Path]:
    """Run the dcm2niix binary on `folder`; the NIfTI files it wrote, sorted."""
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(DCM2NIIX), "-z", "n", "-b", "n", "-f", "%s_%e_%j", "-o", str(out), str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(out.glob("*.nii"))


def canonical(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A NIfTI's voxels after `as_closest_canonical`, as (C, X, Y, Z) (RGB fields become channels), and its affine."""
    img = nib.as_closest_canonical(nib.load(path))
    data = np.asanyarray(img.dataobj)
    if data.dtype.fields:
        data = np.stack([data[n] for n in data.dtype.names or ()], axis=-1)
    data = data.reshape(data.shape[:3] + (-1,), order="F")
    return np.moveaxis(data, 3, 0), np.asarray(img.affine)


__all__ = ["CT5N", "DCM2NIIX", "DICOMDIR_TESTS", "NICOM_DATA", "PYDICOM_DATA", "canonical", "copy_files", "csa2",
           "dcm2niix", "edit_series", "four_d", "mosaic", "multi_echo", "read", "with_syntax", "without_preamble",
           "write", "write_delivery"]


def ct_series(dest: Path, patient: str, edit: Callable[[int, Dataset], Dataset | None] | None = None,
              *, preamble: bool = True) -> list[Path]:
    """CT5N's five real slices as `patient`'s own series (new UIDs, so never duplicate content of another case)."""
    study = generate_uid(entropy_srcs=[patient, "study"])
    series = generate_uid(entropy_srcs=[patient, "series"])
    out = []
    for k, src in enumerate(CT5N):
        ds = read(src)
        ds.PatientID = patient
        ds.StudyInstanceUID, ds.SeriesInstanceUID = study, series
        ds.SOPInstanceUID = generate_uid(entropy_srcs=[patient, str(k)])
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
        edited = edit(k, ds) if edit else ds
        if edited is None:
            continue
        if preamble:
            out.append(write(edited, dest / src.name))
        else:
            tmp = write(edited, dest / f".{src.name}.tmp")
            out.append(without_preamble(tmp, dest / src.name))
            tmp.unlink()
    return out


def _compressed(k: int, ds: Dataset) -> Dataset:
    ds.compress(pydicom.uid.RLELossless)
    return ds


def _no_decoder(k: int, ds: Dataset) -> Dataset:
    ds.compress(pydicom.uid.RLELossless)
    ds.file_meta.TransferSyntaxUID = pydicom.uid.MPEG2MPML  # encapsulated, in a syntax nothing installed decodes
    return ds


def _tilted(k: int, ds: Dataset) -> Dataset:
    ipp = [float(v) for v in ds.ImagePositionPatient]
    ds.ImagePositionPatient = [ipp[0], ipp[1] + ipp[2] * math.tan(math.radians(15)), ipp[2]]
    return ds


def _flipped(k: int, ds: Dataset) -> Dataset:
    ds.ImageOrientationPatient = [1, 0, 0, 0, -1, 0]  # columns run anterior: the slice normal points down (-z)
    return ds


def _sagittal(k: int, ds: Dataset) -> Dataset:
    ipp = [float(v) for v in ds.ImagePositionPatient]
    ds.ImageOrientationPatient = [0, 1, 0, 0, 0, -1]  # rows anterior->posterior, columns head->feet: slices along x
    ds.ImagePositionPatient = [ipp[2], ipp[0], ipp[1]]
    return ds


def write_delivery(raw: Path) -> Path:
    """A messy DICOM delivery: pydicom's and nibabel's real series, series built from them, and corruptions.

    One case per folder (`case_NNN`); `tests/convert/test_dicom_run.py` holds every file's expected fate.
    """
    shutil.copytree(DICOMDIR_TESTS, raw / "case_001")  # CR radiographs, CT and MR series, localizers, DICOMDIRs
    four_d(raw / "case_002" / "fmri", volumes=3)
    mosaic(raw / "case_003", volumes=1)
    mosaic(raw / "case_004" / "bold", volumes=3)
    multi_echo(raw / "case_005", echoes=2)
    copy_files(raw / "case_006", [PYDICOM_DATA / "rtdose.dcm"])
    copy_files(raw / "case_007", [PYDICOM_DATA / "rtdose_rle.dcm"])
    copy_files(raw / "case_008" / "dwi", [NICOM_DATA / "siemens_dwi_0.dcm.gz", NICOM_DATA / "siemens_dwi_1000.dcm.gz"])
    copy_files(raw / "case_009", [NICOM_DATA / "philips_mprage.dcm.gz"])
    copy_files(raw / "case_010", [NICOM_DATA / "0.dcm", NICOM_DATA / "1.dcm"])
    copy_files(raw / "case_011", [PYDICOM_DATA / "SC_rgb_rle_2frame.dcm"])
    ct_series(raw / "case_012" / "rle", "case12", _compressed)
    ct_series(raw / "case_013", "case13", _flipped)
    ct_series(raw / "case_014", "case14", _sagittal)
    # -- messy
    ct_series(raw / "case_020", "case20", lambda k, ds: None if k == 2 else ds)  # a slice lost in the middle
    cut = ct_series(raw / "case_021", "case21")[3]
    cut.write_bytes(cut.read_bytes()[:-200])  # one member cut inside its pixel data
    ct_series(raw / "case_022", "case22")
    four_d(raw / "case_022", volumes=2)  # two series in one folder
    first = ct_series(raw / "case_023", "case23")
    shutil.copyfile(first[1], raw / "case_023" / "copy_of_slice.dcm")  # the same file twice
    ct_series(raw / "case_024", "case24")
    other = read(raw / "case_024" / CT5N[1].name)
    other.SOPInstanceUID = generate_uid(entropy_srcs=["case24", "reexported"])
    other.file_meta.MediaStorageSOPInstanceUID = other.SOPInstanceUID
    _set_pixels(other, np.flipud(other.pixel_array))
    write(other, raw / "case_024" / "reexported.dcm")  # same position, same numbers, other pixels
    ct_series(raw / "case_025", "case25")
    (raw / "case_025" / "junk.dcm").write_bytes(bytes(range(256)) * 8)
    (raw / "case_025" / "notes.txt").write_text("Slices from the old PACS, re-exported 2024.\n")
    (raw / "case_025" / "empty.dcm").write_bytes(b"")
    ct_series(raw / "case_026", "case26")
    copy_files(raw / "case_026", [DICOMDIR_TESTS / "DICOMDIR"])
    for i, p in enumerate(ct_series(raw / "case_027", "case27")):  # one series spread over two folders
        part = p.parent / ("part1" if i < 2 else "part2")
        part.mkdir(exist_ok=True)
        p.rename(part / p.name)
    ct_series(raw / "case_028", "case28", preamble=False)
    ct_series(raw / "case_029", "case29", _no_decoder)
    ct_series(raw / "case_030", "case30", _tilted)
    copy_files(raw / "case_031", [PYDICOM_DATA / n for n in ("MR_truncated.dcm", "no_meta.dcm", "rtplan.dcm",
                                                            "test-SR.dcm", "badVR.dcm")])
    copy_files(raw / "case_032", CT5N)  # the very series of case_001 again
    return raw
