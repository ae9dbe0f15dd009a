"""The store's bookkeeping folder `.labzarr/`: the lock, staged arrays, crash reports, recorded outcomes.

Invariant: nothing under `.labzarr/` is data. Arrays are written under
`staging/` and moved into the hierarchy whole (see `store.py`), so whatever a
killed run leaves behind is here or is a zarr `*.partial` temp file, and `sweep`
removes all of it before the next run starts work. `.labzarr` is itself a
metadata-only zarr group, so zarr lists the store root without warnings.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import zarr

from .objstore import StoreRef, UrlStore, remove_tree, zarr_store

AnyStore = TypeVar("AnyStore", bound=StoreRef)

__all__ = ["STATE", "Swept", "crash_dir", "ensure_state", "lock_path", "outcomes_path", "prune_records",
           "records_dir", "staging_dir", "sweep", "trash_dir"]

STATE = ".labzarr"
_PURPOSE = "labzarr run bookkeeping (lock, staged arrays, crash reports, outcomes); not data"


def _state(store: AnyStore, name: str) -> AnyStore:
    # Path / str is a Path and UrlStore / str a UrlStore: a folder's bookkeeping paths are
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


def records_dir(store: AnyStore) -> AnyStore:
    """Per-stack folders of shard records (`resume.py`), each named by its stack's `records` attr."""
    return _state(store, "records")


def prune_records(store: StoreRef, keep: set[str]) -> int:
    """Remove records folders no installed stack names (a killed run's, a replaced stack's); returns how many."""
    folder = records_dir(store)
    gone = 0
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name not in keep:
                remove_tree(entry) if isinstance(entry, UrlStore) else shutil.rmtree(entry, ignore_errors=True)
                gone += 1
    return gone


def outcomes_path(store: AnyStore) -> AnyStore:
    """Recorded rejections of decoded items, so a rerun need not decode them again."""
    return _state(store, "outcomes.json")


def ensure_state(store: StoreRef) -> None:
    """Create `.labzarr/` as a zarr group (and the store's root group with it) if missing."""
    if not (store / STATE / "zarr.json").exists():
        zarr.open_group(zarr_store(store), path=STATE, mode="a", zarr_format=3,
                        attributes={"purpose": _PURPOSE})


@dataclass(frozen=True, slots=True)
class Swept:
    """What `sweep` removed."""

    staged: int
    partial: int
    crash_reports: int

    def __bool__(self) -> bool:
        return bool(self.staged or self.partial or self.crash_reports)


def sweep(store: StoreRef) -> Swept:
    """Remove what a killed run left: staged and trashed arrays, zarr `*.partial` files, crash reports.

    Call only while holding the store's lock. A URL store has only staged stacks to sweep (found by
    listing): an object is written whole or not at all, and its crash reports stay on the driver.
    """
    if isinstance(store, UrlStore):
        url_staged = staging_dir(store)
        entries = list(url_staged.iterdir()) if url_staged.is_dir() else []
        for entry in entries:
            remove_tree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
        return Swept(staged=len(entries), partial=0, crash_reports=0)
    staged = 0
    for folder in (staging_dir(store), trash_dir(store)):
        if folder.is_dir():
            for leftover in folder.iterdir():
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
                staged += 1
    partial = 0
    if store.is_dir():
        for path in store.rglob("*.partial"):
            path.unlink(missing_ok=True)
            partial += 1
    reports = 0
    if crash_dir(store).is_dir():
        for path in crash_dir(store).iterdir():
            path.unlink(missing_ok=True)
            reports += 1
    return Swept(staged=staged, partial=partial, crash_reports=reports)
