"""A small delivery converted without a cluster, in a child the `labzarr` command watches; a cluster where it fails.

A small delivery's run on the embedded cluster is mostly the cluster's start (docs/benchmarks.md, "Fixed cost"):
importing distributed and dask, forking the worker server and its workers. Where the delivery is small (`is_small`:
at most `[run] in_process_files` files and `in_process_bytes` bytes under raw), the command converts it without one
(no dask imported): in worker processes forked from the child (`forked.py`), or for a tiny delivery (`Size.tiny`),
whose probe and conversion are a task each, in the child alone (`in_process.py`).

There, a reader that crashes (a fatal signal in a decoder) or hangs would take the run with it, where a cluster
loses only that item. So the conversion runs in a forked child (`run_watched`), which writes a byte to a pipe at
each step it makes (a probed batch, a converted item: its progress events); the command waits. The child says first
how long a step may take (`stall_after`: its spec's item timeout and the cluster's grace after it): the command has
not read the spec, which takes the imports the child makes. A child that dies by a signal, one whose worker process
dies (`runner.WorkerDied`), or one that makes no step for that long, is killed, and the command converts the
delivery on the cluster as it would have without this: that run resumes from what the child finished (the store's
lock, `sweep` and the outcome records make a killed run resumable) and isolates the culprit as always, so the
cluster's verdict on a failing item is the final one. A child that ends by itself (its summary printed, or its one
error line) gives the command its exit code.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import io
import json
import logging
import os
import select
import signal
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ..spec_early import IN_PROCESS_BYTES, IN_PROCESS_FILES, project_root, resolve

__all__ = ["Failed", "Outcome", "Size", "Watch", "die_with", "is_small", "run_watched", "small_delivery",
           "stall_after"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_STOP_S = 5.0  # how long a child interrupted with the command (Ctrl-C) has to unwind before it is killed
# A delivery of one probe batch (`driver._PROBE_BATCH`) and a few MB is a task or two: forking workers for it costs
# more than it gives (docs/benchmarks.md, "A small delivery in processes forked from the command").
_TINY_FILES, _TINY_BYTES = 64, 8 << 20


@dataclass(frozen=True, slots=True)
class Size:
    """What lies under a small delivery's raw folder."""

    files: int
    bytes: int

    def tiny(self) -> bool:
        """Whether it converts faster in the child alone than in worker processes forked from it."""
        return self.files <= _TINY_FILES and self.bytes <= _TINY_BYTES


@dataclass(frozen=True, slots=True)
class Failed:
    """Why the child gave no exit code of its own."""

    why: str  # "killed by SIGSEGV", "no progress for 615 s"


def small_delivery(spec: Path) -> Size | None:
    """The size of the delivery of the spec file `spec` where it is small enough to convert without a cluster
    (`is_small`), else None; from
    its TOML alone: its `[delivery] raw` and `[run] in_process_files` and `in_process_bytes`, read before the
    command imports what validating a spec takes (numpy, among others, which the workers' environment must precede:
    `cli._workers_environ`). The run validates the whole spec wherever it goes; a spec this cannot read as plainly
    as that is not small, and the ordinary run reports what is wrong with it."""
    try:
        doc = tomllib.loads(spec.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    delivery, run = doc.get("delivery"), doc.get("run", {})
    if not isinstance(delivery, dict) or not isinstance(run, dict) or not isinstance(delivery.get("raw"), str):
        return None
    files, size = run.get("in_process_files", IN_PROCESS_FILES), run.get("in_process_bytes", IN_PROCESS_BYTES)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (files, size)):
        return None
    return is_small(resolve(project_root(spec), delivery["raw"]), files=files, size=size)


def is_small(raw: Path, *, files: int, size: int) -> Size | None:
    """What the folder `raw` holds where it is at most `files` files of at most `size` bytes in all (symlinks
    counted by their targets' size), else None. Stops at the first file past either bound: a million-file delivery
    costs a few entries. A folder it cannot list is left to the run, which reports it: it counts as not small."""
    if files <= 0:
        return None
    count = total = 0
    folders = [raw]
    while folders:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(Path(entry.path))
                        continue
                    count += 1
                    try:
                        total += entry.stat().st_size
                    except OSError:
                        pass  # a broken link: the run makes it a row; it has no bytes to convert
                    if count > files or total > size:
                        return None
        except OSError:
            return None
    return Size(count, total)


def stall_after(item_timeout: float) -> float:
    """How long the child may make no step: an item's timeout on the cluster and the grace the cluster gives a
    timed-out item's report (`settings.report_grace`), so an item the cluster would convert in time is not cut
    short. Called in the child, which has imported the run's modules by then."""
    from .settings import report_grace

    return item_timeout + report_grace(item_timeout)


class Watch:
    """The child's side of the pipe: `limit` once it knows how long a step may take, then `beat` at each step.

    One message a line: a beat is an empty line, a limit `L<seconds>`, the outcome `R<json>` (`Outcome`)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def limit(self, stall_s: float) -> None:
        """The longest the child may now make no step (`stall_after`); until it says, it is waited for."""
        os.write(self._fd, f"L{stall_s!r}\n".encode())

    def beat(self) -> None:
        """A step made."""
        os.write(self._fd, b"\n")

    def _ended(self, outcome: Outcome) -> None:
        os.write(self._fd, b"R" + json.dumps(dataclasses.asdict(outcome)).encode() + b"\n")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the child's conversion ended: its exit code, what it printed, or its usage error (message, hint).

    Its printed output and its error travel to the command, which prints them as its own: the command's caller
    sees them where it looks (a test's captured `sys.stdout`, which a forked child's writes would not reach)."""

    code: int
    out: str = ""
    error: tuple[str, str] | None = None
    died: str | None = None  # a worker process died (`runner.WorkerDied`): how, as `Failed.why`


def run_watched(convert: Callable[[Watch], int]) -> Outcome | Failed:
    """`convert(watch)` run in a forked child: how it ended, or `Failed` where it died by a signal, where a worker
    process of its own died (it raised `runner.WorkerDied`), or where it made no step for the time it set with
    `watch.limit` (it is then killed). What it prints to stdout, and a `UsageError` it
    raises, come back in the `Outcome`; its stderr (progress, a bug's traceback) goes where this process's does.

    Call it while this process runs one thread (a fork keeps only the calling one)."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        die_with(parent)
        _child(convert, Watch(write))
    os.close(write)
    try:
        return _watch(pid, read)
    except BaseException:  # a Ctrl-C reached the child too: it unwinds (its lock released), or is killed
        _stop(pid, _STOP_S)
        raise
    finally:
        os.close(read)


def die_with(parent: int) -> None:
    """End this process (a child of `parent`, just forked) when `parent` ends, however it ends (SIGKILL, the OOM
    killer): no conversion goes on by itself holding the store, as the cluster's workers end with their driver.
    Linux's `PR_SET_PDEATHSIG`."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        raise OSError("prctl is not available: a child could outlive the command (Linux only)")
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the command ended before the request was made
        os._exit(128 + signal.SIGKILL)


def _child(convert: Callable[[Watch], int], watch: Watch) -> NoReturn:
    from ..errors import UsageError
    from .runner import WorkerDied

    outcome = Outcome(code=1)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            code = convert(watch)
        outcome = Outcome(code=code, out=printed.getvalue())
    except UsageError as exc:
        outcome = Outcome(code=2, out=printed.getvalue(), error=(str(exc), exc.hint))
    except WorkerDied as exc:
        outcome = Outcome(code=1, died=str(exc))
    except KeyboardInterrupt:
        outcome = Outcome(code=128 + signal.SIGINT)  # the command was interrupted too, and says so
    except BaseException:  # noqa: BLE001 - a bug in our code: its traceback, as the command itself would print it
        import traceback

        traceback.print_exc()
    finally:
        try:
            watch._ended(outcome)
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(outcome.code)  # never return into the caller's stack: this process is the child


def _watch(pid: int, read: int) -> Outcome | Failed:
    stall_s: float | None = None
    pending = b""
    outcome: Outcome | None = None
    while True:
        ready, _, _ = select.select([read], [], [], stall_s)
        if not ready:
            _stop(pid, 0.0)
            return Failed(f"no progress for {stall_s:g} s")
        got = os.read(read, 1 << 16)
        if not got:  # the child's end closed: it has ended
            _, status = os.waitpid(pid, 0)
            if os.WIFSIGNALED(status):
                return Failed(f"killed by {signal.Signals(os.WTERMSIG(status)).name}")
            if outcome is not None and outcome.died is not None:
                return Failed(outcome.died)
            return outcome or Outcome(code=os.waitstatus_to_exitcode(status))
        *lines, pending = (pending + got).split(b"\n")
        for line in lines:
            if line.startswith(b"L"):
                stall_s = float(line[1:])
            elif line.startswith(b"R"):
                said = json.loads(line[1:])
                outcome = Outcome(code=said["code"], out=said["out"],
                                  error=None if said["error"] is None else tuple(said["error"]), died=said["died"])


def _stop(pid: int, wait_s: float) -> None:
    """End the child: at once, or once `wait_s` has passed without it ending by itself."""
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):  # ended and reaped already
        return
