"""`make bench` loads every section: a section named like a repository folder must not import that package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_bench_section_loads() -> None:
    out = subprocess.run([sys.executable, "bench/run.py", "--check"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = [line.split(":", 1)[0] for line in out.stdout.splitlines()]
    # every section module is registered (bench/common.py and bench/run.py are the harness)
    assert sorted(loaded) == sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem not in ("common", "run"))
    # the conversion section is bench/convert.py, not the labzarr.convert folder it is named like
    assert "conversion: uncompressed MB/s" in out.stdout


def test_unknown_section_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "bench/run.py", "--only", "convertt"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "unknown section(s) convertt" in out.stderr


def _mirror(root: Path, name: str, files: list[Path]) -> None:
    """A bare git mirror `root/neurolabusc+<name>/repo` whose `In/` holds `files`, as the corpora's are kept."""
    work = root / f"{name}-work"
    for f in files:
        (work / "In" / "CT5N").mkdir(parents=True, exist_ok=True)
        (work / "In" / "CT5N" / f.name).write_bytes(f.read_bytes())
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.org", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "In"], ["commit", "-q", "-m", "In"]):
        subprocess.run([*git, *args], cwd=work, check=True, capture_output=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(root / f"neurolabusc+{name}" / "repo")], check=True,
                   capture_output=True)


def test_dicom_section_converts_real_corpora_from_their_mirrors(tmp_path: Path) -> None:
    """The dicom section's real-export groups on a tiny run: one corpus present (a bare mirror of five real CT
    slices), the other four named as absent on one line; labzarr and dcm2niix both timed, with a ratio."""
    from .dicom_data import CT5N

    _mirror(tmp_path / "mirrors", "dcm_qa_enh", CT5N)
    out = subprocess.run([sys.executable, "bench/run.py", "--only", "dicom", "--corpora-only", "--corpora",
                          str(tmp_path / "mirrors"), "--workdir", str(tmp_path / "work")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    (absent,) = [line for line in lines if line.startswith("DICOM corpora:")]
    assert all(name in absent for name in ("dcm_qa_nih", "dcm_qa,", "dcm_qa_ge", "dcm_qa_philips"))
    assert "dcm_qa_enh" not in absent
    group = lines.index(next(line for line in lines if line.startswith("### real exports, neurolabusc/dcm_qa_enh:")))
    assert "5 files" in lines[group]
    baseline, ours = lines[group + 2], lines[group + 3]
    assert baseline.startswith("dcm2niix -z n -b y") and "(baseline)" in baseline
    assert ours.startswith("labzarr convert --workers 2") and ours.split()[6].endswith("x")
    assert "vs dcm2niix (target for <= 50 files: +1.0 s)" in ours and "--quiet printed" not in ours
    assert any(line.startswith("### real exports, total of the 1 corpora present") for line in lines)
    # extracted once, beside the specs labzarr init wrote
    assert sorted(p.name for p in (tmp_path / "work" / "dicom" / "corpora" / "raw" / "dcm_qa_enh" / "CT5N").iterdir()) \
        == sorted(p.name for p in CT5N)
