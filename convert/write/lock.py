"""One run per store at a time: an exclusive `flock` on `.labzarr/lock`, which records who holds it.

The kernel drops an flock when its holder dies, however it dies (SIGKILL,
reboot), so a lock left by a dead run is simply free: the next run takes it
over and warns, naming the dead run from the file's content. A second live run
fails at once with the holder's pid, host and start time. If the recorded
holder is alive on this host although the flock was granted (a filesystem that
does not honour flock), the run refuses rather than trusting the lock.

A URL store (an object store) has no flock: its lock is the object
`.labzarr/lock`, created with a conditional PUT that fails when it exists,
and deleted on release. Nothing deletes it when its holder dies, so a lock
naming a dead process on this host is taken over; one naming another host
cannot be checked and must be deleted by hand (the error says which object).
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
from datetime import UTC, datetime
from pathlib import Path

import psutil

from labzarr.store import Location, as_location

from ..errors import UsageError
from ..reach import check_reachable
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
            created: float = psutil.Process(self.pid).create_time()
        except psutil.Error:
            return False
        return abs(created - self.process_started) < 0.01


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


def _new_info() -> LockInfo:
    me = psutil.Process()
    return LockInfo(pid=me.pid, host=socket.gethostname(),
                    started=datetime.now(UTC).isoformat(timespec="seconds"),
                    run_id=uuid.uuid4().hex, process_started=me.create_time())


def _parse(blob: bytes) -> LockInfo | None:
    try:
        return LockInfo(**json.loads(blob)) if blob.strip() else None
    except (ValueError, TypeError):
        return None


@contextmanager
def _object_lock(store: Location) -> Iterator[LockInfo]:
    """The lock object of a URL store: created only if absent (conditional PUT), deleted on release."""
    check_reachable(store)
    obj = lock_path(store)
    info = _new_info()
    blob = json.dumps(asdict(info), sort_keys=True).encode() + b"\n"
    for attempt in (1, 2):
        try:
            obj.create_exclusive(blob)
            break
        except FileExistsError:
            try:
                holder = _parse(obj.read_bytes())
            except FileNotFoundError:  # released between the two calls
                continue
            if attempt == 1 and holder is not None and holder.host == socket.gethostname() and not holder.alive_here():
                log.warning("%s: taking over the lock left by %s, which is no longer running", store,
                            holder.describe())
                obj.unlink(missing_ok=True)
                continue
            who = holder.describe() if holder else "another process (no details recorded)"
            raise StoreLocked(f"{store}: in use by another labzarr run: {who}",
                              f"wait for that run to finish (or stop it); if it died on another host, delete "
                              f"{obj} and rerun") from None
    else:
        raise StoreLocked(f"{store}: the lock object {obj} keeps changing hands", "rerun in a moment")
    try:
        yield info
    finally:
        try:
            if lock_owner(store) == info.run_id:  # never delete a lock another run took over
                obj.unlink(missing_ok=True)
        except store.transport_errors() as exc:  # the run's own outcome (or error) matters more
            log.warning("%s: could not release the lock (%s); delete %s before the next run", store, exc, obj)


@contextmanager
def store_lock(store: Location | Path) -> Iterator[LockInfo]:
    """Hold `store`'s lock for the block; raise `StoreLocked` at once if another run holds it.

    A folder is locked with flock on its lock file, a URL store with a lock object (no flock there)."""
    store = as_location(store)
    if store.lock_kind == "none":
        raise UsageError(f"{store}: a zipped store is read-only: it cannot be converted into or repaired in place",
                         "convert (or `labzarr verify --repair`) the store folder it was zipped from, then zip "
                         "that folder again")
    if store.lock_kind == "object":
        with _object_lock(store) as info:
            yield info
        return
    path = lock_path(store).local_path()
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
                        started=datetime.now(UTC).isoformat(timespec="seconds"),
                        run_id=uuid.uuid4().hex, process_started=me.create_time())
        _write(fd, info)
        try:
            yield info
        finally:
            os.ftruncate(fd, 0)  # a clean release leaves nothing to take over
    finally:
        os.close(fd)  # closing the descriptor drops the flock


def lock_owner(store: Location) -> str | None:
    """The run id recorded in `store`'s lock file, or None (read without locking; for tasks)."""
    try:
        held = _parse(lock_path(store).read_bytes())
    except FileNotFoundError:
        return None
    return held.run_id if held else None
