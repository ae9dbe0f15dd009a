"""Relative paths in a spec start at the project root (the folder holding manifests/), whatever the working
directory; a spec outside a manifests/ tree starts at its own folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labzarr.convert.cli import main
from labzarr.convert.demo import write_demo
from labzarr.convert.spec import load_spec, project_root
from labzarr.store import Folder

_SPEC = """[delivery]
name = "lab"
raw = "data/raw/lab"
store = "data/stores/lab.zarr"

[labels]
workbook = "labels/annotations.xlsx"
sheet = 3
id_column = "A"
columns = { cell_type = "F" }
required = false
"""


def _project(root: Path) -> Path:
    write_demo(root / "data" / "raw" / "lab")
    spec = root / "manifests" / "lab" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    spec.write_text(_SPEC)
    return spec


def test_project_root_is_the_folder_holding_manifests(tmp_path: Path) -> None:
    assert project_root(tmp_path / "manifests" / "lab" / "delivery.toml") == tmp_path
    assert project_root(tmp_path / "manifests" / "delivery.toml") == tmp_path
    assert project_root(tmp_path / "elsewhere" / "delivery.toml") == tmp_path / "elsewhere"


def test_spec_paths_do_not_depend_on_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _project(tmp_path / "project")
    for cwd in (tmp_path, tmp_path / "project" / "manifests", tmp_path / "project" / "data"):
        monkeypatch.chdir(cwd)
        parsed = load_spec(Path(os.path.relpath(spec, cwd)))
        assert parsed.root == tmp_path / "project"
        assert parsed.delivery.raw == tmp_path / "project" / "data" / "raw" / "lab"
        assert parsed.delivery.store == Folder(tmp_path / "project" / "data" / "stores" / "lab.zarr")


def test_spec_outside_manifests_starts_at_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_demo(tmp_path / "specs" / "data" / "raw" / "lab")
    (tmp_path / "specs" / "delivery.toml").write_text(_SPEC)
    monkeypatch.chdir(tmp_path)
    parsed = load_spec(Path("specs/delivery.toml"))
    assert parsed.delivery.raw == tmp_path / "specs" / "data" / "raw" / "lab"


def test_missing_raw_names_the_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "manifests" / "lab" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    spec.write_text(_SPEC)
    assert main(["convert", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'data' / 'raw' / 'lab'}" in err
    assert f"relative paths start at {tmp_path}" in err


def test_convert_from_another_folder_writes_one_store_under_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheduler: str, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    spec = _project(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    relative = Path("..") / "project" / "manifests" / "lab" / "delivery.toml"
    assert main(["convert", str(relative), "--scheduler", scheduler, "--quiet"]) == 0
    assert (project / "data" / "stores" / "lab.zarr" / "zarr.json").is_file()
    assert list(elsewhere.iterdir()) == []  # no second store, no data/ here
    first = (spec.parent / "manifest.csv").read_bytes()

    monkeypatch.chdir(project)  # the same spec from the root: the same store, nothing to do
    assert main(["convert", str(spec.relative_to(project)), "--scheduler", scheduler]) == 0
    assert "0 converted" in capsys.readouterr().out
    assert (spec.parent / "manifest.csv").read_bytes() == first
