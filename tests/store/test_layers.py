"""The layers import one way: the store layer needs no torch, dask or conversion code, and neither do
`labzarr inspect` and `labzarr report`, which read stores through it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(code: str, *args: str) -> set[str]:
    probe = (f"import sys\n{code}\n"
             "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} | {m for m in sys.modules "
             "if m.startswith('labzarr.')})))")
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(out.stdout.split())


def test_the_store_layer_imports_neither_torch_nor_dask_nor_convert() -> None:
    loaded = _loaded_after("import labzarr.store")
    assert not loaded & {"torch", "dask", "distributed", "tensorstore"}
    assert not {m for m in loaded if m.startswith(("labzarr.convert", "labzarr.loaders", "labzarr.readers"))}


@pytest.mark.timeout(300)
def test_inspect_and_report_run_without_importing_torch(converted_demo, tmp_path: Path) -> None:
    d, _ = converted_demo
    run_cli = ("from labzarr.convert.cli import main\n"
               "rc = main(sys.argv[1:])\n"
               "assert rc == 0, rc\n")
    inspected = _loaded_after(run_cli, "inspect", str(d.store))
    assert "torch" not in inspected and "labzarr.loaders" not in inspected
    reported = _loaded_after(run_cli, "report", str(d.spec), "--out", str(tmp_path / "report"), "--max-thumbs", "4")
    assert (tmp_path / "report" / "index.html").is_file()
    assert "torch" not in reported and "labzarr.loaders" not in reported
