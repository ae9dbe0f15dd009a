from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import Row, UsageError, convert_delivery
from labzarr.convert.check import check_delivery
from labzarr.convert.cli import main
from labzarr.convert.demo import write_spec
from labzarr.convert.manifest import manifest_bytes, read_manifest
from labzarr.convert.qc.diff import diff_manifests, load_manifest_rows
from labzarr.readers import Reason

from ..conftest import make_delivery
from ..dicom_data import CT5N, copy_files, read, write


def _ok(item_id: str, source: str, sha: str, label: str = "") -> Row:
    return Row(item_id=item_id, status="ok", source=source, kind="nifti", sha256=sha, shape=(1, 4, 4, 4),
               dtype="int16", array=f"volumes/{item_id}", labels=(("cell_type", label),) if label else ())


def _write(path: Path, rows: list[Row]) -> Path:
    path.write_bytes(manifest_bytes(rows, ["cell_type"]))
    return path


def test_diff_reports_exactly_the_four_changes(tmp_path: Path) -> None:
    same = _ok("case1", "case_001.nii.gz", "a" * 64, "T")
    old = [same, _ok("case2", "case_002.nii.gz", "b" * 64, "T"), _ok("case3", "case_003.nii.gz", "c" * 64, "B"),
           _ok("case4", "case_004.nii.gz", "d" * 64, "B")]
    new = [same, _ok("case2", "case_002.nii.gz", "b" * 64, "NK"),  # label changed
           # case3 removed; case4 re-delivered truncated: newly rejected (its content changed too)
           _ok("case4", "case_004.nii.gz", "e" * 64, "B").rejected(Reason.TRUNCATED,
                                                                    "file ends at 1,000 B, expected 4,000 B"),
           _ok("case5", "case_005.nii.gz", "f" * 64, "T")]  # added
    a, b = _write(tmp_path / "old.csv", old), _write(tmp_path / "new.csv", new)
    d = diff_manifests(read_manifest(a), read_manifest(b), old_name="old.csv", new_name="new.csv")
    assert [c.source for c in d.added] == ["case_005.nii.gz"]
    assert [c.source for c in d.removed] == ["case_003.nii.gz"]
    assert [(c.source, c.old, c.new, c.also) for c in d.status] == [
        ("case_004.nii.gz", "ok", "rejected truncated", ("content changed",))]
    assert [(c.source, c.old, c.new) for c in d.labels] == [
        ("case_002.nii.gz", "label.cell_type='T'", "label.cell_type='NK'")]
    assert d.content == ()
    assert d.describe() == "\n".join([
        "manifest diff: old.csv -> new.csv",
        "items 4 -> 4: ok 4 -> 3, rejected 0 -> 1, ignored 0 -> 0",
        "",
        "added (1)",
        "  + case_005.nii.gz [case5]: ok",
        "",
        "removed (1)",
        "  - case_003.nii.gz [case3]: ok",
        "",
        "status or reason changed (1)",
        "  ~ case_004.nii.gz [case4]: ok -> rejected truncated; content changed",
        "      file ends at 1,000 B, expected 4,000 B",
        "",
        "label changed (1)",
        "  ~ case_002.nii.gz [case2]: label.cell_type='T' -> label.cell_type='NK'",
    ])


def test_diff_content_only_identical_and_limit(tmp_path: Path) -> None:
    old = [_ok(f"case{i}", f"case_{i:03d}.nii", f"{i:064x}") for i in range(5)]
    new = [_ok(f"case{i}", f"case_{i:03d}.nii", f"{i + 100:064x}") for i in range(5)]
    d = diff_manifests(read_manifest(_write(tmp_path / "a.csv", old)), read_manifest(_write(tmp_path / "b.csv", new)))
    assert len(d.content) == 5 and not (d.added or d.removed or d.status or d.labels)
    text = d.describe(limit=2)
    assert "content changed (5)" in text and text.endswith("  ... and 3 more (--limit 0 shows all)")
    assert text.count("  ~ ") == 2 and d.describe(limit=0).count("  ~ ") == 5
    same = diff_manifests(read_manifest(tmp_path / "a.csv"), read_manifest(tmp_path / "a.csv"))
    assert same.empty and same.describe().endswith("no differences")


def test_diff_names_other_changed_cells(tmp_path: Path) -> None:
    old = [_ok("case1", "case_001.nii", "a" * 64).rejected(Reason.TRUNCATED, "ends at 10 B"),
           _ok("case2", "case_002.nii", "b" * 64)]
    new = [_ok("case1", "case_001.nii", "a" * 64).rejected(Reason.TRUNCATED, "ends at 10 B, expected 20 B"),
           _ok("case02", "case_002.nii", "b" * 64)]  # a new id_pattern: same file, same content, new ID
    d = diff_manifests(read_manifest(_write(tmp_path / "a.csv", old)), read_manifest(_write(tmp_path / "b.csv", new)))
    assert not d.empty and d.other == (("array", 1), ("detail", 1), ("item_id", 1)) and d.other_rows == 2
    assert d.describe().splitlines()[-2:] == [
        "no item added, removed, or changed in status, reason, labels, split or content",
        "other cells changed in 2 rows: array (1), detail (1), item_id (1)"]


def test_diff_cli_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.csv", [_ok("case1", "case_001.nii", "a" * 64)])
    b = _write(tmp_path / "b.csv", [_ok("case1", "case_001.nii", "b" * 64)])
    assert main(["diff", str(a), str(a), "--exit-code"]) == 0
    assert main(["diff", str(a), str(b)]) == 0
    assert main(["diff", str(a), str(b), "--exit-code"]) == 1
    assert "content changed (1)" in capsys.readouterr().out


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def test_diff_against_the_committed_manifest(tmp_path: Path, scheduler: str) -> None:
    d = make_delivery(tmp_path)
    before = Counter(r["status"] for r in read_manifest(convert_delivery(d.spec, scheduler=scheduler).manifest))
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "manifests")
    _git(tmp_path, "commit", "-q", "-m", "demo delivery")
    # added: the workbook's row for case_099 had no file so far
    nib.save(nib.Nifti1Image(np.arange(6 * 7 * 8, dtype=np.int16).reshape(6, 7, 8), np.eye(4)), d.raw / "case_099.nii")
    shutil.rmtree(d.raw / "case_006")  # removed
    blob = (d.raw / "case-008.nii").read_bytes()
    (d.raw / "case-008.nii").write_bytes(blob[: len(blob) // 2])  # newly rejected
    convert_delivery(d.spec, scheduler=scheduler)
    rel = "manifests/demo/manifest.csv"
    out = subprocess.run([sys.executable, "-m", "labzarr", "diff", f"git:HEAD:{rel}", rel], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    n, ok, rej, ign = sum(before.values()), before["ok"], before["rejected"], before["ignored"]
    # The first line leads with the delivery's name: the subject of `make -s diff | git commit -F -`.
    assert lines[:2] == [f"demo: manifest diff: git:HEAD:{rel} -> {rel}",
                         f"items {n} -> {n}: ok {ok} -> {ok - 1}, rejected {rej} -> {rej + 1}, ignored {ign} -> {ign}"]
    changes = [line for line in lines if line.startswith("  ")]
    assert changes[0] == "  + case_099.nii [case99]: ok"
    assert changes[1] == "  - case_006/reoriented_anat_moved.nii [case6]: ok"
    assert changes[2] == "  ~ case-008.nii [case8]: ok -> rejected truncated; content changed"
    assert len(changes) == 3 + 1  # the detail line under the rejection


def test_one_file_series_side_by_side_diff_by_their_files(tmp_path: Path) -> None:
    """Issue 33: two one-file series at raw's root were both `./ (series 5)`; with one changed and the other
    deleted, diff showed two removals and an addition of that same name, and no content change."""
    raw = tmp_path / "raw"
    ct, mr = copy_files(raw, CT5N[:2], ["ct003.dcm", "mr002.dcm"])
    spec = write_spec(tmp_path / "manifests" / "lab" / "delivery.toml", raw=raw, store=tmp_path / "lab.zarr",
                      name="lab", labels=False)

    def manifest(name: str) -> list[dict[str, str]]:
        path = _write(tmp_path / name, [p.row for p in check_delivery(spec, root=tmp_path).planned])
        return load_manifest_rows(str(path), cwd=tmp_path)

    old = manifest("old.csv")
    assert sorted(r["source"] for r in old) == ["ct003.dcm (series 5)", "mr002.dcm (series 5)"]
    ds = read(mr)
    ds.InstitutionName = "redelivered"
    write(ds, mr)
    ct.unlink()
    diff = diff_manifests(old, manifest("new.csv"))
    assert not diff.added and not diff.status
    assert [(c.source, c.item_id) for c in diff.removed] == [("ct003.dcm (series 5)", "ct3")]
    assert [(c.source, c.item_id) for c in diff.content] == [("mr002.dcm (series 5)", "mr2")]
    assert "  ~ mr002.dcm (series 5) [mr2]: sha256 " in diff.describe()


@pytest.mark.parametrize("ref, match", [
    pytest.param("missing.csv", r"missing.csv: no such manifest", id="missing-file"),
    pytest.param("git:HEAD", r"git:HEAD: expected git:REV:PATH", id="git-no-path"),
    pytest.param("git:nosuchrev:manifest.csv", r"git:nosuchrev:manifest.csv: invalid object name 'nosuchrev'",
                 id="git-bad-rev"),
    pytest.param("git:HEAD:nope.csv", r"git:HEAD:nope.csv: path 'nope.csv' does not exist in 'HEAD'",
                 id="git-not-committed"),
    pytest.param("notes.csv", r"notes.csv: not a labzarr manifest \(no column 'item_id'\)", id="not-a-manifest"),
])
def test_diff_usage_errors(tmp_path: Path, ref: str, match: str) -> None:
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "notes.csv")
    _git(tmp_path, "commit", "-q", "-m", "x")
    with pytest.raises(UsageError, match=match):
        load_manifest_rows(ref, cwd=tmp_path)


def test_diff_a_redelivered_mask_is_a_content_change(converted_seg, tmp_path: Path) -> None:
    _, result, _ = converted_seg
    rows = read_manifest(result.manifest)
    sample = next(r for r in rows if r["status"] == "ok" and r.get("role.mask.sha256"))
    changed = [dict(r, **{"role.mask.sha256": "f" * 64, "classes": "0:1 1:2"}) if r is sample else r for r in rows]
    d = diff_manifests(rows, changed)
    assert [(c.source, c.old, c.new, c.also) for c in d.content] == [
        (sample["source"], f"role.mask.sha256 {sample['role.mask.sha256'][:12]}", "f" * 12, ("classes changed",))]
    assert not (d.added or d.removed or d.status or d.labels or d.other_rows)
