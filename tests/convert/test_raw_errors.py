"""OS errors on the raw path: raw itself unlistable is one usage error; a folder below it that cannot be listed
is a manifest row saying so, and every other file is converted."""

from __future__ import annotations

from pathlib import Path

import pytest

from labzarr.convert import convert_delivery, read_manifest
from labzarr.convert.cli import main
from labzarr.convert.demo import write_demo

from ..tmpfs import UNLISTABLE, unlistable_folder


def _spec(root: Path, raw: str) -> Path:
    spec = root / "manifests" / "lab" / "delivery.toml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(f'[delivery]\nname = "lab"\nraw = "{raw}"\nstore = "data/stores/lab.zarr"\n')
    return spec


def test_an_unlistable_raw_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with unlistable_folder(tmp_path / "data" / "raw" / "lab"):
        assert main(["check", str(_spec(tmp_path, "data/raw/lab"))]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'data' / 'raw' / 'lab'}: cannot list the delivery folder: Permission denied" in err
    assert "hint: check the [delivery] raw path" in err and "Traceback" not in err
    assert UNLISTABLE.exists()


def test_an_unlistable_subfolder_is_a_row_and_the_rest_converts(tmp_path: Path, scheduler: str) -> None:
    raw = write_demo(tmp_path / "data" / "raw" / "lab")
    spec = _spec(tmp_path, "data/raw/lab")
    with unlistable_folder(raw / "case_030"):
        result = convert_delivery(spec, scheduler=scheduler)
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    row = rows["case_030/"]
    assert (row["status"], row["reason"]) == ("rejected", "corrupt_data")
    assert row["detail"] == "cannot list the folder: Permission denied; not read"
    assert sum(r["status"] == "ok" for r in rows.values()) == 13  # the demo's ok items without labels
