"""A deterministic messy sample delivery: nibabel's and pydicom's shipped test files, synthetic CT, corruptions and a
label workbook.

Used by `make demo` and by the test fixtures; every row's expected fate is in `EXPECTED` (keyed by the
manifest's `source`: a file, or a DICOM series' folder and number), every ok item's label in
`EXPECTED_LABELS`. The workbook is what labs send: labels on the third sheet, column F, under two merged
title rows, IDs typed several ways, a hidden older sheet and distracting sheets with the same header names.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import os
import re
import shutil
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import nibabel as nib
import numpy as np
import openpyxl
import pydicom
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.worksheet import Worksheet

__all__ = ["EXPECTED", "EXPECTED_LABELS", "LABELS_SPEC", "NIBABEL_DATA", "PYDICOM_DATA", "write_demo", "write_spec",
           "xlsx_bytes"]

NIBABEL_DATA = Path(os.path.dirname(nib.__file__)) / "tests" / "data"
PYDICOM_DATA = Path(os.path.dirname(pydicom.__file__)) / "data" / "test_files"
_CT5N = PYDICOM_DATA / "dicomdirtests" / "98892001" / "CT5N"  # 5 real CT slices, 2.5 mm apart, series 5
_CT2 = PYDICOM_DATA / "dicomdirtests" / "77654033" / "CT2"  # 4 real CT slices: one at -99.5 mm, three at 103-106 mm

# rel path -> (status, reason or "")
EXPECTED: Mapping[str, tuple[str, str]] = {
    "case_001/anatomical.nii": ("ok", ""),
    "case_002/functional.nii": ("ok", ""),
    "case_003/example4d.nii.gz": ("ok", ""),
    "case_004/example_nifti2.nii.gz": ("ok", ""),
    "case_005/standard.nii.gz": ("ok", ""),
    "case_006/reoriented_anat_moved.nii": ("ok", ""),
    "CASE-007.NII.GZ": ("ok", ""),
    "case-008.nii": ("ok", ""),
    "case_009_ct_lps.nii.gz": ("ok", ""),
    "case_010_ct_oblique.nii.gz": ("ok", ""),
    "case_011.nii.gz": ("rejected", "empty_file"),
    "case_012.nii.gz": ("rejected", "truncated"),
    "case_013.nii.gz": ("rejected", "corrupt_data"),
    "case_014.nii.gz": ("rejected", "unsupported_format"),
    "case_015.nii": ("rejected", "too_large"),
    "case_016_nan.nii.gz": ("rejected", "non_finite"),
    "case_017/copy_of_standard.nii.gz": ("rejected", "duplicate_content"),
    "case_018.nii": ("rejected", "truncated"),
    "case_019.nii.gz": ("rejected", "no_label"),  # no row in the workbook
    "case_020.nii.gz": ("rejected", "label_conflict"),  # two rows, two different cell types
    "case_021/ct/ (series 5)": ("ok", ""),  # a real 5-slice CT series, files named out of order
    "case_021/rtplan.dcm": ("ignored", ""),  # DICOM without pixels (RT Plan Storage)
    "case_022/ct/ (series 2)": ("rejected", "series_missing_slices"),  # 200 mm between its first two slices
    "labels/annotations.xlsx": ("ignored", ""),
    "scan_final.nii.gz": ("rejected", "id_unmatched"),
    "notes.txt": ("ignored", ""),
    ".DS_Store": ("ignored", ""),
}


# item_id -> cell_type of every ok item, as the workbook's sheet 3 column F says.
EXPECTED_LABELS: Mapping[str, str] = {
    "case1": "neuron", "case2": "astrocyte", "case3": "neuron", "case4": "microglia", "case5": "oligodendrocyte",
    "case6": "astrocyte", "case7": "neuron", "case8": "microglia", "case9": "neuron", "case10": "astrocyte",
    "case21": "microglia",
}

LABELS_SPEC = """
[labels]
workbook = "labels/annotations.xlsx"   # relative to raw
sheet = 3                              # 1-based; the hidden sheet 2 counts
id_column = "A"
columns = { cell_type = "F" }
header_row = "auto"                    # below the two merged title rows
required = true
"""


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)  # mtime=0: the same bytes on every run


def _ct(shape: tuple[int, int, int], affine: np.ndarray, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    x, y, z = np.meshgrid(*(np.linspace(-1, 1, n) for n in shape), indexing="ij")
    body = (x**2 + y**2 < 0.8).astype(np.int16) * 1040 - 1000  # air outside, soft tissue inside
    bone = ((x - 0.2) ** 2 + y**2 < 0.05) * 900
    data = (body + bone + rng.normal(0, 20, shape)).astype(np.int16) + (z * 10).astype(np.int16)
    img = nib.Nifti1Image(data, affine)
    img.header.set_xyzt_units("mm")
    return bytes(img.to_bytes())


def write_demo(raw: Path) -> Path:
    """Write the sample delivery under `raw` (replacing it) and return `raw`."""
    if raw.exists():
        shutil.rmtree(raw)
    raw.mkdir(parents=True)
    for rel, name in [("case_001/anatomical.nii", "anatomical.nii"), ("case_002/functional.nii", "functional.nii"),
                      ("case_003/example4d.nii.gz", "example4d.nii.gz"),
                      ("case_004/example_nifti2.nii.gz", "example_nifti2.nii.gz"),
                      ("case_005/standard.nii.gz", "standard.nii.gz"),
                      ("case_006/reoriented_anat_moved.nii", "reoriented_anat_moved.nii"),
                      ("case_017/copy_of_standard.nii.gz", "standard.nii.gz")]:
        (raw / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(NIBABEL_DATA / name, raw / rel)

    lps = np.diag([-0.8, -0.8, 2.5, 1.0])
    lps[:3, 3] = [100.0, 120.0, -60.0]
    (raw / "CASE-007.NII.GZ").write_bytes(_gz(_ct((40, 36, 20), np.diag([0.9, 0.9, 3.0, 1.0]), 7)))
    (raw / "case-008.nii").write_bytes(_gz(_ct((32, 30, 18), np.diag([1.0, 1.0, 2.0, 1.0]), 8)))  # gzipped, named .nii
    (raw / "case_009_ct_lps.nii.gz").write_bytes(_gz(_ct((48, 40, 24), lps, 9)))
    oblique = np.array([[0.0, 0.0, -2.0, 50.0], [-0.7, 0.1, 0.0, 80.0], [0.0, -0.75, 0.0, 30.0], [0, 0, 0, 1.0]])
    (raw / "case_010_ct_oblique.nii.gz").write_bytes(_gz(_ct((36, 44, 16), oblique, 10)))

    good = _gz(_ct((40, 40, 20), np.eye(4), 11))
    (raw / "case_011.nii.gz").write_bytes(b"")
    (raw / "case_012.nii.gz").write_bytes(good[: int(len(good) * 0.6)])
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF
    (raw / "case_013.nii.gz").write_bytes(bytes(flipped))
    (raw / "case_014.nii.gz").write_text("This is not a NIfTI file, it is a note someone renamed.\n")
    huge = nib.Nifti1Image(np.zeros((2, 2, 2), np.int16), np.eye(4))
    huge.header.set_data_shape((30000, 30000, 30000))
    (raw / "case_015.nii").write_bytes(bytes(huge.header.binaryblock) + b"\x00" * 4 + b"\x00" * 16)
    nan = np.ones((10, 10, 10), np.float32)
    nan[3, 4, 5] = np.nan
    (raw / "case_016_nan.nii.gz").write_bytes(_gz(bytes(nib.Nifti1Image(nan, np.eye(4)).to_bytes())))
    plain = _ct((30, 30, 10), np.eye(4), 18)
    (raw / "case_018.nii").write_bytes(plain[: len(plain) - 2000])
    (raw / "scan_final.nii.gz").write_bytes(_gz(_ct((20, 20, 10), np.eye(4), 19)))
    (raw / "case_019.nii.gz").write_bytes(_gz(_ct((24, 24, 12), np.eye(4), 20)))
    (raw / "case_020.nii.gz").write_bytes(_gz(_ct((24, 20, 12), np.eye(4), 21)))
    for n, src in enumerate(sorted(_CT5N.iterdir())):  # file names need not follow slice order
        shutil.copyfile(src, _mkdir(raw / "case_021" / "ct") / f"IM{(n * 3) % 5:04d}")
    for src in sorted(_CT2.iterdir()):
        shutil.copyfile(src, _mkdir(raw / "case_022" / "ct") / f"{src.name}.dcm")
    shutil.copyfile(PYDICOM_DATA / "rtplan.dcm", raw / "case_021" / "rtplan.dcm")
    (raw / "labels").mkdir()
    (raw / "labels" / "annotations.xlsx").write_bytes(xlsx_bytes(_workbook()))
    (raw / "notes.txt").write_text("Delivery notes: case 14 was re-exported. Ask Dr. Example.\n")
    (raw / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + b"\x00" * 64)
    return raw


def _mkdir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


_FIXED_TIME = (2026, 11, 3, 0, 0, 0)


def xlsx_bytes(wb: Workbook, edit: Callable[[str, bytes], bytes] | None = None) -> bytes:
    """`wb` saved as xlsx bytes that are the same on every run; `edit(name, data)` may rewrite members."""
    buf = io.BytesIO()
    wb.save(buf)
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "docProps/core.xml":  # openpyxl stamps the save time
                data = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b"2026-11-03T00:00:00Z", data)
            if edit is not None:
                data = edit(info.filename, data)
            dst.writestr(zipfile.ZipInfo(info.filename, date_time=_FIXED_TIME), data, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _workbook() -> Workbook:
    wb = openpyxl.Workbook()
    readme = wb.active
    assert isinstance(readme, Worksheet)  # a new workbook's one sheet
    readme.title = "Read me"
    readme.append(["Cell-type annotations for the demo delivery"])
    readme.append(["Labels are on 'Annotations v2'. v1 is kept (hidden) for the audit trail."])
    readme.append([])
    readme.append(["Case", "Cell type"])  # an example table with the real sheet's header names
    readme.append(["case_000", "example"])

    old = wb.create_sheet("Annotations v1")
    old.sheet_state = "hidden"
    old.append(["Cell-type annotations, v1 (superseded)"])
    old.append(["Case", "Reader", "Reviewed", "Slices", "Notes", "Cell type"])
    for i in range(1, 11):
        old.append([f"case_{i:03d}", "R1", dt.date(2026, 10, i), 20, "", "unknown"])

    ws = wb.create_sheet("Annotations v2")
    ws.append(["Cell-type annotations, demo delivery (v2)"])
    ws.append(["Reviewed 2026-11-03 by Dr. Example; supersedes v1"])
    ws.merge_cells("A1:F1")
    ws.merge_cells("A2:F2")
    ws.append(["Case", "Reader", "Reviewed", "Slices", "Notes", "Cell type"])
    rows: list[tuple[object, str, str]] = [
        ("case_001", "neuron", ""), (" CASE-002 ", "astrocyte", "typed with spaces"), ("Case 3", "neuron", ""),
        ("case-004", "microglia", ""), ("case_5", "oligodendrocyte", ""), ("case_006", "astrocyte", ""),
        ("CASE-007", "neuron", ""), ("case_008", "microglia", ""), ("case_009", "neuron", ""),
        ("case_010", "astrocyte", ""), ("case_012", "neuron", "file was cut short"),
        ("case_016", "astrocyte", ""), ("case_017", "astrocyte", "copy of case 5?"),
        ("case_018", "=F4", "same as case 1"),  # a formula saved without a cached value
        ("case_020", "neuron", ""), ("case_020", "astrocyte", "second reader disagrees"),
        ("case_099", "neuron", "scan not delivered yet"),
        ("case_021", "microglia", "CT series"), ("case_022", "neuron", "CT series, incomplete"),
    ]
    for n, (case, cell_type, note) in enumerate(rows):
        ws.append([case, f"R{1 + n % 2}", dt.date(2026, 11, 1 + n % 3), 18 + n, note, cell_type])
        ws.cell(ws.max_row, 3).number_format = "yyyy-mm-dd"

    pivot = wb.create_sheet("Pivot")
    pivot.append(["Cell type", "Count", "Case"])
    for cell_type in ("astrocyte", "microglia", "neuron", "oligodendrocyte"):
        pivot.append([cell_type, sum(1 for _, t, _ in rows if t == cell_type), "(all)"])
    return wb


def write_spec(path: Path, *, raw: Path | str, store: Path | str, name: str = "demo", extra: str = "",
               labels: bool = True) -> Path:
    """Write a delivery.toml for a delivery at `raw` converting into `store` (with the demo's `[labels]`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'[delivery]\nname = "{name}"\nraw = "{raw}"\nstore = "{store}"\n\n'
        '[items]\nid_pattern = \'(?P<id>[A-Za-z]+[-_ ]?\\d+)\'\n'
        'id_normalize = ["strip", "casefold", "drop_separators", "strip_leading_zeros"]\n'
        'exclude = ["**/.DS_Store", "**/Thumbs.db"]\n\n'
        '[store]\nchunks = [32, 32, 32]\nshards = [256, 256, 128]\ncompressor = "blosc-lz4"\nlevel = 5\n'
        'checksum = true\n' + (LABELS_SPEC if labels else "") + extra
    )
    return path
