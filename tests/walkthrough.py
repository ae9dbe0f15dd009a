"""The scratch project both README walkthroughs run in (test_walkthrough.py, test_walkthrough_second.py):
a copy of the Makefile with a `.venv` link to this environment, a git repository, and the first delivery
of nibabel's and pydicom's real files under data/raw."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib

from .dicom_data import CT5N, copy_files
from .workbooks import Entry, lab_workbook, save

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parents[1]
NIBABEL_DATA = Path(os.path.dirname(nib.__file__)) / "tests" / "data"
NAME = "lab-2026-11"
SPEC = f"manifests/{NAME}/delivery.toml"
LABELS = {"sub_01": "neuron", "sub_02": "astrocyte", "sub_03": "neuron", "sub_04": "microglia", "sub_05": "neuron"}


def section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def first_delivery(raw: Path) -> None:
    """Five subjects from nibabel's and pydicom's files; sub_05 holds two different scans, which the default
    id_pattern gives one ID; a workbook of labels as a lab writes it."""
    shutil.copy(NIBABEL_DATA / "anatomical.nii", mk(raw / "sub_01") / "anatomical.nii")
    shutil.copy(NIBABEL_DATA / "example4d.nii.gz", mk(raw / "sub_02") / "bold.nii.gz")
    copy_files(raw / "sub_03" / "ct", CT5N, [f"IM{i:04d}" for i in range(len(CT5N))])
    shutil.copy(NIBABEL_DATA / "functional.nii", mk(raw / "sub_04") / "functional.nii")
    shutil.copy(NIBABEL_DATA / "reoriented_anat_moved.nii", mk(raw / "sub_05") / "scan_a.nii")
    shutil.copy(NIBABEL_DATA / "example_nifti2.nii.gz", raw / "sub_05" / "scan_b.nii.gz")
    (raw / "notes.txt").write_text("delivered 2026-11-30; sub_05 scanned twice\n")
    save(lab_workbook([Entry(k, v) for k, v in LABELS.items()]), mk(raw / "labels") / "labels.xlsx")


def mk(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def new_project(root: Path) -> Path:
    project = mk(root / "project")
    for name in ("Makefile", "pyproject.toml", ".gitignore"):
        shutil.copy(REPO / name, project / name)
        os.utime(project / name, (0, 0))  # older than the venv's install stamp: make installs nothing
    (project / ".venv").symlink_to(VENV)
    for cmd in (["git", "init", "-q"], ["git", "config", "user.email", "t@example.org"],
                ["git", "config", "user.name", "walkthrough"], ["git", "add", "-A"],
                ["git", "commit", "-q", "-m", "project"]):
        subprocess.run(cmd, cwd=project, check=True, capture_output=True)
    first_delivery(project / "data" / "raw" / NAME)
    return project


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "TERM": "dumb"}


def sh(cmd: str, cwd: Path, *, ok: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=300, env=env())
    if ok:
        assert out.returncode == 0, f"$ {cmd}\n{out.stdout}\n{out.stderr}"
    return out


