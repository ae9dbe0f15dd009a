"""Incremental runs, the I/O half: reading what earlier runs recorded in the store, and recording this run's.

The records and the rule for reusing them are `convert/plan/records.py`; this module only moves them between
the store and those records, with what the cheap check (`damage.py`) finds wrong in the arrays they describe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from labzarr.store import STATS, Location, sorted_glob
from labzarr.store.format.index import decode_stats

from ..manifest import Row
from ..plan.records import (
    RECORD_VERSION,
    RETRIED,
    SHARD_RECORDS,
    Outcome,
    Recorded,
    ShardRecord,
    StackRecord,
    from_record,
    parse_shard_record,
    to_record,
)
from .arrays import array_nodes
from .damage import Listing, absent_files, find_damage
from .state import outcomes_path, records_dir

__all__ = ["read_outcomes", "read_shard_record", "write_outcomes"]

log = logging.getLogger(__name__)


def read_outcomes(store: Location) -> Recorded:
    """What `store` records: complete volumes' rows and recorded rejections by source; complete stacks; and the
    damage the cheap check finds in the arrays (no chunk is read)."""
    volumes: dict[str, Outcome] = {}
    stacks: dict[str, StackRecord] = {}
    if not store.is_dir():
        return Recorded()
    nodes = array_nodes(store)
    listing = Listing.of(store)
    for array, meta in nodes:
        attrs = meta.get("attributes", {})
        if attrs.get("kind") == "stack":
            stack = _stack_record(store, array, meta, listing)
            if stack is not None:
                stacks[array] = stack
            continue
        try:
            row = from_record(attrs["row"])
            fingerprint = attrs["settings"]
            if attrs.get(STATS) is not None:  # kept apart from the row (`record_attrs`)
                row = replace(row, stats=decode_stats(attrs[STATS]))
        except (ValueError, KeyError, TypeError):
            continue  # not one of ours, or damaged: converted again
        if attrs.get("complete") == row.sha256 and row.array == array and row.status == "ok":
            volumes[row.source] = Outcome(fingerprint=fingerprint, row=row)
    for record in _read_rejections(store):
        try:
            row = from_record(record["row"])
            volumes.setdefault(row.source, Outcome(fingerprint=record["settings"], row=row))
        except (KeyError, ValueError, TypeError):
            continue
    return Recorded(volumes=volumes, stacks=stacks, damaged=find_damage(store, nodes, listing))


def _stack_record(store: Location, array: str, meta: Mapping[str, Any], listing: Listing) -> StackRecord | None:
    attrs = meta.get("attributes", {})
    records_id = attrs.get("records")
    if not attrs.get("complete") or not isinstance(records_id, str):
        return None
    try:
        shards = meta["chunk_grid"]["configuration"]["chunk_shape"]  # the shard shape
        per_shard = int(shards[0])
        records = tuple(read_shard_record(p) for p in sorted_glob(records_dir(store) / records_id, SHARD_RECORDS))
        # A shard whose file is gone (lost, or all zeros on purpose) cannot be carried over: its images are
        # decoded again, and a lost one is reported as damage.
        return StackRecord(array=array, shape=tuple(meta["shape"]), dtype=str(meta["data_type"]),
                           per_shard=per_shard, records_id=records_id, records=records,
                           absent=frozenset(coords[0] for _, coords in absent_files(array, meta, listing)))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # damaged or foreign: its images are decoded again


def read_shard_record(path: Location) -> ShardRecord:
    """A record `shard_record` wrote; raises OSError/ValueError/KeyError/TypeError on anything else."""
    return parse_shard_record(path.name, path.read_bytes())


def _read_rejections(store: Location) -> list[dict[str, Any]]:
    path = outcomes_path(store)
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); its items are decoded again", path, exc)
        return []
    if not isinstance(doc, dict) or doc.get("version") != RECORD_VERSION:
        return []
    rejected = doc.get("rejected", [])
    return rejected if isinstance(rejected, list) else []


def write_outcomes(store: Location, rows: Iterable[Row], fingerprint: str) -> None:
    """Record the rejections decoding produced (not the retried kinds), replacing the earlier record."""
    records: list[dict[str, Any]] = [{"settings": fingerprint, "row": to_record(r)} for r in rows
               if r.status == "rejected" and r.reason is not None and r.reason not in RETRIED]
    records.sort(key=lambda r: r["row"]["source"])
    doc = {"version": RECORD_VERSION, "rejected": records}
    outcomes_path(store).write_atomic((json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
