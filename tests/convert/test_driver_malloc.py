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


_FREED = """
import psutil
from labzarr.convert.run.driver_malloc import give_back_freed
process = psutil.Process()
before = process.memory_info().rss
made = [bytes(1000) + bytes([i % 256]) for i in range(100_000)]  # past pymalloc, below mmap: from the heap
kept = made[::50]  # a few live blocks spread over the heap keep it from shrinking at its top
del made
held = process.memory_info().rss - before
returned = give_back_freed()
after = process.memory_info().rss - before
print(held, after, returned)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_give_back_freed_returns_the_heaps_free_pages() -> None:
    out = subprocess.run([sys.executable, "-c", _FREED], capture_output=True, text=True, check=True)
    held, after, returned = out.stdout.split()
    assert returned == "True"
    assert int(held) > 50_000_000 and int(after) < int(held) // 2, (held, after)
