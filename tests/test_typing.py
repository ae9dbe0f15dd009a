"""The library code is `mypy --strict` clean (STYLE.md), under the settings in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_library_is_mypy_strict_clean() -> None:
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert "strict = true" in (ROOT / "pyproject.toml").read_text()  # the run above used --strict
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout
