"""One run per store at a time: an exclusive `flock` on `.labzarr/lock`, which records who holds it.

The kernel drops an flock when its holder dies, however it dies (SIGKILL,
reboot), so a lock left by a dead run is simply free: the next run takes it
over and warns, naming the dead run from the file's content. A second live run
fails at once with the holder's pid, host and start time. If the recorded
holder is alive on this host although the flock was granted (a filesystem that
does not honour flock), the run refuses rather than trusting the lock.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import psutil

from .errors import UsageError
from .state import lock_path

__all__ = ["LockInfo", "StoreLocked", "lock_owner", "store_lock"]

log = logging.getLogger(__name__)

_WAIT_FOR_RECORD_S = 2.0


@dataclass(frozen=True, slots=True)
class LockInfo:
    """Who holds (or last held) a store: recorded in the lock file while the lock is held."""

    pid: int
    host: str
    started: str  # ISO 8601, UTC
    run_id: str
    process_started: float  # the holder's process creation time, to tell a reused pid apart

    def describe(self) -> str:
        """`pid 123 on host h, started 2026-11-02T10:00:00+00:00`."""
        return f"pid {self.pid} on host {self.host}, started {self.started}"

    def alive_here(self) -> bool:
        """True when this is a live process on this host (same pid and creation time)."""
        if self.host != socket.gethostname():
            return False
        try:
            return abs(psutil.Process(self.pid).create_time() - self.process_started) < 0.01
        except psutil.Error:
            return False


class StoreLocked(UsageError):
    """Another run holds the store."""


def _read(fd: int) -> LockInfo | None:
    os.lseek(fd, 0, os.SEEK_SET)
    blob = b""
    while chunk := os.read(fd, 65536):
        blob += chunk
    if not blob.strip():
        return None
    try:
        return LockInfo(**json.loads(blob))
    except (ValueError, TypeError):
        return None  # a torn or foreign file: nothing to name


def _read_holder(fd: int) -> LockInfo | None:
    """The holder's record; it writes it just after taking the flock, so wait a moment for it."""
    deadline = time.monotonic() + _WAIT_FOR_RECORD_S
    while (info := _read(fd)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return info


def _write(fd: int, info: LockInfo) -> None:
    blob = json.dumps(asdict(info), sort_keys=True).encode() + b"\n"
    os.pwrite(fd, blob, 0)
    os.ftruncate(fd, len(blob))
    os.fsync(fd)


@contextmanager
def store_lock(store: Path) -> Iterator[LockInfo]:
    """Hold `store`'s lock for the block; raise `StoreLocked` at once if another run holds it."""
    path = lock_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            who = holder.describe() if holder else "another process (no details recorded yet)"
            raise StoreLocked(f"{store}: in use by another labzarr run: {who}",
                              "wait for that run to finish (or stop it); a lock left by a dead run is taken over "
                              "automatically") from None
        previous = _read(fd)
        if previous is not None:
            if previous.alive_here() and previous.pid != os.getpid():
                raise StoreLocked(f"{store}: lock file names a live run ({previous.describe()}) although the lock "
                                  f"was free; this filesystem may not support flock",
                                  "wait for that run to finish, or convert onto a local filesystem")
            log.warning("%s: taking over the lock left by %s, which is no longer running", store,
                        previous.describe())
        me = psutil.Process()
        info = LockInfo(pid=me.pid, host=socket.gethostname(),
                        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        run_id=uuid.uuid4().hex, process_started=me.create_time())
        _write(fd, info)
        try:
            yield info
        finally:
            os.ftruncate(fd, 0)  # a clean release leaves nothing to take over
    finally:
        os.close(fd)  # closing the descriptor drops the flock


def lock_owner(store: Path) -> str | None:
    """The run id recorded in `store`'s lock file, or None (read without locking; for tasks)."""
    try:
        fd = os.open(lock_path(store), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        info = _read(fd)
    finally:
        os.close(fd)
    return info.run_id if info else None
