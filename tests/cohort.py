"""A cohort delivery for the split and selection tests: patients with timepoints, a workbook, 2D and 3D items.

24 patients (P001..P024) with 1 to 3 timepoints each (NIfTI volumes of distinct content), a
diagnosis per timepoint in the workbook (the same for all of a patient's timepoints), and two
PNG images (P901, P902), so the store mixes 2D and 3D; item IDs normalise to e.g. `p007t2`.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import openpyxl
from PIL import Image

N_PATIENTS = 24
DIAGNOSES = ("tumour", "healthy", "healthy")  # by patient number mod 3: 8 tumour, 16 healthy


def timepoints(p: int) -> int:
    return 1 + p % 3


def volume(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.random.default_rng(seed).integers(0, 1000, size=(6, 5, 4), dtype=np.int16)
    nib.save(nib.Nifti1Image(data, np.diag([1.0, 1.0, 2.0, 1.0])), path)


def write_raw(raw: Path, patients: range, *, pins: dict[str, str] | None = None,
               extra_rows: list[tuple[str, str]] = ()) -> None:
    rows = list(extra_rows)
    for p in patients:
        for t in range(1, timepoints(p) + 1):
            item = f"P{p:03d}_t{t}"
            volume(raw / f"P{p:03d}" / f"{item}.nii.gz", seed=p * 10 + t)
            rows.append((item, DIAGNOSES[p % 3]))
    for n in (1, 2):
        img = np.random.default_rng(900 + n).integers(0, 255, size=(12, 10), dtype=np.uint8)
        (raw / "photos").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(raw / "photos" / f"P9{n:02d}_t1.png")
        rows.append((f"P9{n:02d}_t1", "healthy"))
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["ID", "Diagnosis", "Split"])
    for item, diagnosis in rows:
        ws.append([item, diagnosis, (pins or {}).get(item, "")])
    wb.save(raw / "labels.xlsx")


SPEC = """[delivery]
name = "cohort"
raw = "data/raw/cohort"
store = "data/stores/cohort.zarr"

[items]
id_pattern = '(?P<id>(?P<patient>P\\d+)_t\\d)'

[labels]
workbook = "labels.xlsx"
id_column = "A"
columns = {{ diagnosis = "B" }}
required = {required}

[splits]
{splits}
"""

FRACTIONS = 'train = 0.5\nval = 0.25\ntest = 0.25\ngroup = "patient"\nstratify = "diagnosis"\nseed = 7\n'


def project(root: Path, splits: str = FRACTIONS, patients: range = range(1, N_PATIENTS + 1), *,
            required: bool = False, **kw: object) -> Path:
    """The cohort under `root`; the workbook's column C ("Split") holds `pins`, for `[splits] pinned`."""
    write_raw(root / "data" / "raw" / "cohort", patients, **kw)  # type: ignore[arg-type]
    spec = root / "manifests" / "cohort" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC.format(splits=splits, required=str(required).lower()))
    return spec
