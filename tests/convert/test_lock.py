"""One run per store: a second run fails at once naming the first; a dead run's lock is taken over."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from labzarr.convert.write.lock import LockInfo, StoreLocked, store_lock
from labzarr.convert.write.state import lock_path

from ..conftest import make_delivery


def test_second_run_exits_at_once_naming_the_first(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    with store_lock(d.store) as held:
        out = subprocess.run([sys.executable, "-m", "labzarr", "convert", str(d.spec), "--quiet"],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert f"in use by another labzarr run: pid {held.pid} on host {held.host}, started {held.started}" in out.stderr
    assert "hint:" in out.stderr and "Traceback" not in out.stderr
    assert not (d.spec.parent / "manifest.csv").exists() and not (d.store / "volumes").exists()


def _hold_lock(store: str) -> None:
    with store_lock(Path(store)):
        time.sleep(3600)


def test_lock_of_a_killed_run_is_taken_over_with_a_warning(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "s.zarr"
    holder = subprocess.Popen([sys.executable, "-c", f"from tests.convert.test_lock import _hold_lock; "
                                                     f"_hold_lock({str(store)!r})"], cwd=Path(__file__).parents[2])
    try:
        while not lock_path(store).exists() or not lock_path(store).read_text():
            assert holder.poll() is None, "the holder died before taking the lock"
            time.sleep(0.05)
        with pytest.raises(StoreLocked, match=f"pid {holder.pid} on host"):
            with store_lock(store):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with caplog.at_level(logging.WARNING), store_lock(store) as mine:
        assert mine.pid == os.getpid()
    assert f"taking over the lock left by pid {holder.pid}" in caplog.text
    assert lock_path(store).read_text() == ""  # released cleanly: nothing to take over next time


def test_lock_naming_a_live_process_is_not_trusted(tmp_path: Path) -> None:
    """Where flock is not honoured (some network filesystems), a live holder named in the file still wins."""
    store = tmp_path / "s.zarr"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        info = LockInfo(pid=sleeper.pid, host=socket.gethostname(), started="2026-01-01T00:00:00+00:00",
                        run_id="x", process_started=psutil.Process(sleeper.pid).create_time())
        lock_path(store).parent.mkdir(parents=True)
        lock_path(store).write_text(json.dumps(asdict(info)))
        with pytest.raises(StoreLocked, match="may not support flock"):
            with store_lock(store):
                pass
    finally:
        sleeper.kill()
        sleeper.wait()


def _contender(store: str, barrier: object, results: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        with store_lock(Path(store)):
            results.put(("got", os.getpid()))  # type: ignore[attr-defined]
            time.sleep(0.1)  # the other contender has long tried by now: both passed the barrier together
    except StoreLocked as exc:
        results.put(("refused", str(exc)))  # type: ignore[attr-defined]


def test_twenty_concurrent_double_starts_exactly_one_proceeds(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")  # children run only os/fcntl code: safe to fork
    store = tmp_path / "s.zarr"
    for _ in range(20):
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_contender, args=(str(store), barrier, results)) for _ in range(2)]
        for p in procs:
            p.start()
        outcomes = sorted(results.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        (got, winner), (refused, message) = outcomes
        assert (got, refused) == ("got", "refused")
        assert f"pid {winner} on host" in message


def _double_start(tmp_path: Path, rounds: int, *, in_process: bool = False) -> None:
    """Two commands on one delivery at once: one converts, the other is refused naming the holder. On a cluster
    (`in_process_files = 0`) the holder is the winning command itself; a small delivery converted in one process
    is held by the command's child (`run/small_run.py`), never by the refused command."""
    d = make_delivery(tmp_path, extra="" if in_process else "\n[run]\nin_process_files = 0\n")
    cmd = [sys.executable, "-m", "labzarr", "convert", str(d.spec), "--workers", "1", "--quiet"]
    for _ in range(rounds):
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [(p.pid, *p.communicate(timeout=300), p.returncode) for p in procs]
        codes = sorted(code for *_, code in outs)
        assert codes == [0, 2], outs
        (winner,) = [pid for pid, _, _, code in outs if code == 0]
        ((loser, loser_err),) = [(pid, err) for pid, _, err, code in outs if code == 2]
        holder = re.search(r"in use by another labzarr run: pid (\d+) on host", loser_err)
        assert holder is not None, loser_err
        if in_process:
            assert int(holder[1]) not in (winner, loser)
        else:
            assert int(holder[1]) == winner


def test_double_start_of_the_cli(tmp_path: Path) -> None:
    _double_start(tmp_path, rounds=1)


def test_double_start_of_the_cli_in_one_process(tmp_path: Path) -> None:
    _double_start(tmp_path, rounds=1, in_process=True)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_twenty_double_starts_of_the_cli(tmp_path: Path) -> None:
    _double_start(tmp_path, rounds=20)
