"""The `labzarr convert` process's malloc settings (run/driver_malloc.py), set in a process of their own here."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_driver_sets_its_thresholds_with_glibc() -> None:
    code = "from labzarr.convert.run.driver_malloc import tune_driver_malloc; print(tune_driver_malloc())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
