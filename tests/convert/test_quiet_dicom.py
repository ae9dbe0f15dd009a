"""`labzarr convert --quiet` on a DICOM delivery prints nothing, third-party warnings included, in a real process.

nibabel warns that its DICOM readers are experimental when nibabel.nicom is imported, pydicom warns about
values that break their VR, and each spawned worker is a fresh interpreter that would print such a warning
once to the console it inherits: a run records them in its run log (`.labzarr/last-run.json`) instead. The
deliveries: the tests' messy DICOM delivery (pydicom's and nibabel's real
files, Siemens CSA headers and corrupt files among them) always, and the real exports of dcm_qa_enh (Siemens
XA and Philips enhanced multi-frame) where its mirror is beside the project.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labzarr.convert.demo import write_spec

from .. import qa_corpora
from ..dicom_data import write_delivery


def _raw(tmp_path: Path, source: str) -> Path:
    raw = tmp_path / "raw"
    if source == "built":
        write_delivery(raw)
        return raw
    corpus = qa_corpora.find("dcm_qa_enh")
    if corpus is None or not corpus.files:
        pytest.skip(f"dcm_qa_enh is not in {qa_corpora.DEFAULT_MIRRORS}: the built delivery covers --quiet")
    return qa_corpora.extract(corpus, raw)


@pytest.mark.parametrize("source", ["built", "corpus"])
def test_quiet_prints_nothing_on_a_dicom_delivery(tmp_path: Path, source: str) -> None:
    raw = _raw(tmp_path, source)
    spec = write_spec(tmp_path / "manifests" / "dicom" / "delivery.toml", raw=raw, store=tmp_path / "dicom.zarr",
                      name="dicom", labels=False)
    cmd = [sys.executable, "-m", "labzarr", "convert", str(spec), "--workers", "2"]
    quiet = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert (quiet.stdout, quiet.stderr) == ("", "")
    # Converted for real: the manifest holds ok DICOM rows.
    manifest = (spec.parent / "manifest.csv").read_text()
    assert ",ok," in manifest and ",dicom," in manifest
    # Warnings went to the run log instead, each once however many workers met it; the built delivery's Siemens
    # CSA headers bring in nibabel's DICOM reader, and its warning (dcm_qa_enh's enhanced files need no CSA).
    logged = json.loads((tmp_path / "dicom.zarr" / ".labzarr" / "last-run.json").read_text())["warnings"]
    assert len(logged) == len(set(logged)), logged
    if source == "built":
        assert [w for w in logged if "The DICOM readers are highly experimental" in w] == [
            next(w for w in logged if w.startswith("UserWarning: The DICOM readers are highly experimental"))], logged
    # Without --quiet, the summary shows, and still no third-party warning.
    (tmp_path / "dicom.zarr").rename(tmp_path / "first.zarr")
    loud = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert loud.returncode == 0 and "manifest:" in loud.stdout, loud.stderr[-3000:]
    assert "Warning" not in loud.stdout + loud.stderr and "experimental" not in loud.stderr, loud.stderr[-3000:]
