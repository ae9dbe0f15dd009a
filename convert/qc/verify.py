"""`labzarr verify`: re-read every chunk of every array and check it is what the run wrote.

Per array: its metadata parses; `complete` is set and equals the recorded
source sha256; every chunk (or shard) file its record of stored files sizes
exists at that size (a missing file is damage even where zarr would quietly
read fill values);
every chunk decodes (crc32c and codec errors surface here); and the content
hash of the decoded values equals `content_sha256`, recorded at write time.
For the store: every item in the root index has its array. One chunk per
thread is in memory at a time. Everything is read through the store's read
transport, so a zipped store is verified as a folder is.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from labzarr.store import (
    INDEX_KEY,
    STATE,
    Location,
    StoreIndex,
    StoreReader,
    as_location,
)
from labzarr.store.content import block_digests, chunk_digest, chunk_grid, combine_digests
from labzarr.store.format.items import IndexItems
from labzarr.store.format.layout import storage_keys
from labzarr.store.format.nodes import array_nodes, read_node
from labzarr.store.format.table import TABLE
from labzarr.store.format.written import STORED, StoredFiles

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


def verify_store(store: Location | Path | str, *, threads: int | None = None) -> VerifyReport:
    """Re-read every chunk of every array in `store` (a folder, a zipped store or a URL store) through the one
    read path; raises FileNotFoundError/ValueError if it is no labzarr store, `UsageError` if a URL store cannot
    be reached."""
    store = as_location(store)
    check_reachable(store)
    transport = store.transport()
    try:
        root = read_node(transport, "")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{store}: no zarr store here") from exc
    index = StoreIndex.decode(root.get("attributes", {}).get(INDEX_KEY), where=str(store), transport=transport)
    sizes = transport.sizes()
    nodes = array_nodes(transport, sizes, skip=STATE)
    slots = index.stack_slots()
    with ThreadPoolExecutor(max_workers=threads or min(8, os.cpu_count() or 1)) as pool:
        checked = list(pool.map(lambda node: _check_array(store, sizes, slots, *node), nodes))
    problems = [p for c in checked for p in c.problems]
    present = {name for name, _ in nodes}
    gone = set(IndexItems.of(index.items).text("array")[1]) - present
    problems += [Problem(item.array, item.item_id, "in the index but the array is missing", "array missing")
                 for item in (index.items if gone else ()) if item.array in gone]
    return VerifyReport(store=store, arrays=len(nodes), chunks=sum(c.chunks for c in checked),
                        stored_bytes=sum(c.stored_bytes for c in checked), problems=tuple(problems),
                        leftovers=_leftovers(sizes))


def _check_array(store: Location, sizes: Mapping[str, int], slots: Mapping[str, Mapping[int, str]], name: str,
                 meta: dict[str, Any]) -> _Checked:
    # One reader per array, closed after it: a store of thousands of arrays must not hold their files open.
    with StoreReader(str(store), storage_options=store.options, max_open=1, slots=slots) as reader:
        return _check_with(reader, sizes, name, meta)


def _check_with(reader: StoreReader, sizes: Mapping[str, int], name: str, meta: dict[str, Any]) -> _Checked:
    attrs = meta.get("attributes", {})
    item_id = str(attrs.get("item_id", ""))
    prefix = f"{name}/"
    mine = {k[len(prefix):]: n for k, n in sizes.items() if k.startswith(prefix)}

    def problem(what: str, kind: ProblemKind, at: tuple[int, ...] | None = None) -> Problem:
        return Problem(name, item_id, what, kind, at)

    try:
        voxels = reader.array(name)  # the one read path
        record = StoredFiles.decode(attrs[STORED]) if STORED in attrs else None
    except Exception as exc:  # noqa: BLE001 - any failure to open is damage to report, not to raise
        return _Checked(0, 0, (problem(f"metadata unreadable: {type(exc).__name__}: {exc}", "metadata unreadable"),))
    found: list[Problem] = []
    # A sample's class locations and the columns of the index and statistics tables are derived data, rewritten
    # whole: checked chunk by chunk only.
    sealed = not name.endswith("/locations") and TABLE not in attrs
    if not sealed:
        pass
    elif "complete" not in attrs:
        found.append(problem("no `complete` attr: the array was never finished", "never finished"))
    elif "sha256" in attrs and attrs["complete"] != attrs["sha256"]:
        found.append(problem(f"`complete` {attrs['complete'][:12]}... differs from the source sha256 "
                             f"{attrs['sha256'][:12]}...", "complete differs"))
    storage = voxels.shards or voxels.chunks
    lost: set[tuple[int, ...]] = set()  # storage files found missing or resized: reported once, not read
    if record is None:
        found.append(problem("no record of its stored files: a lost chunk file cannot be told from a chunk never "
                             "written", "chunk files missing"))
    else:
        for key, coords in storage_keys(meta):
            recorded, held = record.size(coords), mine.get(key)
            if not recorded or held == recorded:
                continue
            lost.add(coords)
            at = tuple(i * n for i, n in zip(coords, storage))
            if held is None:
                found.append(problem(f"chunk file {key} missing (the store recorded {recorded:,} B written)",
                                     "chunk files missing", at))
            else:
                found.append(problem(f"chunk file {key} holds {held:,} B, the store recorded {recorded:,} B",
                                     "chunk unreadable", at))
    digests: dict[tuple[int, ...], bytes] = {}
    unreadable = 0
    # A shard is read in one call (its index once, its chunks in one ranged read); only a shard that fails to
    # read is read again chunk by chunk, to name each damaged chunk.
    for unit_index in itertools.product(*(range(n) for n in chunk_grid(voxels.shape, storage))):
        if unit_index in lost:
            unreadable += 1
            continue
        outer = _region(unit_index, storage, voxels.shape)
        try:
            digests.update(block_digests(voxels.read(outer), [r.start for r in outer], voxels.chunks))
            continue
        except Exception:  # noqa: BLE001 - damage somewhere in this shard: find it chunk by chunk below
            pass
        for index in itertools.product(*(range(r.start // c, -(-r.stop // c))
                                         for r, c in zip(outer, voxels.chunks))):
            region = _region(index, voxels.chunks, voxels.shape)
            try:
                digests[index] = chunk_digest(voxels.read(region))
            except Exception as exc:  # noqa: BLE001 - crc32c mismatch, codec error, torn file: all damage
                unreadable += 1
                found.append(problem(f"chunk at {_where(region)} unreadable: {type(exc).__name__}: {exc}",
                                     "chunk unreadable", tuple(r.start for r in region)))
    recorded_hash = attrs.get("content_sha256")
    if not sealed:
        pass
    elif recorded_hash is None:
        found.append(problem("no `content_sha256` attr to check the values against", "no content hash"))
    elif not unreadable and combine_digests(voxels.shape, voxels.dtype, voxels.chunks, digests) != recorded_hash:
        found.append(problem("content hash differs from the one recorded at write time (changed or missing chunks)",
                             "content hash differs"))
    return _Checked(len(digests) + unreadable, sum(mine.values()), tuple(found))


def _region(index: Sequence[int], step: Sequence[int], shape: Sequence[int]) -> tuple[slice, ...]:
    """The region of grid cell `index` of a grid of `step`-sized cells over `shape` (edge cells trimmed)."""
    return tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, step, shape))


def _where(region: Sequence[slice]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in region) + "]"


def _leftovers(sizes: Mapping[str, int]) -> int:
    staging = f"{STATE}/staging/"
    staged = {k[len(staging):].split("/", 1)[0] for k in sizes if k.startswith(staging)}
    return len(staged) + sum(1 for k in sizes if k.endswith(".partial"))
