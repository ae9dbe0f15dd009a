"""The README's "Your first delivery", run literally as a newcomer would, on a delivery of nibabel's and pydicom's
real files, in a project folder that is not the repository, then the rough edges a newcomer hits on the way.

The project is a scratch folder holding a copy of the Makefile, a `.venv` link to this environment and a git
repository; the README's shell blocks of that section run there in order, as written, except the one that
writes the demo delivery (this test brings its own). Between them: a misspelled key, an ID collision, a Ctrl-C
(SIGINT to the process group on a pty) and its resume, a no-op rerun leaving `git status` clean, a flipped
byte and a deleted chunk repaired by the documented command, and `make inspect/verify/report` on a store
outside `data/`.

Then the lab's second delivery, under a new name: a DICOM series folder named like an item beside NIfTI files,
single-file DICOMs at the raw root, a store wrongly put inside raw, a split with a pinned workbook column, and a
change to the delivery (a file added, one changed, one removed) that `git diff` and `make diff` show row for row.
"""

from __future__ import annotations

import csv
import fcntl
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import nibabel as nib

from .dicom_data import CT5N, PYDICOM_DATA, copy_files
from .ptys import readable
from .workbooks import HEADER, Entry, lab_workbook, save

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parents[1]
NIBABEL_DATA = Path(os.path.dirname(nib.__file__)) / "tests" / "data"
NAME = "lab-2026-11"
SPEC = f"manifests/{NAME}/delivery.toml"
BLOCK = re.compile(r"^```(sh|console)\n(.*?)^```", re.M | re.S)
LABELS = {"sub_01": "neuron", "sub_02": "astrocyte", "sub_03": "neuron", "sub_04": "microglia", "sub_05": "neuron"}


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _commands(block: str, lang: str) -> list[str]:
    """A block's commands: every line of a sh block (comments dropped), the `$ ` lines of a console block."""
    if lang == "console":
        return [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _delivery(raw: Path) -> None:
    """Five subjects from nibabel's and pydicom's files; sub_05 holds two different scans, which the default
    id_pattern gives one ID; a workbook of labels as a lab writes it."""
    shutil.copy(NIBABEL_DATA / "anatomical.nii", _mk(raw / "sub_01") / "anatomical.nii")
    shutil.copy(NIBABEL_DATA / "example4d.nii.gz", _mk(raw / "sub_02") / "bold.nii.gz")
    copy_files(raw / "sub_03" / "ct", CT5N, [f"IM{i:04d}" for i in range(len(CT5N))])
    shutil.copy(NIBABEL_DATA / "functional.nii", _mk(raw / "sub_04") / "functional.nii")
    shutil.copy(NIBABEL_DATA / "reoriented_anat_moved.nii", _mk(raw / "sub_05") / "scan_a.nii")
    shutil.copy(NIBABEL_DATA / "example_nifti2.nii.gz", raw / "sub_05" / "scan_b.nii.gz")
    (raw / "notes.txt").write_text("delivered 2026-11-30; sub_05 scanned twice\n")
    save(lab_workbook([Entry(k, v) for k, v in LABELS.items()]), _mk(raw / "labels") / "labels.xlsx")


def _mk(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _project(root: Path) -> Path:
    project = _mk(root / "project")
    for name in ("Makefile", "pyproject.toml", ".gitignore"):
        shutil.copy(REPO / name, project / name)
        os.utime(project / name, (0, 0))  # older than the venv's install stamp: make installs nothing
    (project / ".venv").symlink_to(VENV)
    for cmd in (["git", "init", "-q"], ["git", "config", "user.email", "t@example.org"],
                ["git", "config", "user.name", "walkthrough"], ["git", "add", "-A"],
                ["git", "commit", "-q", "-m", "project"]):
        subprocess.run(cmd, cwd=project, check=True, capture_output=True)
    _delivery(project / "data" / "raw" / NAME)
    return project


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "TERM": "dumb"}


def _sh(cmd: str, cwd: Path, *, ok: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=300, env=_env())
    if ok:
        assert out.returncode == 0, f"$ {cmd}\n{out.stdout}\n{out.stderr}"
    return out


def _interrupted_on_pty(cmd: str, cwd: Path, *, once: bytes) -> tuple[int, bytes]:
    """Run `cmd` on a pty; once its output holds `once`, SIGINT its process group (a terminal's Ctrl-C)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execve("/bin/bash", ["bash", "-c", cmd], _env())
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    out, sent, deadline = b"", False, time.monotonic() + 120
    while time.monotonic() < deadline:
        if not sent and once in out:
            os.killpg(pid, signal.SIGINT)
            sent = True
        if readable(fd, 0.05):
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert sent, out.decode(errors="replace")
    return os.waitstatus_to_exitcode(status), out


def _first_delivery_blocks() -> list[tuple[str, list[str]]]:
    blocks = [(lang, _commands(body, lang)) for lang, body in BLOCK.findall(_section("Your first delivery"))]
    # The one block a user with a real delivery skips: it writes the demo delivery to follow along.
    demo = [b for b in blocks if any("labzarr demo" in c for c in b[1])]
    assert len(demo) == 1 and len(demo[0][1]) == 1, demo
    return [b for b in blocks if b is not demo[0]]


def _flip_and_delete(store: Path) -> tuple[str, str]:
    """Flip one byte inside one array's chunk data and delete another array's chunk file."""
    chunks = sorted(p for p in (store / "volumes").rglob("*") if p.is_file() and "c" in p.relative_to(store).parts)
    by_array = {}
    for p in chunks:
        by_array.setdefault(p.relative_to(store / "volumes").parts[0], p)
    (flip_at, flipped), (gone_at, gone) = list(by_array.items())[:2]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 3] ^= 0xFF
    flipped.write_bytes(bytes(data))
    gone.unlink()
    return flip_at, gone_at


def test_a_first_delivery_as_the_readme_says(tmp_path: Path) -> None:
    project = _project(tmp_path)
    spec = project / SPEC
    blocks = _first_delivery_blocks()
    assert [c for _, cmds in blocks for c in cmds][:1] == [f"make init NAME={NAME} RAW=data/raw/{NAME}"]

    for _, cmds in blocks:
        for cmd in cmds:
            if cmd.startswith("make check"):
                # A misspelled key first: one line naming it, a did-you-mean, exit 2 from make's labzarr.
                good = spec.read_text()
                spec.write_text(good.replace("[items]\n", "[items]\nid_patern = 'x'\n", 1))
                bad = _sh(cmd, project, ok=False)
                assert bad.returncode == 2, bad.stdout + bad.stderr
                assert "[items] unknown key 'id_patern'" in bad.stderr and "did you mean 'id_pattern'?" in bad.stderr
                assert "Traceback" not in bad.stderr
                spec.write_text(good)
                out = _sh(cmd, project)
                # The ID collision: sub_05's two scans, named with their files.
                assert "item ID(s) given to distinct contents" in out.stdout
                assert "'sub05': 2 contents: sub_05/scan_a.nii, sub_05/scan_b.nii.gz" in out.stdout
                assert "items with a workbook row: 6 of 6" in out.stdout
            elif cmd.startswith("make convert"):
                code, shown = _interrupted_on_pty(cmd, project, once=b"converting")
                assert b"labzarr: interrupted; rerun the same command to resume" in shown
                assert b"Traceback" not in shown, shown.decode(errors="replace")
                assert code != 0
                out = _sh(cmd, project)  # the same command resumes
                assert "converted" in out.stdout
                assert "warning: 1 item ID(s) given to distinct contents" in out.stdout
            else:
                out = _sh(cmd, project)
                if cmd.startswith("make init"):
                    assert f"wrote {SPEC}" in out.stdout
                    assert "# cell_type = 'F'" in spec.read_text()
                if cmd.startswith("make report"):
                    assert (project / "data" / "reports" / NAME / "index.html").is_file()
    rows = (spec.parent / "manifest.csv").read_text()
    assert rows.count(",ok,") == 6, rows  # five subjects, sub_05 twice; notes and workbook ignored
    assert _sh("git log --oneline", project).stdout.count("\n") == 2  # the README's commit landed

    # A no-op rerun: nothing converted, the committed manifests byte for byte as they were.
    assert "0 converted, 6 unchanged" in _sh(f"make convert DELIVERY={NAME}", project).stdout
    assert _sh("git status --porcelain", project).stdout == ""

    # Damage, found by verify and repaired by the README's command.
    flipped, gone = _flip_and_delete(project / "data" / "stores" / f"{NAME}.zarr")
    damaged = _sh(f"make verify DELIVERY={NAME}", project, ok=False)
    assert damaged.returncode != 0 and flipped in damaged.stdout and gone in damaged.stdout, damaged.stdout
    # make exits 2 on any failure; the target says that labzarr's own verdict was damage (its exit code 1).
    assert f"make: verify found damage in {SPEC} (labzarr verify exits 1" in damaged.stderr, damaged.stderr
    repair = [c for lang, body in BLOCK.findall(_section("Checking and repairing a store"))
              for c in _commands(body, lang) if "--repair" in c]
    assert repair == [f".venv/bin/labzarr verify --repair {SPEC}"]
    out = _sh(repair[0], project)
    assert "2 repaired" in out.stdout and "ok: every chunk present and intact" in out.stdout, out.stdout
    assert "ok: every chunk present" in _sh(f"make verify DELIVERY={NAME}", project).stdout
    assert _sh("git status --porcelain", project).stdout == ""

    # The store moved to another disk: every make target takes it from the spec.
    elsewhere = tmp_path / "other-disk" / f"{NAME}.zarr"
    spec.write_text(spec.read_text().replace(f"store = 'data/stores/{NAME}.zarr'", f"store = '{elsewhere}'"))
    assert f"store:    {elsewhere}" in _sh(f"make convert DELIVERY={NAME}", project).stdout
    assert "sub01" in _sh(f"make inspect DELIVERY={NAME}", project).stdout
    assert "ok: every chunk present" in _sh(f"make verify DELIVERY={NAME}", project).stdout
    assert "6 ok items" in _sh(f"make report DELIVERY={NAME}", project).stdout
    assert not (project / "data" / "stores" / f"{NAME}-2.zarr").exists()
    # The edited spec, and summary.json recording its new hash; manifest.csv is as committed.
    changed = {line.split()[-1] for line in _sh("git status --porcelain", project).stdout.splitlines()}
    assert changed == {SPEC, f"manifests/{NAME}/summary.json"}


NAME2 = "lab-2026-12"
SPEC2 = f"manifests/{NAME2}/delivery.toml"
MANIFEST2 = f"manifests/{NAME2}/manifest.csv"


def _second_delivery(raw: Path) -> None:
    """The lab's second delivery: NIfTI files named by case next to a DICOM series folder named by case (its slices
    `IM0001.dcm`..., names the default id_pattern also matches), two single-file DICOMs at the root, and a workbook
    whose `Notes` column pins one patient to `test` and is blank for the others."""
    batch = _mk(raw / "batch2")
    shutil.copy(NIBABEL_DATA / "anatomical.nii", batch / "case_001.nii")
    shutil.copy(NIBABEL_DATA / "example4d.nii.gz", batch / "case_002.nii.gz")
    shutil.copy(NIBABEL_DATA / "functional.nii", batch / "case_003.nii")
    copy_files(batch / "case_004", CT5N, [f"IM{i + 1:04d}.dcm" for i in range(len(CT5N))])
    copy_files(raw, [PYDICOM_DATA / "CT_small.dcm", PYDICOM_DATA / "MR_small.dcm"])
    cases = {"case_001": "neuron", "case_002": "astrocyte", "case_003": "neuron", "case_004": "microglia",
             "case_005": "astrocyte"}  # case_005 comes with the change below
    wb = lab_workbook([Entry(k, v) for k, v in cases.items()])
    wb["Annotations v2"].cell(4, HEADER.index("Notes") + 1).value = "test"  # row 4: case_001, under two title rows
    save(wb, _mk(raw / "labels") / "labels.xlsx")


def _rows(manifest: Path) -> list[dict[str, str]]:
    with manifest.open(newline="") as f:
        return list(csv.DictReader(f))


def _changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_a_second_delivery(tmp_path: Path) -> None:
    project = _project(tmp_path)
    raw = project / "data" / "raw" / NAME2
    _second_delivery(raw)
    spec = project / SPEC2
    manifest = project / MANIFEST2

    # A new name gets its own spec, as "A new delivery arrives" says.
    assert f"(`make init NAME={NAME2} RAW=...`)" in _section("A new delivery arrives")
    out = _sh(f"make init NAME={NAME2} RAW=data/raw/{NAME2}", project)
    assert f"wrote {SPEC2}" in out.stdout
    spec.write_text(spec.read_text().replace("# cell_type = 'F'", "cell_type = 'F'", 1)
                    + "\n[splits]\ntrain = 0.5\nval = 0.25\ntest = 0.25\npinned = 'Notes'\n")

    # The store inside raw: check and convert refuse at once, one line naming both paths.
    good = spec.read_text()
    inside = raw / "stores" / f"{NAME2}.zarr"
    spec.write_text(good.replace(f"store = 'data/stores/{NAME2}.zarr'", f"store = '{inside.relative_to(project)}'"))
    assert spec.read_text() != good
    for cmd in (f"make check DELIVERY={NAME2}", f"make convert DELIVERY={NAME2}"):
        bad = _sh(cmd, project, ok=False)
        assert bad.returncode == 2 and "Error 2" in bad.stderr, bad.stdout + bad.stderr  # labzarr's own exit 2
        errors = [line for line in bad.stderr.splitlines() if line.startswith("labzarr: error:")]
        assert len(errors) == 1 and str(inside) in errors[0] and f"raw = '{raw}'" in errors[0], bad.stderr
        assert "Traceback" not in bad.stderr
    assert not inside.exists() and not manifest.exists()
    spec.write_text(good)

    _sh(f"make check DELIVERY={NAME2}", project)
    _sh(f"make convert DELIVERY={NAME2}", project)
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
    _sh(f"git add manifests && git commit -q -m '{NAME2}: first conversion'", project)

    # The lab changes the delivery: one file added, one re-sent with other content, one withdrawn.
    shutil.copy(NIBABEL_DATA / "reoriented_anat_moved.nii", raw / "batch2" / "case_005.nii")
    (raw / "batch2" / "case_002.nii.gz").write_bytes((NIBABEL_DATA / "example_nifti2.nii.gz").read_bytes())
    (raw / "batch2" / "case_003.nii").unlink()
    assert "2 converted, 2 unchanged" in _sh(f"make convert DELIVERY={NAME2}", project).stdout
    before = {r["source"]: r for r in rows}
    after = {r["source"]: r for r in _rows(manifest)}
    assert {s: r["index"] for s, r in after.items() if s in before} == {
        s: r["index"] for s, r in before.items() if s in after}  # nobody renumbered
    changed = _changed_lines(_sh(f"git diff {MANIFEST2}", project).stdout)
    assert sorted((line[0], line.split(",")[1]) for line in changed) == [
        ("+", "case002"), ("+", "case005"), ("-", "case002"), ("-", "case003")], changed
    shown = _sh(f"make diff DELIVERY={NAME2}", project).stdout
    for line in ("+ batch2/case_005.nii [case005]", "- batch2/case_003.nii [case003]",
                 "~ batch2/case_002.nii.gz [case002]"):
        assert line in shown, shown
