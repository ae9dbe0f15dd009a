"""Ctrl-C on a terminal: one line and exit code 130, from every process of the run, at any moment; a rerun
resumes and gives the store an uninterrupted run gives.

The command runs on a pty in its own session, and SIGINT goes to its whole process group, as a terminal's
Ctrl-C does: the worker processes of its embedded cluster get it too.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import sys
import termios
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import psutil
import pytest

from labzarr.convert.demo import write_demo

from ..ptys import readable

LABZARR = str(Path(sys.executable).with_name("labzarr"))
INTERRUPTED = b"labzarr: interrupted; rerun the same command to resume"


def _project(root: Path) -> Path:
    raw = write_demo(root / "data" / "raw" / "lab")
    rng = np.random.default_rng(0)
    for i in range(6):  # big enough that converting takes a few seconds on 2 workers
        nib.save(nib.Nifti1Image(rng.integers(0, 3000, (192, 192, 160), dtype=np.int16), np.eye(4)),
                 raw / f"big_{i:03d}.nii")
    spec = root / "manifests" / "lab" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    spec.write_text('[delivery]\nname = "lab"\nraw = "data/raw/lab"\nstore = "data/stores/lab.zarr"\n')
    return spec


def _run_on_pty(args: list[str], cwd: Path, *, interrupt_after: bytes | None, delay: float,
                timeout: float = 120) -> tuple[int, bytes]:
    """Run `labzarr ARGS` on a pty; once its output holds `interrupt_after` (at once when None), wait `delay`
    seconds and send SIGINT to its process group. Returns the exit code and everything it printed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.chdir(cwd)
        os.execv(LABZARR, ["labzarr", *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    out, armed, sent = b"", None, False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if armed is None and (interrupt_after is None or interrupt_after in out):
            armed = time.monotonic() + delay
        if not sent and armed is not None and time.monotonic() >= armed:
            os.killpg(pid, signal.SIGINT)
            sent = True
        if readable(fd, 0.05):
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            out += chunk
    else:
        os.killpg(pid, signal.SIGKILL)
        raise AssertionError(f"labzarr {args} did not exit in {timeout} s:\n{out.decode(errors='replace')}")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert _left_in_group(pid) == [], "processes of the run outlived it"
    return os.waitstatus_to_exitcode(status), out


def _left_in_group(pgid: int) -> list[str]:
    """Live processes of process group `pgid`, after a second to exit (zombies, which here nobody reaps once
    they are re-parented to a PID 1 that does not reap, have exited already)."""
    time.sleep(1)
    left = []
    for p in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])}")
        except (ProcessLookupError, psutil.Error):
            continue
    return left


def _last_line(out: bytes) -> bytes:
    return out.replace(b"\r", b"\n").strip().splitlines()[-1]


@pytest.mark.parametrize(("after", "delay"), [
    (None, 0.2),  # while the command is still importing
    pytest.param(None, 1.0, marks=pytest.mark.slow),  # while the cluster starts (make stress)
    (b"converting", 0.3),  # while the workers convert
], ids=["importing", "cluster-starting", "converting"])
def test_ctrl_c_prints_one_line_and_a_rerun_resumes(tmp_path: Path, after: bytes | None, delay: float) -> None:
    spec = _project(tmp_path)
    args = ["convert", str(spec.relative_to(tmp_path)), "--workers", "2"]
    code, out = _run_on_pty(args, tmp_path, interrupt_after=after, delay=delay)
    if code == -signal.SIGINT:
        # On a loaded machine the signal can come before the interpreter has set its handler: the process dies
        # of SIGINT at once, silently, which a shell reports as 130 too.
        assert after is None and out == b"", out.decode(errors="replace")
    else:
        assert code == 130, out.decode(errors="replace")
        assert b"Traceback" not in out and b"Error" not in out, out.decode(errors="replace")
        # Before it only the progress bar (redrawn in place); the message is the one line of its own.
        assert _last_line(out) == INTERRUPTED
        assert out.count(INTERRUPTED) == 1

    code, out = _run_on_pty(args, tmp_path, interrupt_after=b"never", delay=0)
    assert code == 0, out.decode(errors="replace")
    assert b"Traceback" not in out
    manifest = (spec.parent / "manifest.csv").read_text()
    assert manifest.count(",ok,") == 13 + 6, manifest  # the demo's ok items (no labels) and the six big volumes
