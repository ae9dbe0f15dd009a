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
