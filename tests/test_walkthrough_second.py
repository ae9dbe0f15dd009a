"""The README walkthrough, continued: the lab's second delivery, under a new name. A DICOM series folder named
like an item beside NIfTI files, single-file DICOMs at the raw root, a store wrongly put inside raw, a split
with a pinned workbook column, and a change to the delivery (a file added, one changed, one removed) that
`git diff` and `make diff` show row for row. A module of its own, so that `--dist loadfile` can run it beside
the first delivery's.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from .dicom_data import CT5N, PYDICOM_DATA, copy_files
from .walkthrough import NIBABEL_DATA, mk, new_project, section, sh
from .workbooks import HEADER, Entry, lab_workbook, save

NAME2 = "lab-2026-12"
SPEC2 = f"manifests/{NAME2}/delivery.toml"
MANIFEST2 = f"manifests/{NAME2}/manifest.csv"


def _second_delivery(raw: Path) -> None:
    """The lab's second delivery: NIfTI files named by case next to a DICOM series folder named by case (its slices
    `IM0001.dcm`..., names the default id_pattern also matches), two single-file DICOMs at the root, and a workbook
    whose `Notes` column pins one patient to `test` and is blank for the others."""
    batch = mk(raw / "batch2")
    shutil.copy(NIBABEL_DATA / "anatomical.nii", batch / "case_001.nii")
    shutil.copy(NIBABEL_DATA / "example4d.nii.gz", batch / "case_002.nii.gz")
    shutil.copy(NIBABEL_DATA / "functional.nii", batch / "case_003.nii")
    copy_files(batch / "case_004", CT5N, [f"IM{i + 1:04d}.dcm" for i in range(len(CT5N))])
    copy_files(raw, [PYDICOM_DATA / "CT_small.dcm", PYDICOM_DATA / "MR_small.dcm"])
    cases = {"case_001": "neuron", "case_002": "astrocyte", "case_003": "neuron", "case_004": "microglia",
             "case_005": "astrocyte"}  # case_005 comes with the change below
    wb = lab_workbook([Entry(k, v) for k, v in cases.items()])
    wb["Annotations v2"].cell(4, HEADER.index("Notes") + 1).value = "test"  # row 4: case_001, under two title rows
    save(wb, mk(raw / "labels") / "labels.xlsx")


def _rows(manifest: Path) -> list[dict[str, str]]:
    with manifest.open(newline="") as f:
        return list(csv.DictReader(f))


def _changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_a_second_delivery(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    raw = project / "data" / "raw" / NAME2
    _second_delivery(raw)
    spec = project / SPEC2
    manifest = project / MANIFEST2

    # A new name gets its own spec, as "A new delivery arrives" says.
    assert f"(`make init NAME={NAME2} RAW=...`)" in section("A new delivery arrives")
    out = sh(f"make init NAME={NAME2} RAW=data/raw/{NAME2}", project)
    assert f"wrote {SPEC2}" in out.stdout
    spec.write_text(spec.read_text().replace("# cell_type = 'F'", "cell_type = 'F'", 1)
                    + "\n[splits]\ntrain = 0.5\nval = 0.25\ntest = 0.25\npinned = 'Notes'\n")

    # The store inside raw: check and convert refuse at once, one line naming both paths.
    good = spec.read_text()
    inside = raw / "stores" / f"{NAME2}.zarr"
    spec.write_text(good.replace(f"store = 'data/stores/{NAME2}.zarr'", f"store = '{inside.relative_to(project)}'"))
    assert spec.read_text() != good
    for cmd in (f"make check DELIVERY={NAME2}", f"make convert DELIVERY={NAME2}"):
        bad = sh(cmd, project, ok=False)
        assert bad.returncode == 2 and "Error 2" in bad.stderr, bad.stdout + bad.stderr  # labzarr's own exit 2
        errors = [line for line in bad.stderr.splitlines() if line.startswith("labzarr: error:")]
        assert len(errors) == 1 and str(inside) in errors[0] and f"raw = '{raw}'" in errors[0], bad.stderr
        assert "Traceback" not in bad.stderr
    assert not inside.exists() and not manifest.exists()
    spec.write_text(good)

    sh(f"make check DELIVERY={NAME2}", project)
    sh(f"make convert DELIVERY={NAME2}", project)
    rows = _rows(manifest)
    by_id = {r["item_id"]: r for r in rows if r["item_id"]}
    # The series folder matches the id_pattern too: init's pattern keeps it one item of all its slices.
    assert [(r["status"], r["kind"], r["n_files"]) for r in rows if r["item_id"] == "case004"] == [
        ("ok", "dicom", str(len(CT5N)))], rows
    assert not any(r["reason"] == "series_too_short" for r in rows), rows
    # The single-file DICOMs at the root: each row names its own file, not the root folder.
    root_dicoms = sorted((r["source"], r["sha256"]) for r in rows if r["kind"] == "dicom" and "/" not in r["source"])
    assert [s.split(" ")[0] for s, _ in root_dicoms] == ["CT_small.dcm", "MR_small.dcm"], rows
    assert root_dicoms[0][1] != root_dicoms[1][1]
    assert not any(r["source"].startswith("./") for r in rows), rows
    # The pin: case001 in test; the blank pins are no label, so nobody is rejected no_label.
    assert by_id["case001"]["split"] == "test", by_id["case001"]
    assert not any(r["reason"] == "no_label" for r in rows), rows
    assert {k: (r["status"], r["label.cell_type"]) for k, r in by_id.items()} == {
        "case001": ("ok", "neuron"), "case002": ("ok", "astrocyte"), "case003": ("ok", "neuron"),
        "case004": ("ok", "microglia")}
    assert all(r["split"] for r in by_id.values())
    sh(f"git add manifests && git commit -q -m '{NAME2}: first conversion'", project)

    # The lab changes the delivery: one file added, one re-sent with other content, one withdrawn.
    shutil.copy(NIBABEL_DATA / "reoriented_anat_moved.nii", raw / "batch2" / "case_005.nii")
    (raw / "batch2" / "case_002.nii.gz").write_bytes((NIBABEL_DATA / "example_nifti2.nii.gz").read_bytes())
    (raw / "batch2" / "case_003.nii").unlink()
    assert "2 converted, 2 unchanged" in sh(f"make convert DELIVERY={NAME2}", project).stdout
    before = {r["source"]: r for r in rows}
    after = {r["source"]: r for r in _rows(manifest)}
    assert {s: r["index"] for s, r in after.items() if s in before} == {
        s: r["index"] for s, r in before.items() if s in after}  # nobody renumbered
    changed = _changed_lines(sh(f"git diff {MANIFEST2}", project).stdout)
    assert sorted((line[0], line.split(",")[1]) for line in changed) == [
        ("+", "case002"), ("+", "case005"), ("-", "case002"), ("-", "case003")], changed
    shown = sh(f"make diff DELIVERY={NAME2}", project).stdout
    for line in ("+ batch2/case_005.nii [case005]", "- batch2/case_003.nii [case003]",
                 "~ batch2/case_002.nii.gz [case002]"):
        assert line in shown, shown
