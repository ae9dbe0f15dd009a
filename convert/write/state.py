"""The store's bookkeeping folder `.labzarr/`: the lock, staged arrays, crash reports, recorded outcomes.

Invariant: nothing under `.labzarr/` is data. Arrays are written under
`staging/` and moved into the hierarchy whole (see `arrays.py`), so whatever a
killed run leaves behind is here or is a zarr `*.partial` temp file, and `sweep`
removes all of it before the next run starts work. `.labzarr` is itself a
metadata-only zarr group, so zarr lists the store root without warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, cast

from labzarr.store import STATE, Location
from labzarr.store.format import ZARR_JSON

AnyStore = TypeVar("AnyStore", bound=Location)

__all__ = ["STATE", "Swept", "crash_dir", "ensure_state", "lock_path", "outcomes_path", "prune_records",
           "records_dir", "run_log_path", "spill_dir", "staging_dir", "sweep", "trash_dir"]

_PURPOSE = "labzarr run bookkeeping (lock, staged arrays, crash reports, outcomes); not data"


def _state(store: AnyStore, name: str) -> AnyStore:
    # Folder / str is a Folder and UrlStore / str a UrlStore: a folder's bookkeeping paths are
    # files, a URL store's are URLs, and callers keep the kind they passed in.
    return cast(AnyStore, store / STATE / name)


def lock_path(store: AnyStore) -> AnyStore:
    """The store's lock file."""
    return _state(store, "lock")


def staging_dir(store: AnyStore) -> AnyStore:
    """Where arrays are written before they are moved into place."""
    return _state(store, "staging")


def trash_dir(store: AnyStore) -> AnyStore:
    """Where a replaced array is moved before it is deleted (a rename is atomic, a delete is not)."""
    return _state(store, "trash")


def crash_dir(store: AnyStore) -> AnyStore:
    """Per-item fault reports written by workers (faulthandler), read when a worker dies or hangs."""
    return _state(store, "crash")


def spill_dir(store: AnyStore) -> AnyStore:
    """Where a run's driver spills what it would otherwise hold per item (`labzarr.store.format.stats_spill`):
    beside the store, on its disk, rather than in a temporary folder that may be memory."""
    return _state(store, "spill")


def records_dir(store: AnyStore) -> AnyStore:
    """Per-stack folders of shard records (`plan/records.py`), each named by its stack's `records` attr."""
    return _state(store, "records")


def prune_records(store: Location, keep: set[str]) -> int:
    """Remove records folders no installed stack names (a killed run's, a replaced stack's); returns how many."""
    folder = records_dir(store)
    gone = 0
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name not in keep:
                entry.remove_tree()
                gone += 1
    return gone


def outcomes_path(store: AnyStore) -> AnyStore:
    """Recorded rejections of decoded items, so a rerun need not decode them again."""
    return _state(store, "outcomes.json")


def run_log_path(store: AnyStore) -> AnyStore:
    """The last run's log (timings, bytes decoded, what was converted or reused): kept out of the committed
    summary.json, which must not change on a rerun that changes nothing."""
    return _state(store, "last-run.json")


def ensure_state(store: Location) -> None:
    """Create `.labzarr/` as a zarr group (and the store's root group with it) if missing."""
    if not (store / STATE / ZARR_JSON).exists():
        import zarr  # here, not at the top: the driver uses this module's paths before it writes (or needs) zarr

        zarr.open_group(store.zarr(), path=STATE, mode="a", zarr_format=3,
                        attributes={"purpose": _PURPOSE})


@dataclass(frozen=True, slots=True)
class Swept:
    """What `sweep` removed."""

    staged: int
    partial: int
    crash_reports: int

    def __bool__(self) -> bool:
        return bool(self.staged or self.partial or self.crash_reports)


def sweep(store: Location) -> Swept:
    """Remove what a killed run left: staged and trashed arrays, its spill, zarr `*.partial` files, crash reports.

    Call only while holding the store's lock. A URL store has only staged stacks to sweep (found by
    listing): an object is written whole or not at all, and its crash reports stay on the driver.
    """
    staged = 0
    for folder in (staging_dir(store), trash_dir(store)):
        if folder.is_dir():
            for leftover in folder.iterdir():
                leftover.remove_tree()
                staged += 1
    if spill_dir(store).is_dir():  # a killed run's spill: no array, nothing to count
        for leftover in spill_dir(store).iterdir():
            leftover.remove_tree()
    partial = 0
    for path in store.partial_files():
        path.unlink(missing_ok=True)
        partial += 1
    reports = 0
    if crash_dir(store).is_dir():
        for path in crash_dir(store).iterdir():
            path.unlink(missing_ok=True)
            reports += 1
    return Swept(staged=staged, partial=partial, crash_reports=reports)
