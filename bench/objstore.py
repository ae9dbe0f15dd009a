"""URL stores: converting the same volumes into a local folder and into s3:// on a moto server (127.0.0.1).

moto keeps objects in its own process's memory and answers over HTTP on the same 2 cores, so the s3 row
measures our protocol's request overhead (one PUT per shard, listings, the zarr.json rewrites), not
what a real S3 endpoint would sustain.
"""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import nibabel as nib
import numpy as np
from common import Result

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec

NAME = "object store (s3:// on moto) vs local folder: convert, 2 workers"

_N, _SHAPE = 4, (256, 256, 128)  # int16: 16 MiB uncompressed each


def _volumes(raw: Path) -> int:
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(_N):
        path = raw / f"case{i:02d}.nii.gz"
        if not path.exists():
            data = (rng.normal(0, 200, _SHAPE)).astype(np.int16)
            path.write_bytes(gzip.compress(nib.Nifti1Image(data, np.diag([0.9, 0.9, 2.0, 1.0])).to_bytes(), 1))
    return _N * int(np.prod(_SHAPE)) * 2


def _moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with log.open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def _convert(spec: Path) -> tuple[float, float]:
    first = convert_delivery(spec, workers=2)
    t = time.perf_counter()
    convert_delivery(spec, workers=2)
    return float(first.run_log["timings"]["convert_s"]), time.perf_counter() - t


def run(workdir: Path) -> list[Result]:
    import fsspec

    root = workdir / "objstore"
    nbytes = _volumes(root / "raw")
    proc, endpoint = _moto(root / "moto.log")
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_ENDPOINT_URL": endpoint}
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the LocalCluster's workers inherit it
    try:
        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("bench")
        local = root / "local.zarr"
        if local.exists():
            import shutil

            shutil.rmtree(local)
        t_local, again_local = _convert(write_spec(root / "m-local" / "delivery.toml", raw=root / "raw", store=local,
                                                   name="bench", labels=False))
        t_s3, again_s3 = _convert(write_spec(root / "m-s3" / "delivery.toml", raw=root / "raw",
                                             store="s3://bench/bench.zarr", name="bench", labels=False))
    finally:
        proc.terminate()
        proc.wait()
        for k, v in before.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    mb = nbytes / 1e6
    return [
        Result("convert into a local folder", mb / t_local, "MB/s", baseline=True, group="convert",
               note=f"{_N} x {'x'.join(map(str, _SHAPE))} int16 .nii.gz, {mb:.0f} MB uncompressed"),
        Result("convert into s3:// (moto server)", mb / t_s3, "MB/s", group="convert"),
        Result("rerun, nothing to convert: local folder", again_local, "s", higher_is_better=False, baseline=True,
               group="rerun"),
        Result("rerun, nothing to convert: s3://", again_s3, "s", higher_is_better=False, group="rerun"),
    ]
