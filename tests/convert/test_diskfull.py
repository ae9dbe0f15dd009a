"""A full filesystem stops the run with one clear error, claims nothing, and a rerun after freeing space finishes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import read_manifest
from labzarr.convert.cli import main
from labzarr.convert.demo import write_spec
from labzarr.convert.qc.verify import verify_store

from ..tmpfs import mounted_tmpfs


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs, unmounted afterwards."""
    with mounted_tmpfs(tmp_path / "small", "3m") as mount:
        yield mount


def test_disk_full_fails_clearly_and_the_rerun_finishes(tmp_path: Path, small_fs: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = np.random.default_rng(0)
    for i in range(1, 6):  # five ~1 MiB volumes of noise (incompressible): the 3 MiB filesystem fills up
        data = rng.integers(-30000, 30000, (64, 64, 128), dtype=np.int16)
        (raw / f"case_{i:03d}.nii").write_bytes(bytes(nib.Nifti1Image(data, np.eye(4)).to_bytes()))
    store = small_fs / "s.zarr"
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=store, labels=False)

    assert main(["convert", str(spec), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "hint: free space" in err and "Traceback" not in err
    assert not (spec.parent / "manifest.csv").exists()
    finished = sorted(p.parent.parent.name for p in (store / "volumes").glob("*/0/zarr.json"))
    assert len(finished) < 5
    for name in finished:  # whatever made it into place is whole
        attrs = json.loads((store / "volumes" / name / "0" / "zarr.json").read_bytes())["attributes"]
        assert attrs["complete"] == attrs["sha256"]

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    assert main(["convert", str(spec), "--workers", "1", "--quiet"]) == 0, capsys.readouterr().err
    rows = read_manifest(spec.parent / "manifest.csv")
    assert [r["status"] for r in rows] == ["ok"] * 5
    run_log = json.loads((store / ".labzarr" / "last-run.json").read_bytes())
    assert run_log["run"] == {"converted": 5 - len(finished), "unchanged": len(finished), "parts": 0}
    assert verify_store(store).ok
