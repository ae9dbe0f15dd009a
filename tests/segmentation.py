"""Segmentation deliveries: image/mask NIfTI pairs built from nibabel's real `anatomical.nii` (stored LAS, so
canonical reorientation flips x), with masks thresholded from the image and the classic ways a pair goes wrong."""

from __future__ import annotations

import gzip
from pathlib import Path

import nibabel as nib
import numpy as np

from labzarr.convert.demo import NIBABEL_DATA

SEG_ROLES = '[items]\nid_pattern = \'(?P<id>case_\\d+)\'\nroles = { image = "*_img*", mask = "*_seg*" }\n'
SEG_MASKS = "[masks]\nclasses = [0, 1, 2]\n"


def anatomy() -> tuple[np.ndarray, np.ndarray]:
    """The real image's voxels (33x41x25 int16, file order) and its affine."""
    img = nib.load(NIBABEL_DATA / "anatomical.nii")
    return np.asarray(img.dataobj).astype(np.int16), img.affine


def classes_of(data: np.ndarray) -> np.ndarray:
    """A 3-class label map of the image: 0 background, 1 above the 60th percentile, 2 above the 93rd."""
    lo, hi = np.percentile(data, [60, 93])
    return (data > lo).astype(np.uint8) + (data > hi).astype(np.uint8)


def save(path: Path, data: np.ndarray, affine: np.ndarray, *, zooms: tuple[float, ...] | None = None) -> Path:
    """Write a gzipped NIfTI-1 (sform and qform both set to `affine`)."""
    img = nib.Nifti1Image(data, affine)
    img.set_qform(affine, code=1)
    img.set_sform(affine, code=1)
    if zooms is not None:
        img.header.set_zooms(zooms)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(img.to_bytes(), compresslevel=1, mtime=0))
    return path


def flipped_storage(data: np.ndarray, affine: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The same voxels in the same world positions, stored with `axis` reversed (its affine column negated)."""
    flip = np.eye(4)
    flip[axis, axis] = -1
    flip[axis, 3] = data.shape[axis] - 1
    return np.flip(data, axis).copy(), affine @ flip


def write_seg_delivery(raw: Path) -> dict[str, tuple[str, str]]:
    """A messy segmentation delivery; returns each sample's (or loose file's) expected (status, reason), by item."""
    data, affine = anatomy()
    mask = classes_of(data)
    expected: dict[str, tuple[str, str]] = {}

    def pair(case: str, outcome: tuple[str, str], *, image: np.ndarray | None = None) -> None:
        n = int(case.split("_")[1])
        save(raw / f"{case}_img.nii.gz", data + n if image is None else image, affine)  # distinct bytes per case
        expected[case] = outcome

    pair("case_001", ("ok", ""))
    save(raw / "case_001_seg.nii.gz", mask, affine)
    pair("case_002", ("ok", ""))  # the mask stored the other way round along x, its affine saying so
    save(raw / "case_002_seg.nii.gz", *flipped_storage(mask, affine, 0))
    pair("case_003", ("rejected", "geometry_mismatch"))  # mask's affine flips x but its voxels are the image's
    save(raw / "case_003_seg.nii.gz", mask, affine @ np.diag([-1, 1, 1, 1]))
    pair("case_004", ("rejected", "geometry_mismatch"))  # different slice spacing
    save(raw / "case_004_seg.nii.gz", mask, affine @ np.diag([1, 1, 1.25, 1]))
    pair("case_005", ("rejected", "missing_role"))  # no mask at all
    pair("case_006", ("ok", ""))  # a float mask holding integer values: stored as uint8
    save(raw / "case_006_seg.nii.gz", mask.astype(np.float32), affine)
    pair("case_007", ("rejected", "corrupt_data"))  # a resampled (interpolated) float mask
    soft = mask.astype(np.float32)
    soft[10:14, 10:14, 10:14] = 0.5
    save(raw / "case_007_seg.nii.gz", soft, affine)
    pair("case_008", ("rejected", "corrupt_data"))  # a class the spec does not list
    extra = mask.copy()
    extra[0:2, 0:2, 0:2] = 7
    save(raw / "case_008_seg.nii.gz", extra, affine)
    pair("case_009", ("rejected", "geometry_mismatch"))  # one slice short
    save(raw / "case_009_seg.nii.gz", mask[:, :, :-1], affine)
    pair("case_010", ("rejected", "truncated"))  # the mask's gzip stream cut short
    blob = save(raw / "case_010_seg.nii.gz", mask, affine).read_bytes()
    (raw / "case_010_seg.nii.gz").write_bytes(blob[: len(blob) // 2])
    save(raw / "case_011_seg.nii.gz", mask, affine)  # a mask without its image
    expected["case_011"] = ("rejected", "missing_role")
    pair("case_012", ("ok", ""))  # image and mask, plus a T1 that matches no role
    save(raw / "case_012_seg.nii.gz", mask, affine)
    save(raw / "case_012_t1.nii.gz", data + 500, affine)
    expected["case_012_t1.nii.gz"] = ("ignored", "")
    pair("case_013", ("rejected", "missing_role"))  # two masks: which one?
    save(raw / "case_013_seg.nii.gz", mask, affine)
    save(raw / "case_013_seg_v2.nii.gz", np.flip(mask, 1).copy(), affine)
    (raw / "notes.txt").write_text("case 5: mask still with the annotator\n")
    expected["notes.txt"] = ("ignored", "")
    return expected


DICOM_SEG_ROLES = ("[items]\nid_pattern = '(?P<id>case_\\d+)'\n"
                   'roles = { image = "*/ct/*", mask = "*_seg*" }\n[masks]\nclasses = [0, 1]\n')


def write_dicom_seg_delivery(raw: Path, work: Path) -> dict[str, tuple[str, str]]:
    """Real CT series (pydicom's CT5N slices, `case_NNN/ct/`) each paired with a NIfTI mask.

    The matching mask is drawn on dcm2niix's conversion of the series (what an annotator opens in
    ITK-SNAP), so its affine is dcm2niix's, written as float32; the others move it off the image's grid.
    Returns each item's expected (status, reason).
    """
    from .dicom_data import ct_series, dcm2niix

    expected: dict[str, tuple[str, str]] = {}

    def case(n: int, outcome: tuple[str, str], grid: np.ndarray | None = None) -> None:
        folder = raw / f"case_{n:03d}"
        ct_series(folder / "ct", f"case{n}")
        expected[f"case{n:03d}"] = outcome
        if grid is None:
            return
        (nii,) = dcm2niix(folder / "ct", work / f"case_{n:03d}")
        img = nib.load(nii)
        data = np.asanyarray(img.dataobj)
        mask = (data > np.percentile(data, 80)).astype(np.uint8)
        save(folder / f"case_{n:03d}_seg.nii.gz", mask, img.affine @ grid)

    case(1, ("ok", ""), np.eye(4))
    case(2, ("rejected", "geometry_mismatch"), np.diag([1.0, 1.0, 1.2, 1.0]))  # slices 3 mm apart, not 2.5 mm
    shift = np.eye(4)
    shift[0, 3] = 2.0  # two voxels along the first axis: same shape and spacing, another place
    case(3, ("rejected", "geometry_mismatch"), shift)
    case(4, ("rejected", "missing_role"))  # the series without its mask
    return expected
