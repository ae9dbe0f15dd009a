"""A real multi-process cluster at scale (issue 36): `dask scheduler` plus two `dask worker --nworkers 2
--nthreads 1` on 127.0.0.1 convert a generated delivery of tiny JPEGs into an s3 store on a moto server.

The driver (`labzarr convert --scheduler`, a subprocess) is killed with SIGKILL at about half its run and
run again; the store and the manifest then equal those of an uninterrupted local run (the embedded
cluster, into a folder store). 5,000 files in `make test`, 100,000 in `make stress`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import fsspec
import pytest
from distributed import Client

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec

from ..processes import stop_cluster
from ..s3 import S3Server, free_port
from ..scale_data import tiny_jpegs

DASK = Path(sys.executable).parent / "dask"
BUCKET = "labzarr"
_CONVERTING = re.compile(r"labzarr: converting ([\d,]+)/([\d,]+) items")


@contextmanager
def _cluster(logs: Path) -> Iterator[str]:
    """`dask scheduler` and two `dask worker` processes of 2 single-threaded workers each (with nannies);
    yields the scheduler's address, stops every process (workers first) on exit."""
    logs.mkdir(parents=True, exist_ok=True)
    address = f"tcp://127.0.0.1:{free_port()}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with (logs / f"{name}.log").open("wb") as log:
            procs.append(subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT, cwd=logs,
                                          env={**os.environ, "PYTHONWARNINGS": "ignore"}))

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard")
        for name in ("a", "b"):
            start(name, "worker", address, "--name", name, "--nworkers", "2", "--nthreads", "1", "--no-dashboard",
                  "--host", "127.0.0.1", "--memory-limit", "0")
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(4, timeout=180)
        yield address
    finally:
        stop_cluster(procs)


def _convert_cli(spec: Path, address: str, *, kill_at_half: bool = False) -> subprocess.CompletedProcess[str] | None:
    """`labzarr convert SPEC --scheduler ADDRESS`; with `kill_at_half`, SIGKILL it once its progress says half
    the items are converted (returns None then)."""
    cmd = [sys.executable, "-m", "labzarr", "convert", str(spec), "--scheduler", address]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if not kill_at_half:
        return subprocess.run([*cmd, "--quiet"], capture_output=True, text=True, timeout=1800, env=env)
    proc = subprocess.Popen([*cmd, "--progress-every", "0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        m = _CONVERTING.search(line)
        if m and 2 * int(m[1].replace(",", "")) >= int(m[2].replace(",", "")):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
    return None


def _local_files(store: Path) -> dict[str, bytes]:
    return {p.relative_to(store).as_posix(): p.read_bytes() for p in store.rglob("*")
            if p.is_file() and p.relative_to(store).parts[0] != ".labzarr"}


def _url_files(url: str) -> dict[str, bytes]:
    fs = fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)
    prefix = url.removeprefix("s3://")
    keys = [k for k in fs.find(prefix) if not k[len(prefix) + 1:].startswith(".labzarr/")]
    return {k[len(prefix) + 1:]: v for k, v in fs.cat(keys).items()} if keys else {}


def _comparable(rel: str, blob: bytes) -> object:
    """A store object as compared: bytes, or for a zarr.json its document without what names the run or
    the spec's own path (the records folder's run id; the spec's hash, which covers the store's URL)."""
    if not rel.endswith("zarr.json"):
        return blob
    doc = json.loads(blob)
    attrs = doc.get("attributes", {})
    attrs.pop("records", None)
    if isinstance(attrs.get("labzarr"), dict):
        attrs["labzarr"].pop("spec_sha256", None)
    return doc


def _assert_same_store(local: Path, url: str) -> None:
    a, b = _local_files(local), _url_files(url)
    assert sorted(a) == sorted(b)
    different = [rel for rel in a if _comparable(rel, a[rel]) != _comparable(rel, b[rel])]
    assert not different, different[:10]


def _scale_run(root: Path, scheduler: str, s3: S3Server, n: int) -> None:
    raw = tiny_jpegs(root / "raw", n)
    local = write_spec(root / "local" / "delivery.toml", raw=raw, store=root / "local.zarr", name="scale",
                       labels=False)
    want = convert_delivery(local, scheduler=scheduler)
    assert want.summary["counts"]["ok"] == n
    url = f"s3://{BUCKET}/scale-{n}.zarr"
    spec = write_spec(root / "cluster" / "delivery.toml", raw=raw, store=url, name="scale", labels=False)
    with _cluster(root / "logs") as address:
        assert _convert_cli(spec, address, kill_at_half=True) is None
        assert not (spec.parent / "manifest.csv").exists()  # killed before its end
        again = _convert_cli(spec, address)
        assert again is not None and again.returncode == 0, again.stderr[-3000:]
        with Client(address) as client:  # the runs used the cluster's four workers and left them running
            assert len(client.scheduler_info()["workers"]) == 4
    assert (spec.parent / "manifest.csv").read_bytes() == want.manifest.read_bytes()
    _assert_same_store(root / "local.zarr", url)


def test_cluster_killed_driver_rerun_equals_local_run(s3: S3Server, scheduler: str, tmp_path: Path) -> None:
    _scale_run(tmp_path, scheduler, s3, 5_000)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the suite's 300 s limit is for `make test`; 100,000 files take tens of minutes
def test_cluster_at_100k_files(s3: S3Server, scheduler: str, tmp_path: Path) -> None:
    _scale_run(tmp_path, scheduler, s3, 100_000)
