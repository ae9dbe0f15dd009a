"""Kill trials: `labzarr convert` SIGKILLed at random moments, then rerun, ends exactly like a clean run.

Each trial starts the real CLI in its own session on a fresh copy of the demo delivery, waits until it
holds the store's lock, then sleeps a random time drawn from that trial's stratum of the clean run's
remaining duration, and SIGKILLs, in turn: the whole process group (driver and workers), the driver
alone (its workers then exit by themselves), or one worker alone (the run must carry on). The rerun goes
through the library on a shared cluster. The final store must hold the clean run's arrays with the same
content hashes, pass `verify`, hold no `.partial` file and no staged leftovers, and the manifest must be
byte-identical.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from labzarr.convert import execute, load_spec
from labzarr.convert.qc.verify import verify_store
from labzarr.convert.write.state import lock_path
from labzarr.store import read_index

from ..conftest import Delivery, make_delivery
from ..corpus._util import jpeg, put

MODES = ("worker", "group", "driver")  # a worker first: its trial falls early in the run, while workers run
# A delivery converted without a cluster (`run/small_run.py`): its child dies first; the command then converts on a
# cluster, and must end as a clean run. Killed, the command takes its child with it.
ONE_PROCESS_MODES = ("child", "group", "driver")
# Past a tiny delivery, in workers forked from that child: one of them dies first (the child stops, the command
# converts on a cluster); the child killed takes its workers with it.
FORKED_MODES = ("forked-worker", "child", "group", "driver")


@dataclass(frozen=True)
class Snapshot:
    manifest: bytes
    hashes: dict[str, str]
    index: str


def snapshot(d: Delivery) -> Snapshot:
    hashes = {}
    for meta in sorted([*(d.store / "volumes").glob("*/0/zarr.json"), *(d.store / "stacks").glob("*/zarr.json")]):
        attrs = json.loads(meta.read_bytes())["attributes"]
        hashes[meta.parent.relative_to(d.store).as_posix()] = (attrs["content_sha256"], attrs["complete"])
    items = [i.encode() for i in read_index(d.store).items]
    return Snapshot(manifest=(d.spec.parent / "manifest.csv").read_bytes(), hashes=hashes,
                    index=json.dumps(items, sort_keys=True))


def delivery(root: Path, *, where: str = "cluster") -> Delivery:
    """The demo delivery plus 2D tiles of two sizes, so stacks are staged, filled and installed too; converted on
    the embedded cluster, or without one: in one process ("child", a tiny delivery), or with more tiles in workers
    forked from it ("forked")."""
    d = make_delivery(root, extra="\n[run]\nin_process_files = 0\n" if where == "cluster" else "")
    for i in range(40 if where == "forked" else 12):
        put(d.raw, f"tiles/tile_{i:03d}.jpg", jpeg(i, (16, 16, 3) if i % 3 else (16, 24, 3)))
    return d


def start(d: Delivery) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "labzarr", "convert", str(d.spec), "--workers", "2", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def wait_for_lock(d: Delivery, proc: subprocess.Popen[bytes]) -> float:
    t0 = time.monotonic()
    while proc.poll() is None:
        path = lock_path(d.store)
        if path.exists() and path.read_text().strip():
            return time.monotonic() - t0
        time.sleep(0.01)
    raise AssertionError(f"the run exited ({proc.returncode}) before taking the lock")


def workers_of(pid: int) -> list[psutil.Process]:
    """The embedded cluster's worker processes: the children of the driver's children (its worker server, forked or
    exec'd, has them). The driver's direct children are that server and multiprocessing's resource tracker."""
    try:
        servers = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    kids = []
    for server in servers:
        with contextlib.suppress(psutil.NoSuchProcess):
            kids += [k for k in server.children() if _alive(k)]
    return kids


def _converting_children(pid: int) -> list[psutil.Process]:
    """The command's child converting in one process: a fork of the command (its command line)."""
    try:
        me = psutil.Process(pid)
        return [k for k in me.children() if _alive(k) and _cmdline(k) == _cmdline(me)]
    except psutil.NoSuchProcess:
        return []


def _forked_workers(pid: int) -> list[psutil.Process]:
    """The workers forked from the command's converting child: its children with its command line (not the
    resource tracker multiprocessing starts beside them)."""
    out = []
    for child in _converting_children(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            out += [k for k in child.children() if _alive(k) and _cmdline(k) == _cmdline(child)]
    return out


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(proc: psutil.Process) -> list[str]:
    """A child's command line; one that exited since `children()` listed it (gone, or a zombie) has none."""
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def kill_trials(tmp_path: Path, client: object, n: int, seed: int, *, where: str = "cluster") -> list[str]:
    modes = {"cluster": MODES, "child": ONE_PROCESS_MODES, "forked": FORKED_MODES}[where]
    clean = delivery(tmp_path / "clean", where=where)
    proc = start(clean)
    wait_for_lock(clean, proc)
    t_lock = time.monotonic()
    assert proc.wait(timeout=300) == 0
    window = time.monotonic() - t_lock  # from "holds the lock" to "done", on an uninterrupted run
    want = snapshot(clean)
    rng = random.Random(seed)
    log = []
    for i in range(n):
        d = delivery(tmp_path / f"trial{i}", where=where)
        mode = modes[i % len(modes)]
        delay = window * (i + rng.random()) / n  # stratified: the trials spread over the whole run
        proc = start(d)
        wait_for_lock(d, proc)
        time.sleep(delay)
        arrays_before = len(list((d.store / "volumes").glob("*"))) if (d.store / "volumes").exists() else 0
        killed = 0
        if mode == "group":
            os.killpg(proc.pid, signal.SIGKILL)
        elif mode == "driver":
            proc.send_signal(signal.SIGKILL)
        elif mode in ("child", "forked-worker"):
            find = _converting_children if mode == "child" else _forked_workers
            while not (children := find(proc.pid)) and proc.poll() is None:
                time.sleep(0.01)
            if children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    rng.choice(children).send_signal(signal.SIGKILL)
                    killed = 1
        else:
            # The workers may still be starting: the first to be up is killed.
            while not (victims := workers_of(proc.pid)) and proc.poll() is None:
                time.sleep(0.01)
            if victims:
                with contextlib.suppress(psutil.NoSuchProcess):  # it may have exited on its own since
                    rng.choice(victims).send_signal(signal.SIGKILL)
                    killed = 1
        code = proc.wait(timeout=300)
        if mode in ("worker", "child", "forked-worker"):
            assert code == 0, f"trial {i}: a killed {mode} must not fail the run (exit {code})"
        elif mode == "group":
            os.killpg(proc.pid, signal.SIGKILL) if _group_alive(proc.pid) else None
        _wait_gone(proc.pid)
        assert not _group_alive(proc.pid), f"trial {i} ({mode}): a process of the run outlived it"
        execute(load_spec(d.spec, root=tmp_path), client)
        got = snapshot(d)
        assert got == want, f"trial {i} ({mode} at +{delay:.2f} s) differs from the clean run"
        report = verify_store(d.store)
        assert report.ok and report.leftovers == 0, report.describe()
        assert not list(d.store.rglob("*.partial"))
        assert not any((d.store / ".labzarr" / "staging").iterdir())
        log.append(f"{mode}@{delay:.2f}s/{arrays_before}arrays/exit{code}/killed{killed}")
    return log


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pgid: int) -> None:
    """Workers of a killed driver exit on their own within moments; wait for the whole session to be gone."""
    deadline = time.monotonic() + 60
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.timeout(900)
def test_a_kill_trial_of_each_mode(tmp_path: Path, dask_client) -> None:
    """One trial per way of dying (the process group, the driver, a worker); `make stress` runs fifty."""
    log = kill_trials(tmp_path, dask_client, n=len(MODES), seed=3)
    assert sorted(entry.split("@")[0] for entry in log) == sorted(MODES)
    worker_trial = next(entry for entry in log if entry.startswith("worker@"))
    assert worker_trial.endswith("/killed1"), f"the worker trial killed no worker: {worker_trial}"


@pytest.mark.timeout(900)
def test_a_kill_trial_of_each_mode_in_one_process(tmp_path: Path, dask_client) -> None:
    """As above, for a delivery converted in one process: its child killed (the command carries on, on a cluster),
    the command's process group, the command alone (its child dies with it)."""
    log = kill_trials(tmp_path, dask_client, n=len(ONE_PROCESS_MODES), seed=4, where="child")
    assert sorted(entry.split("@")[0] for entry in log) == sorted(ONE_PROCESS_MODES)
    child_trial = next(entry for entry in log if entry.startswith("child@"))
    assert child_trial.endswith("/killed1"), f"the child trial killed no child: {child_trial}"


@pytest.mark.timeout(900)
def test_a_kill_trial_of_each_mode_in_forked_workers(tmp_path: Path, dask_client) -> None:
    """As above, for a delivery converted in workers forked from the command's child: one of those workers killed
    (the child stops; the command carries on, on a cluster), the child (its workers die with it), the command's
    process group, the command alone."""
    log = kill_trials(tmp_path, dask_client, n=len(FORKED_MODES), seed=5, where="forked")
    assert sorted(entry.split("@")[0] for entry in log) == sorted(FORKED_MODES)
    for mode in ("forked-worker", "child"):
        trial = next(entry for entry in log if entry.startswith(f"{mode}@"))
        assert trial.endswith("/killed1"), f"the {mode} trial killed nothing: {trial}"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_fifty_kill_trials(tmp_path: Path, dask_client) -> None:
    log = kill_trials(tmp_path, dask_client, n=50, seed=50)
    assert len(log) == 50
