"""Decompression bombs are refused with bounded memory: a 4 MB gzip that inflates to 4 GiB costs megabytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..corpus._util import gz, gzip_members_of_zeros, nifti, volume

_MEASURE = """
import resource, sys
from pathlib import Path
from labzarr.readers import Limits, Rejected, read_head, reader_for
path = Path(sys.argv[1])
head = read_head(path)
reader = reader_for(head.data)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    reader.read(path, Limits(), head)
    print("accepted")
except Rejected as exc:
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(exc.reason.value, (after - before) * 1024, exc.detail, sep="|")
"""


@pytest.mark.parametrize(("header_shape", "expect"), [
    pytest.param((8, 8, 8), "gzip inflates past", id="header-allows-1kib"),
    pytest.param((4096, 4096, 200), "cap 4,294,967,296 B", id="header-claims-6gib"),
])
def test_gzip_bomb_refused_with_bounded_memory(tmp_path: Path, header_shape: tuple[int, int, int],
                                               expect: str) -> None:
    head = nifti(volume(1, (8, 8, 8)))
    if header_shape != (8, 8, 8):
        import nibabel as nib
        import numpy as np

        hdr = nib.Nifti1Header()
        hdr.set_data_shape(header_shape)
        hdr.set_data_dtype(np.int16)
        head = bytes(hdr.binaryblock) + b"\x00" * 4
    bomb = tmp_path / "bomb.nii.gz"
    bomb.write_bytes(gz(head) + gzip_members_of_zeros(4 << 30))
    assert bomb.stat().st_size < 8 << 20  # megabytes on disk, 4 GiB inflated
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(bomb)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    reason, grew, detail = out.stdout.strip().split("|")
    assert reason == "too_large" and expect in detail
    assert int(grew) < 32 << 20, f"peak RSS grew by {int(grew):,} B while refusing the bomb"
