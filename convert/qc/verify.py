"""`labzarr verify`: re-read every chunk of every array and check it is what the run wrote.

Per array: its metadata parses; `complete` is set and equals the recorded
source sha256; every chunk (or shard) file exists (every chunk is written, so
a missing file is damage even where zarr would quietly read fill values);
every chunk decodes (crc32c and codec errors surface here); and the content
hash of the decoded values equals `content_sha256`, recorded at write time.
For the store: every item in the root index has its array. One chunk per
thread is in memory at a time.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import zarr

from labzarr.store import INDEX_KEY, STATE, Location, StoreReader, as_location
from labzarr.store.content import block_digests, chunk_digest, chunk_grid, combine_digests, missing_chunks

from ..reach import check_reachable

__all__ = ["Problem", "ProblemKind", "VerifyReport", "verify_store"]

_SHOWN_PER_ARRAY = 3

# What kind of damage a problem is, in the words the repair summary uses ("2 repaired (chunk unreadable: ...)").
ProblemKind = Literal["metadata unreadable", "never finished", "complete differs", "chunk files missing",
                      "chunk unreadable", "content hash differs", "no content hash", "array missing"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one array (or with the store's index).

    `at` is the first voxel of the damaged chunk (or chunk file), when the damage is in one place; None when it
    is the whole array's (its metadata, its content hash).
    """

    array: str
    item_id: str
    what: str
    kind: ProblemKind = "metadata unreadable"
    at: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What `verify_store` read and what it found wrong."""

    store: Location
    arrays: int
    chunks: int
    stored_bytes: int
    problems: tuple[Problem, ...]
    leftovers: int  # `*.partial` files and staged arrays of an interrupted run: harmless, swept by the next run

    @property
    def ok(self) -> bool:
        """True when nothing is damaged."""
        return not self.problems

    def damaged(self) -> list[str]:
        """The arrays (or '' for the index) with at least one problem, sorted."""
        return sorted({p.array for p in self.problems})

    def describe(self) -> str:
        """A short verdict, and a table of damaged items when there are any."""
        head = (f"{self.store}: {self.arrays} arrays, {self.chunks:,} chunks, {self.stored_bytes:,} B re-read")
        lines = [head]
        if self.leftovers:
            lines.append(f"note: {self.leftovers} leftover(s) of an interrupted run (the next convert removes them)")
        if self.ok:
            lines.append("ok: every chunk present and intact, every content hash matches")
            return "\n".join(lines)
        lines += [f"DAMAGED: {len(self.damaged())} item(s), {len(self.problems)} problem(s)", "",
                  f"{'item_id':<16} {'array':<28} problem"]
        by_array: dict[str, list[Problem]] = {}
        for p in self.problems:
            by_array.setdefault(p.array, []).append(p)
        for array in sorted(by_array):
            found = by_array[array]
            for p in found[:_SHOWN_PER_ARRAY]:
                lines.append(f"{p.item_id or '-':<16} {p.array or '(index)':<28} {p.what}")
            if len(found) > _SHOWN_PER_ARRAY:
                lines.append(f"{'':<16} {'':<28} ... and {len(found) - _SHOWN_PER_ARRAY} more")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Checked:
    chunks: int
    stored_bytes: int
    problems: tuple[Problem, ...]


def verify_store(store: Location | Path, *, threads: int | None = None) -> VerifyReport:
    """Re-read every chunk of every array in `store` (a folder or a URL store); raises FileNotFoundError/ValueError
    if it is no store, `UsageError` if a URL store cannot be reached."""
    store = as_location(store)
    check_reachable(store)
    if not (store / "zarr.json").is_file():
        raise FileNotFoundError(f"{store}: no zarr store here")
    root_meta = json.loads((store / "zarr.json").read_bytes())
    index = root_meta.get("attributes", {}).get(INDEX_KEY)
    if not isinstance(index, dict):
        raise ValueError(f"{store}: not a labzarr store (root attr {INDEX_KEY!r} missing)")
    nodes = store.array_nodes(skip=STATE)
    with ThreadPoolExecutor(max_workers=threads or min(8, os.cpu_count() or 1)) as pool:
        checked = list(pool.map(lambda node: _check_array(store, *node), nodes))
    problems = [p for c in checked for p in c.problems]
    present = {name for name, _ in nodes}
    problems += [Problem(item["array"], item.get("item_id", ""), "in the index but the array is missing",
                         "array missing")
                 for item in index.get("items", []) if item.get("array") not in present]
    return VerifyReport(store=store, arrays=len(nodes), chunks=sum(c.chunks for c in checked),
                        stored_bytes=sum(c.stored_bytes for c in checked), problems=tuple(problems),
                        leftovers=_leftovers(store))


def _check_array(store: Location, name: str, meta: dict[str, Any]) -> _Checked:
    # One reader per array, closed after it: a store of thousands of arrays must not hold their files open.
    with StoreReader(str(store), storage_options=store.options, max_open=1) as reader:
        return _check_with(store, reader, name, meta)


def _check_with(store: Location, reader: StoreReader, name: str, meta: dict[str, Any]) -> _Checked:
    attrs = meta.get("attributes", {})
    item_id = str(attrs.get("item_id", ""))

    def problem(what: str, kind: ProblemKind, at: tuple[int, ...] | None = None) -> Problem:
        return Problem(name, item_id, what, kind, at)

    try:
        arr = zarr.open_array((store / name).zarr(read_only=True), mode="r", zarr_format=3)  # its keys
        voxels = reader.array(name)  # the one read path
    except Exception as exc:  # noqa: BLE001 - any failure to open is damage to report, not to raise
        return _Checked(0, 0, (problem(f"metadata unreadable: {type(exc).__name__}: {exc}", "metadata unreadable"),))
    found: list[Problem] = []
    # A sample's class locations are derived data, rewritten with their sample: checked chunk by chunk only.
    sealed = not name.endswith("/locations")
    if not sealed:
        pass
    elif "complete" not in attrs:
        found.append(problem("no `complete` attr: the array was never finished", "never finished"))
    elif "sha256" in attrs and attrs["complete"] != attrs["sha256"]:
        found.append(problem(f"`complete` {attrs['complete'][:12]}... differs from the source sha256 "
                             f"{attrs['sha256'][:12]}...", "complete differs"))
    storage = tuple(arr.shards or arr.chunks)
    found += [problem(f"chunk file {key} missing (zarr would read fill values)", "chunk files missing",
                      tuple(i * n for i, n in zip(coords, storage)))
              for key, coords in missing_chunks((store / name).keys(), arr)]
    digests: dict[tuple[int, ...], bytes] = {}
    unreadable = 0
    # A shard is read in one call (its index once, its chunks in one ranged read); only a shard that fails to
    # read is read again chunk by chunk, to name each damaged chunk.
    unit = tuple(arr.shards) if arr.shards is not None else tuple(arr.chunks)
    for unit_index in itertools.product(*(range(n) for n in chunk_grid(arr.shape, unit))):
        outer = _region(unit_index, unit, arr.shape)
        try:
            digests.update(block_digests(voxels.read(outer), [r.start for r in outer], arr.chunks))
            continue
        except Exception:  # noqa: BLE001 - damage somewhere in this shard: find it chunk by chunk below
            pass
        for index in itertools.product(*(range(r.start // c, -(-r.stop // c)) for r, c in zip(outer, arr.chunks))):
            region = _region(index, arr.chunks, arr.shape)
            try:
                digests[index] = chunk_digest(voxels.read(region))
            except Exception as exc:  # noqa: BLE001 - crc32c mismatch, codec error, torn file: all damage
                unreadable += 1
                found.append(problem(f"chunk at {_where(region)} unreadable: {type(exc).__name__}: {exc}",
                                     "chunk unreadable", tuple(r.start for r in region)))
    recorded = attrs.get("content_sha256")
    if not sealed:
        pass
    elif recorded is None:
        found.append(problem("no `content_sha256` attr to check the values against", "no content hash"))
    elif not unreadable and combine_digests(arr.shape, arr.dtype, arr.chunks, digests) != recorded:
        found.append(problem("content hash differs from the one recorded at write time (changed or missing chunks)",
                             "content hash differs"))
    stored = (store / name).tree_bytes()
    return _Checked(len(digests) + unreadable, stored, tuple(found))


def _region(index: Sequence[int], step: Sequence[int], shape: Sequence[int]) -> tuple[slice, ...]:
    """The region of grid cell `index` of a grid of `step`-sized cells over `shape` (edge cells trimmed)."""
    return tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, step, shape))


def _where(region: Sequence[slice]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in region) + "]"


def _leftovers(store: Location) -> int:
    staging = store / STATE / "staging"
    staged = sum(1 for _ in staging.iterdir()) if staging.is_dir() else 0
    return staged + len(store.partial_files())
