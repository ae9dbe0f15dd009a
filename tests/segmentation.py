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


def palette_png(classes: np.ndarray) -> bytes:
    """A palette PNG label map (Pascal VOC's convention: the index is the class, the palette only shows it)."""
    import io

    from PIL import Image

    im = Image.fromarray(classes.astype(np.uint8), mode="P")
    im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * (256 * 3 - 12))
    out = io.BytesIO()
    im.save(out, "PNG")
    return out.getvalue()


def write_2d_seg_delivery(raw: Path) -> dict[str, tuple[str, str]]:
    """2D image/mask pairs: real MR slices as PNG/JPEG (tests/imaging.py), label maps thresholded from them.

    Returns each item's expected (status, reason).
    """
    from PIL import Image

    from .imaging import mr_slices, pillow_image, turbo_jpeg

    raw.mkdir(parents=True, exist_ok=True)
    expected: dict[str, tuple[str, str]] = {}

    def put(name: str, blob: bytes) -> None:
        (raw / name).write_bytes(blob)

    def labels(hwc: np.ndarray) -> np.ndarray:
        return classes_of(hwc[:, :, 0].astype(np.int16))

    img = mr_slices(48, 64, seed=1)
    put("case_001_img.png", pillow_image(img, "PNG"))  # RGB PNG + palette PNG mask
    put("case_001_seg.png", palette_png(labels(img)))
    expected["case001"] = ("ok", "")
    img = mr_slices(48, 64, channels=1, seed=2)
    put("case_002_img.jpg", turbo_jpeg(img))  # grey JPEG + 8-bit grey PNG mask holding the class values
    put("case_002_seg.png", pillow_image(labels(img)[:, :, None], "PNG"))
    expected["case002"] = ("ok", "")
    img = mr_slices(40, 32, seed=3)  # stored 40x32 with EXIF orientation 6: shown (and stored by labzarr) 32x40
    exif = Image.Exif()
    exif[0x0112] = 6
    put("case_003_img.jpg", pillow_image(img, "JPEG", quality=95, exif=exif.tobytes()))
    shown = np.rot90(img, k=-1)  # what a viewer shows, and what the annotator drew on
    put("case_003_seg.png", palette_png(labels(shown)))
    expected["case003"] = ("ok", "")
    img = mr_slices(48, 64, seed=4)
    put("case_004_img.png", pillow_image(img, "PNG"))  # the mask one column short
    put("case_004_seg.png", palette_png(labels(img)[:, :-1]))
    expected["case004"] = ("rejected", "geometry_mismatch")
    img = mr_slices(48, 64, seed=5)
    put("case_005_img.png", pillow_image(img, "PNG"))  # a colour-coded RGB mask: 3 channels
    put("case_005_seg.png", pillow_image(np.repeat(labels(img)[:, :, None] * 100, 3, axis=2).astype(np.uint8), "PNG"))
    expected["case005"] = ("rejected", "geometry_mismatch")
    img = mr_slices(48, 64, seed=6)
    put("case_006_img.png", pillow_image(img, "PNG"))  # a 0/255 mask where the classes are 0, 1, 2
    put("case_006_seg.png", pillow_image((labels(img) > 0)[:, :, None].astype(np.uint8) * 255, "PNG"))
    expected["case006"] = ("rejected", "corrupt_data")
    img = mr_slices(48, 64, seed=7)
    put("case_007_img.png", pillow_image(img, "PNG"))  # a bilevel (1-bit) mask: classes 0 and 1
    put("case_007_seg.png", pillow_image((labels(img) > 0)[:, :, None].astype(np.uint8) * 255, "PNG", mode="1"))
    expected["case007"] = ("ok", "")
    data, affine = anatomy()
    put("case_008_img.png", pillow_image(mr_slices(33, 41, seed=8), "PNG"))  # a 2D image with a NIfTI mask
    save(raw / "case_008_seg.nii.gz", classes_of(data), affine)
    expected["case008"] = ("rejected", "unsupported_format")
    return expected
