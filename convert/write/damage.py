"""The cheap check a run makes before it reuses what the store holds: each array it may reuse still has every
chunk file and readable attributes.

Invariant: no chunk is read. The check costs the `zarr.json` of each array, which `read_outcomes` reads anyway,
the root index, and a look at which storage files exist (`Listing`: on a URL store one paginated listing of
`volumes/` and one of `stacks/`; in a folder a stat per expected file). What it finds is `Damage` by array
path (`plan/records.py`), and the planner converts those arrays (of a stack: the shards whose files are lost)
again. A byte flipped inside a chunk file is not seen here: that takes `labzarr verify`, which reads every
chunk (`verify --repair`, `convert --verify`).

An array without `complete` is not damage: a run stopped before sealing it (on a URL store arrays are written
in place), and the resume rule converts it again. An array sealed without a record of its stored files (by a
labzarr before store format 3) is: it is converted again, so a rerun leaves a store of format 3 throughout.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from labzarr.store import COMPLETE, INDEX_KEY, Location, StoreIndex
from labzarr.store.content import stored_files
from labzarr.store.format.items import IndexItems
from labzarr.store.format.ngff import LEVEL0
from labzarr.store.format.nodes import ZARR_JSON, read_node_at
from labzarr.store.format.written import STORED, StoredFiles

from ..plan.build import VOLUMES, item_array, item_unit
from ..plan.records import Damage, from_record
from ..plan.stacks import STACKS

__all__ = ["ARRAY_MISSING", "ATTRS_MISSING", "ATTRS_UNREADABLE", "CHUNKS_MISSING", "UNRECORDED", "Listing",
           "absent_files",
           "find_damage"]

CHUNKS_MISSING = "chunk files missing"
ATTRS_MISSING = "attributes missing"  # chunk files without the zarr.json that describes them
ATTRS_UNREADABLE = "attributes unreadable"
ARRAY_MISSING = "array missing"  # in the store's index, nothing of it in the store
UNRECORDED = "no record of stored files"  # sealed by a labzarr before store format 3: converted again


@dataclass(frozen=True, slots=True)
class Listing:
    """Which files the items of a store (image groups `volumes/<name>`, stacks `stacks/<name>`) hold, found the
    cheapest way the store's kind allows.

    A URL store is listed once per group: a request per thousand keys, where asking per object would cost a
    request each. A folder is asked per expected file instead: zarr nests each chunk file three or four folders
    deep, so walking the tree opens more folders than stat-ing the files touches (10,000 volumes of 20 shard
    files each: 7 s to walk, 2 s to stat).
    """

    tops: frozenset[str]  # the image groups and stacks with anything in them
    listed: Mapping[str, frozenset[str]] | None  # a URL store's keys by top, relative to it; None for a folder
    folder: str = ""  # a folder store's path, asked per file

    @classmethod
    def of(cls, store: Location) -> Listing:
        """The listing of `store`: its groups' keys on a URL store, its groups' entries in a folder."""
        if store.remote:  # one listing per group: a request per thousand keys, not one per object
            found: dict[str, set[str]] = {}
            for group in (VOLUMES, STACKS):
                for key in (store / group).keys():
                    name, _, rest = key.partition("/")
                    if rest:
                        found.setdefault(f"{group}/{name}", set()).add(rest)
            return cls(tops=frozenset(found), listed={k: frozenset(v) for k, v in found.items()})
        folder = os.fspath(store.local_path())
        tops: set[str] = set()
        for group in (VOLUMES, STACKS):
            try:
                with os.scandir(os.path.join(folder, group)) as entries:
                    tops.update(f"{group}/{e.name}" for e in entries if e.is_dir())
            except FileNotFoundError:
                continue
        return cls(tops=frozenset(tops), listed=None, folder=folder)

    def present(self, array: str, keys: Iterable[str]) -> set[str]:
        """Those of `keys` (relative to `array`, a stack or any array of an image group) that exist."""
        if self.listed is not None:
            top = item_unit(array)
            prefix = array.removeprefix(top).strip("/")
            listed = self.listed.get(top, frozenset())
            return {k for k in keys if (f"{prefix}/{k}" if prefix else k) in listed}
        base = os.path.join(self.folder, array)
        return {k for k in keys if os.path.isfile(os.path.join(base, k))}

    def has_chunks(self, array: str) -> bool:
        """True when `array` holds chunk files of its own (`c/...`)."""
        if self.listed is not None:
            top = item_unit(array)
            prefix = array.removeprefix(top).strip("/")
            return any(k.startswith(f"{prefix}/c/" if prefix else "c/") for k in self.listed.get(top, ()))
        return os.path.isdir(os.path.join(self.folder, array, "c"))


def find_damage(store: Location, nodes: Sequence[tuple[str, Mapping[str, Any]]], listing: Listing) -> dict[str, Damage]:
    """What is wrong with the volumes and stacks of `store`, from their metadata (`nodes`, as `array_nodes` read
    them) and `listing`: lost chunk files, attributes lost or unreadable, arrays the index names that are gone."""
    found: dict[str, Damage] = {}
    sources = _index_sources(store)
    nodes_at = {item_unit(path) for path, _ in nodes if _is_top(path)}
    for path, meta in nodes:
        # A sample's arrays (their attrs name a role) are left alone: samples are decoded on every run.
        if _is_top(path) and not _in_sample(meta):
            why = _node_damage(path, meta, listing)
            if why is not None:
                found[path] = why
        elif _is_level(path, meta):  # a downsampled level lost is the volume's damage: its group is redone
            why = _node_damage(path, meta, listing, record=False)
            if why is not None:
                found.setdefault(item_array(path), why)
    for top in sorted(listing.tops - nodes_at):
        # Chunk files of the item's own array, but no array node for them (its zarr.json, or its group's, lost).
        path = item_array(top)
        if listing.has_chunks(path):
            found[path] = Damage(ATTRS_UNREADABLE if listing.present(path, [ZARR_JSON]) else ATTRS_MISSING,
                                 source=sources.get(path, ""))
    for path, source in sources.items():
        if item_unit(path) not in listing.tops:
            found[path] = Damage(ARRAY_MISSING, source=source)
    return found


def absent_files(path: str, meta: Mapping[str, Any], listing: Listing) -> list[tuple[str, tuple[int, ...]]]:
    """(key, grid coordinates) of the storage files `meta` implies that array `path` lacks, whether never written
    (its record of stored files says 0) or lost; raises ValueError for metadata labzarr does not read."""
    expected = stored_files(meta)
    present = listing.present(path, [key for key, _ in expected])
    return [(key, coords) for key, coords in expected if key not in present]


def _node_damage(path: str, meta: Mapping[str, Any], listing: Listing, *, record: bool = True) -> Damage | None:
    attrs = meta.get("attributes")
    if not isinstance(attrs, dict):
        return Damage(ATTRS_UNREADABLE)
    if COMPLETE not in attrs:
        return None
    if STORED not in attrs:  # sealed before store format 3: its lost files cannot be told from absent ones
        return Damage(UNRECORDED)
    try:
        if record and path.startswith(f"{VOLUMES}/"):
            from_record(attrs["row"])
            str(attrs["settings"])
        written = StoredFiles.decode(attrs[STORED])
        absent = absent_files(path, meta, listing)
    except (KeyError, ValueError, TypeError):
        return Damage(ATTRS_UNREADABLE)
    lost = [coords for _, coords in absent if written.size(coords)]
    if not lost:
        return None
    if path.startswith(f"{VOLUMES}/"):
        return Damage(CHUNKS_MISSING)
    per_shard = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    return Damage(CHUNKS_MISSING, slots=frozenset(c[0] * per_shard for c in lost))


def _is_top(path: str) -> bool:
    """An item's own array: a volume's level 0 (`volumes/case1/0`; a sample's image lies there too) or a stack."""
    group, _, name = path.partition("/")
    if group == STACKS:
        return bool(name) and "/" not in name
    parts = name.split("/")
    return group == VOLUMES and len(parts) == 2 and bool(parts[0]) and parts[1] == LEVEL0


def _in_sample(meta: Mapping[str, Any]) -> bool:
    attrs = meta.get("attributes")
    return isinstance(attrs, dict) and "role" in attrs


def _is_level(path: str, meta: Mapping[str, Any]) -> bool:
    """A downsampled level of a volume (`volumes/case1/2`), not of a sample's role."""
    group, _, name = path.partition("/")
    parts = name.split("/")
    return (group == VOLUMES and len(parts) == 2 and parts[1].isdigit() and parts[1] != LEVEL0
            and not _in_sample(meta))


def _index_sources(store: Location) -> dict[str, str]:
    """The arrays the store's own index names, each with its item's source ("" for a stack, which holds many)."""
    try:
        index = StoreIndex.decode(read_node_at(store).get("attributes", {}).get(INDEX_KEY), where=str(store),
                                  transport=store.transport())
    except (OSError, ValueError, AttributeError):
        return {}  # no index yet (a first run), or one a run did not finish: it is written again at the end
    # From the columns: a store of a million images builds no item to list its few stacks.
    items = IndexItems.of(index.items)
    own = ~items.has_roles()
    codes, arrays = items.text("array")
    out = {arrays[c]: "" for c in np.unique(codes[own & (items.slots() >= 0)]).tolist()}
    volumes = items.take(np.flatnonzero(own & (items.slots() < 0)))
    out |= dict(zip(volumes.values("array"), volumes.values("source")))
    return {array: source for array, source in out.items() if _is_top(array)}
