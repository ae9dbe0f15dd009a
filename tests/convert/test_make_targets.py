"""The make targets take everything from the spec: the store wherever it is, unknown deliveries named, new ones
reported as new. Each runs the real Makefile on a project folder of its own (with this checkout's venv)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from labzarr.convert.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -o: the venv is this checkout's, already installed; BIN points the targets at it.
    return subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-o", ".venv/.stamp-install",
                           f"BIN={ROOT / '.venv' / 'bin'}", *args], cwd=project, capture_output=True, text=True,
                          timeout=300)


def _project(tmp_path: Path, spec: Path, *names: str) -> Path:
    """A project folder whose `manifests/<name>/delivery.toml` are copies of `spec` (absolute raw and store)."""
    project = tmp_path / "project"
    for name in names:
        (project / "manifests" / name).mkdir(parents=True)
        shutil.copy(spec, project / "manifests" / name / "delivery.toml")
    return project


def test_inspect_and_verify_take_the_spec(converted_demo, capsys) -> None:
    d, _ = converted_demo
    assert main(["inspect", str(d.spec)]) == 0
    assert f"store:     {d.store}" in capsys.readouterr().out
    assert main(["verify", str(d.spec)]) == 0
    assert "ok: every chunk present and intact" in capsys.readouterr().out


def test_make_inspect_and_verify_find_a_store_outside_data(converted_demo, tmp_path: Path) -> None:
    d, _ = converted_demo
    project = _project(tmp_path, d.spec, "lab")
    assert not str(d.store).startswith(str(project))  # the store lives elsewhere: not data/stores/lab.zarr
    out = _make(project, "inspect", "DELIVERY=lab")
    assert out.returncode == 0, out.stderr
    assert "== lab" in out.stdout and f"store:     {d.store}" in out.stdout
    out = _make(project, "verify")
    assert out.returncode == 0, out.stderr
    assert "ok: every chunk present and intact" in out.stdout


def test_an_unknown_delivery_is_named_with_the_ones_there_are(converted_demo, tmp_path: Path) -> None:
    d, _ = converted_demo
    project = _project(tmp_path, d.spec, "lab", "other")
    for target in ("inspect", "verify", "convert", "report", "diff"):
        out = _make(project, target, "DELIVERY=lba")
        assert out.returncode == 2, (target, out.stdout, out.stderr)
        assert ("no delivery 'lba': manifests/lba/delivery.toml not found (deliveries: lab other)"
                in out.stderr), out.stderr


def test_make_diff_reports_a_new_delivery_and_goes_on(converted_demo, tmp_path: Path) -> None:
    d, result = converted_demo
    project = _project(tmp_path, d.spec, "a", "b")
    for name in ("a", "b"):
        shutil.copy(result.manifest, project / "manifests" / name / "manifest.csv")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "manifests/a"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], cwd=project, check=True)
    out = _make(project, "diff")
    assert out.returncode == 0, out.stderr
    rows = len(result.rows)
    assert f"items {rows} -> {rows}" in out.stdout and "\n\nno differences\n" in out.stdout  # a: committed, unchanged
    assert (f"git:HEAD:manifests/b/manifest.csv -> manifests/b/manifest.csv\nnew: {rows} added "
            "(git:HEAD:manifests/b/manifest.csv is not committed yet)") in out.stdout, out.stdout
