"""An existing dask.distributed cluster (`dask scheduler` + two `dask worker`) gives the local run's result.

The test starts every process itself on 127.0.0.1 free ports and stops each one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import zarr
from distributed import Client

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.convert.progress import ProgressEvent

from ..conftest import make_delivery
from ..dicom_data import write_delivery
from ..outputs import run_outputs
from ..processes import stop_cluster

DASK = Path(sys.executable).parent / "dask"


@dataclass
class Cluster:
    address: str
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]]  # name -> process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of its own, for a test that kills one of its workers."""
    with _dask_cluster(tmp_path) as started:
        yield started


@pytest.fixture(scope="module")
def intact_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for this module's tests that leave its workers running: a cluster start less each."""
    with _dask_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


@contextmanager
def _dask_cluster(tmp_path: Path) -> Iterator[Cluster]:
    logs = tmp_path / "logs"
    logs.mkdir()
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as log:
            p = subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
        procs.append(p)
        return p

    try:
        scheduler = start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        # No nanny: killing a worker process kills the worker, not a child a nanny would restart.
        workers = {name: start(name, "worker", address, "--name", name, "--nthreads", "1", "--no-nanny",
                               "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "0")
                   for name in ("w0", "w1")}
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        yield Cluster(address=address, scheduler=scheduler, workers=workers)
    finally:
        stop_cluster(procs)
        assert all(p.poll() is not None for p in procs)


def _assert_same_store(a: Path, b: Path) -> None:
    ga, gb = zarr.open_group(a / "volumes", mode="r"), zarr.open_group(b / "volumes", mode="r")
    names = sorted(n for n, m in ga.members(max_depth=None) if isinstance(m, zarr.Array))
    assert names and names == sorted(n for n, m in gb.members(max_depth=None) if isinstance(m, zarr.Array))
    for name in names:
        x, y = ga[name], gb[name]
        assert isinstance(x, zarr.Array) and isinstance(y, zarr.Array)
        assert dict(x.attrs) == dict(y.attrs), name
        assert x.dtype == y.dtype and x.chunks == y.chunks
        np.testing.assert_array_equal(x[...], y[...], err_msg=name)


def test_cli_on_an_existing_cluster_equals_local_run(converted_demo, intact_cluster: Cluster, tmp_path: Path) -> None:
    cluster = intact_cluster
    local, local_result = converted_demo
    d = make_delivery(tmp_path / "remote")
    out = subprocess.run([sys.executable, "-m", "labzarr", "convert", str(d.spec), "--scheduler", cluster.address,
                          "--quiet"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert (d.spec.parent / "manifest.csv").read_bytes() == local_result.manifest.read_bytes()
    _assert_same_store(local.store, d.store)
    with Client(cluster.address) as client:  # the run used the cluster's workers, and left them running
        assert len(client.scheduler_info()["workers"]) == 2


def _add_ct_volumes(raw: Path, n: int) -> None:
    """Volumes big enough (5 MB each) that both workers are busy when the first item finishes."""
    rng = np.random.default_rng(5)
    for i in range(n):
        data = (rng.normal(0, 200, (160, 160, 96))).astype(np.int16)
        nib.save(nib.Nifti1Image(data, np.diag([-0.9, -0.9, 2.0, 1.0])), raw / f"big_{i:03d}.nii.gz")


def test_killing_a_worker_mid_run_gives_the_same_result(cluster: Cluster, scheduler: str, tmp_path: Path) -> None:
    local = make_delivery(tmp_path / "local")
    _add_ct_volumes(local.raw, 3)
    want = convert_delivery(local.spec, scheduler=scheduler)  # the reference: the suite's cluster, no kill
    d = make_delivery(tmp_path / "remote")
    _add_ct_volumes(d.raw, 3)
    killed: list[str] = []

    def kill_busy_worker(event: ProgressEvent) -> None:
        if killed or event.phase != "convert" or event.done < 1:  # after the first converted item
            return
        done, total = event.done, event.total
        with Client(cluster.address) as client:
            processing = client.processing()
            names = {addr: w["name"] for addr, w in client.scheduler_info()["workers"].items()}
        addr = max(processing, key=lambda a: len(processing[a]))
        assert processing[addr], f"no worker busy after {done}/{total} items: too late to kill one mid-run"
        name = names[addr]
        cluster.workers[name].send_signal(signal.SIGKILL)
        cluster.workers[name].wait(timeout=30)
        killed.append(name)

    got = convert_delivery(d.spec, scheduler=cluster.address, progress=kill_busy_worker)
    assert killed and cluster.workers[killed[0]].returncode == -signal.SIGKILL
    assert got.manifest.read_bytes() == want.manifest.read_bytes()
    _assert_same_store(local.store, d.store)
    assert all(r.status != "rejected" or r.reason != "decoder_crash" for r in got.rows)
    with Client(cluster.address) as client:
        assert len(client.scheduler_info()["workers"]) == 1


def test_forked_workers_write_what_spawned_workers_write(intact_cluster: Cluster, tmp_path: Path) -> None:
    """`labzarr convert`'s own workers (forked from its worker server, run/worker_start.py) and an existing
    cluster's (`dask worker`: fresh interpreters) give the same bytes: manifest, summary and every store file."""
    raw = tmp_path / "raw"
    write_delivery(raw)
    spec = write_spec(tmp_path / "manifests" / "dicom" / "delivery.toml", raw=raw, store=tmp_path / "dicom.zarr",
                      name="dicom", labels=False)
    with spec.open("a") as f:  # the command's own cluster, even for a delivery this small (`run/small_run.py`)
        f.write("\n[run]\nin_process_files = 0\n")
    outputs: dict[str, dict[str, bytes]] = {}
    for how, option in (("forked", ["--workers", "2"]), ("spawned", ["--scheduler", intact_cluster.address])):
        done = subprocess.run([sys.executable, "-m", "labzarr", "convert", str(spec), "--quiet", *option],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and not done.stdout + done.stderr, done.stderr[-3000:]
        store = tmp_path / "dicom.zarr"
        # The run log lists the warnings its workers met (the cluster's were started ignoring them).
        outputs[how] = run_outputs(store, spec.parent, warnings=False)
        shutil.rmtree(store)
        for name in ("manifest.csv", "summary.json"):
            (spec.parent / name).unlink()
    assert b",ok," in outputs["forked"]["manifests/manifest.csv"]
    assert outputs["forked"].keys() == outputs["spawned"].keys()
    assert [k for k in outputs["forked"] if outputs["forked"][k] != outputs["spawned"][k]] == []
