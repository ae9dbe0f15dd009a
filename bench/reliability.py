"""Reliability: what incremental reruns save, what verify costs, and what sealing an array (fsync) costs.

Inputs: 8 CT-like int16 volumes of 256x256x128 (16 MiB each uncompressed, gzipped), generated once under
the workdir. Rows: a first conversion (2 workers, cluster start-up included) against a rerun on the unchanged
delivery and a rerun after one file changed; `verify` throughput over the decoded bytes it re-reads and
hashes; fsync throughput of a freshly written array folder (what `install` adds to every array).
"""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import zarr
from common import Result

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.convert.qc.verify import verify_store
from labzarr.store import Folder

NAME = "reliability: incremental reruns, verify, sealing"
_SHAPE = (256, 256, 128)
_N = 8


def _volume(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    x, y, _ = np.meshgrid(*(np.linspace(-1, 1, n) for n in _SHAPE), indexing="ij")
    body = (x**2 + y**2 < 0.8).astype(np.int16) * 1040 - 1000
    data = (body + rng.normal(0, 20, _SHAPE)).astype(np.int16)
    return gzip.compress(bytes(nib.Nifti1Image(data, np.eye(4)).to_bytes()), compresslevel=1, mtime=0)


def _inputs(workdir: Path) -> Path:
    raw = workdir / "reliability" / "raw"
    if not (raw / f"case_{_N:03d}.nii.gz").exists():
        raw.mkdir(parents=True, exist_ok=True)
        for i in range(1, _N + 1):
            (raw / f"case_{i:03d}.nii.gz").write_bytes(_volume(i))
    return raw


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(workdir: Path) -> list[Result]:
    raw = _inputs(workdir)
    root = workdir / "reliability" / "run"
    shutil.rmtree(root, ignore_errors=True)
    spec = write_spec(root / "m" / "delivery.toml", raw=raw, store=root / "s.zarr", name="rel", labels=False)
    first = _timed(lambda: convert_delivery(spec, workers=2))
    unchanged = _timed(lambda: convert_delivery(spec, workers=2))
    changed = raw / "case_001.nii.gz"
    original = changed.read_bytes()
    changed.write_bytes(_volume(1000))
    try:
        one = _timed(lambda: convert_delivery(spec, workers=2))
    finally:
        changed.write_bytes(original)
    decoded = _N * int(np.prod(_SHAPE)) * 2
    verify_s = _timed(lambda: verify_store(root / "s.zarr"))
    folder = root / "fsync.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(folder), shape=(1, *_SHAPE), dtype="int16",
                            chunks=(1, 64, 64, 64), compressors=None)
    arr[...] = np.random.default_rng(0).integers(-1000, 1000, (1, *_SHAPE), dtype=np.int16)
    fsync_s = _timed(lambda: Folder(folder).fsync_tree())
    return [
        Result("first conversion, 8 volumes (incl. cluster start)", first, "s", higher_is_better=False, baseline=True),
        Result("rerun, nothing changed (0 converted)", unchanged, "s", higher_is_better=False),
        Result("rerun, one file changed (1 converted)", one, "s", higher_is_better=False),
        Result("verify: decoded bytes re-read and hashed", decoded / verify_s / 1e6, "MB/s"),
        Result("fsync of a freshly written 16 MiB array (64 chunks)", 16 * 1.048576 / fsync_s, "MB/s",
               note="what sealing adds per array"),
    ]
