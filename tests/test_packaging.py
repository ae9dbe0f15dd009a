"""The distribution exposes labzarr, its three subpackages and the console script, as a wheel too."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import labzarr

ROOT = Path(__file__).resolve().parents[1]


def test_public_names() -> None:
    assert {"PatchDataset", "open_store", "convert_delivery"} <= set(labzarr.__all__)
    # the subpackage, not a function
    assert not hasattr(labzarr, "convert") or labzarr.convert.__name__ == "labzarr.convert"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plain wheel, built once for the tests below."""
    out_dir = tmp_path_factory.mktemp("dist")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(out_dir), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = out_dir.glob("labzarr-*.whl")
    return wheel


def test_wheel_holds_every_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in [("api", "labzarr"), ("readers", "labzarr/readers"), ("convert", "labzarr/convert"),
                            ("loaders", "labzarr/loaders")]:
        for src in (ROOT / folder).glob("*.py"):
            assert f"{package}/{src.name}" in names, f"{src} missing from the wheel"
    assert "labzarr/convert/qc/templates/report.html.j2" in names  # package data: `labzarr report` needs it
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "labzarr = labzarr.__main__:main" in zipfile.ZipFile(wheel).read(entry).decode()


_WHEEL_SMOKE = """
import sys
from pathlib import Path
import labzarr
from labzarr import PatchDataset, convert_delivery, open_store
assert Path(labzarr.__file__).is_relative_to(sys.prefix), labzarr.__file__
from labzarr.convert.demo import write_demo, write_spec
raw = write_demo(Path("raw"))
spec = write_spec(Path("manifests/demo/delivery.toml"), raw=raw.resolve(), store=Path("demo.zarr").resolve())
result = convert_delivery(spec, workers=1)
store = open_store("demo.zarr")
ds = PatchDataset("demo.zarr", patch_size=(8, 8, 8), seed=0)
sample = ds[0]
print(result.summary["counts"]["ok"], len(store.items), tuple(sample["image"].shape))
"""


def test_wheel_installs_and_runs_in_a_throwaway_venv(wheel: Path, tmp_path: Path) -> None:
    """The plain wheel, not the editable install: the console script and the three public names work from it.

    The venv gets labzarr from the wheel only; its dependencies come from this environment's
    site-packages through a .pth line (a plain path: the editable install's own .pth hooks stay off),
    so the test needs no network and no second copy of torch.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                          "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (site,) = venv.glob("lib/python3*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps-from-test-env.pth").write_text("\n".join(deps) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    helped = subprocess.run([str(venv / "bin" / "labzarr"), "convert", "--help"], capture_output=True, text=True,
                            cwd=work, timeout=120)
    assert helped.returncode == 0 and "worked example" in helped.stdout, helped.stderr
    ran = subprocess.run([str(python), "-c", _WHEEL_SMOKE], capture_output=True, text=True, cwd=work, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    ok, indexed, shape = ran.stdout.split(maxsplit=2)
    assert int(ok) > 0 and int(indexed) == int(ok)
    assert shape.strip().endswith("8, 8, 8)")
