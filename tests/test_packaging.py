"""The distribution exposes labzarr, its three subpackages and the console script, as a wheel too."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import labzarr

ROOT = Path(__file__).resolve().parents[1]


def test_public_names() -> None:
    assert {"PatchDataset", "open_store", "convert_delivery"} <= set(labzarr.__all__)
    assert not hasattr(labzarr, "convert") or labzarr.convert.__name__ == "labzarr.convert"  # the subpackage, not a function


def test_wheel_holds_every_module(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("labzarr-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in [("api", "labzarr"), ("readers", "labzarr/readers"), ("convert", "labzarr/convert"),
                            ("loaders", "labzarr/loaders")]:
        for src in (ROOT / folder).glob("*.py"):
            assert f"{package}/{src.name}" in names, f"{src} missing from the wheel"
    assert "labzarr/convert/templates/report.html.j2" in names  # package data: `labzarr report` needs it
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "labzarr = labzarr.convert.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
