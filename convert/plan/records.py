"""Incremental runs, the pure half: what earlier runs recorded, as records the planner compares with the plan.

Invariant: an outcome is reused only for the same source path, the same source
sha256, the same item ID and array name, and the same settings fingerprint
(tool version and every spec key that shapes a decoded result); the reused row
is the one the earlier run produced, so rows of unchanged items stay
byte-identical. An ok outcome lives in its array's attrs (`row`, `settings`,
and `complete`, which must equal the row's sha256); rejections of decoded items
live in `.labzarr/outcomes.json`. Rejections that may be transient
(`decoder_crash`, `timeout`) are never recorded, so a rerun tries them again.

A stack of 2D images is reused shard by shard: each shard task records what
it wrote (slots, sources, rows, each slot's chunk digest) in a gzipped JSON file (`SHARD_RECORDS`: its rows
hold every image's statistics, histograms too, which compress several-fold) under
`.labzarr/records/<id>/`, where `<id>` is named by the stack's `records` attr,
set with `complete` when the stack is installed. A shard whose slots hold the
same sources under the same settings is carried into the next stack as it is.
Reading and writing these records is `convert/write/outcomes.py`.

A record says what an array should hold, not that it still does: what the
store's cheap check (`convert/write/damage.py`: chunk files listed, attributes
read) or `labzarr verify` found damaged is a `Damage`, and the planner converts
such an array (a stack: the shards of its damaged slots) again instead of
reusing it, reporting each item as a `Repair`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labzarr.readers import Reason
from labzarr.store.format.index import decode_stats, encode_stats

from ..manifest import ClassCount, RoleSource, Row
from ..spec import Spec
from .stacks import ShardTask

__all__ = ["RECORD_VERSION", "RETRIED", "SHARD_RECORDS", "Damage", "KeptShard", "Outcome", "Recorded", "Repair",
           "ShardRecord", "StackRecord", "from_record", "merge_damage", "parse_shard_digests", "parse_shard_record",
           "settings_fingerprint",
           "shard_record", "to_record"]

RETRIED: frozenset[Reason] = frozenset({Reason.DECODER_CRASH, Reason.TIMEOUT})
RECORD_VERSION = 1  # of `.labzarr/outcomes.json` and of the shard records
SHARD_RECORDS = "*.json.gz"  # the shard records of a stack (gzipped: a small image's record is mostly histogram)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The row an earlier run's decoding produced for one source, and the settings fingerprint it was produced with."""

    fingerprint: str
    row: Row


@dataclass(frozen=True, slots=True)
class ShardRecord:
    """What one shard task wrote into a stack: its slots' items and rows, and each slot's chunk digest."""

    name: str  # its file in the stack's records folder
    first: int
    stop: int
    fingerprint: str
    items: tuple[tuple[int, str, str, str], ...]  # (slot, item_id, source, sha256), by slot
    rows: tuple[Row, ...]
    digests: tuple[str, ...]  # hex sha256 of slots first..stop-1, as `content.chunk_digest`


@dataclass(frozen=True, slots=True)
class StackRecord:
    """An installed stack: its layout and the records of the shard tasks that filled it."""

    array: str
    shape: tuple[int, ...]
    dtype: str
    per_shard: int
    records_id: str
    records: tuple[ShardRecord, ...]
    absent: frozenset[int] = frozenset()  # shards with no file (all zeros on purpose, or lost): never carried over

    def covering(self, shard: ShardTask, fingerprint: str) -> tuple[ShardRecord, ...] | None:
        """The records that together wrote exactly `shard`'s items under the settings `fingerprint`, or None."""
        stack = shard.stack
        if (self.shape, self.dtype, self.per_shard) != (tuple(stack.shape), stack.plane.dtype, stack.per_shard):
            return None
        mine = tuple(sorted((r for r in self.records if shard.first <= r.first and r.stop <= shard.stop),
                            key=lambda r: r.first))
        want = tuple((i.slot, i.item_id, i.source, i.sha256) for i in shard.items)
        if tuple(item for r in mine for item in r.items) != want:
            return None
        if any(r.fingerprint != fingerprint or any(row.reason in RETRIED for row in r.rows) for r in mine):
            return None
        return mine


@dataclass(frozen=True, slots=True)
class KeptShard:
    """A planned shard whose earlier content is carried into the new stack instead of being decoded."""

    shard: ShardTask
    records: tuple[ShardRecord, ...]


@dataclass(frozen=True, slots=True)
class Damage:
    """Why an array in the store must be converted again whatever its record says.

    `why` is a short phrase for the run summary ("chunk files missing"); `slots`, for a stack, the slots
    found damaged (their shards are redone; None: the whole array); `source`, where known, the item the
    store's index says the array held (an array whose attributes are lost cannot say it itself).
    """

    why: str
    slots: frozenset[int] | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class Repair:
    """One item a run converts again because its array was damaged, not because anything in the delivery changed."""

    item_id: str
    source: str
    array: str
    why: str


@dataclass(frozen=True, slots=True)
class Recorded:
    """Everything earlier runs recorded: volume outcomes by source, stacks by array path, and the damage found
    in the store's arrays, by array path."""

    volumes: Mapping[str, Outcome] = field(default_factory=dict)
    stacks: Mapping[str, StackRecord] = field(default_factory=dict)
    damaged: Mapping[str, Damage] = field(default_factory=dict)


def merge_damage(a: Mapping[str, Damage], b: Mapping[str, Damage]) -> dict[str, Damage]:
    """Both findings by array: reasons joined, slots united (a whole-array finding covers every slot)."""
    out = dict(a)
    for array, extra in b.items():
        seen = out.get(array)
        if seen is None:
            out[array] = extra
            continue
        why = seen.why if extra.why in seen.why.split(", ") else f"{seen.why}, {extra.why}"
        slots = None if seen.slots is None or extra.slots is None else seen.slots | extra.slots
        out[array] = Damage(why=why, slots=slots, source=seen.source or extra.source)
    return out


def settings_fingerprint(spec: Spec, tool_version: str) -> str:
    """A hash of everything besides the source bytes that shapes a decoded row or array."""
    shaping = {
        "tool_version": tool_version,
        "store": dataclasses.asdict(spec.store),
        "validate": dataclasses.asdict(spec.validate),
        "readers": list(spec.run.readers),
        "dicom": dataclasses.asdict(spec.dicom),  # series layout and scaling shape a DICOM item's voxels
    }
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, default=str).encode()).hexdigest()[:32]


def to_record(row: Row) -> dict[str, Any]:
    """A JSON-able dict of a row's decoded fields (labels and splits are decided afresh on every run, so left out)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Row):
        if f.name in ("labels", "label_source", "split_group", "split", "fold", "pin"):
            continue
        value = getattr(row, f.name)
        if f.name == "stats":
            if value is not None:
                out[f.name] = encode_stats(value)
            continue
        out[f.name] = value.value if isinstance(value, Reason) else _jsonable(value)
    return out


def from_record(record: Mapping[str, Any]) -> Row:
    """The row `to_record` recorded; raises KeyError/ValueError/TypeError on a record it did not write."""
    known = {f.name for f in dataclasses.fields(Row)}
    values = {k: _tuples(v) for k, v in record.items() if k in known}
    for name, cls in _NESTED.items():
        if name in values:
            values[name] = tuple(cls(**item) for item in values[name])
    if values.get("reason") is not None:
        values["reason"] = Reason(values["reason"])
    if "stats" in record:
        values["stats"] = decode_stats(record["stats"])
    return Row(**values)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


_NESTED: dict[str, type] = {"roles": RoleSource, "classes": ClassCount}  # Row fields holding records


def shard_record(task: ShardTask, rows: Sequence[Row], digests: Sequence[bytes],
                 fingerprint: str) -> tuple[str, bytes]:
    """The file name and bytes recording what shard task `task` wrote."""
    doc = {
        "version": RECORD_VERSION, "settings": fingerprint, "first": task.first, "stop": task.stop,
        "items": [[i.slot, i.item_id, i.source, i.sha256] for i in task.items],
        "rows": [to_record(r) for r in rows], "digests": [d.hex() for d in digests],
    }
    data = (json.dumps(doc, sort_keys=True) + "\n").encode()
    return f"{task.first:010d}-{task.stop:010d}.json.gz", gzip.compress(data, compresslevel=6, mtime=0)


def _shard_document(name: str, blob: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(gzip.decompress(blob))
    except (OSError, EOFError, zlib.error) as exc:  # a torn or foreign file: its shard is decoded again
        raise ValueError(f"{name}: not a gzipped record ({type(exc).__name__}: {exc})") from exc
    if not isinstance(doc, dict) or doc.get("version") != RECORD_VERSION:
        raise ValueError(f"{name}: record version {doc.get('version') if isinstance(doc, dict) else None!r}")
    return doc


def parse_shard_digests(name: str, blob: bytes) -> tuple[int, int, tuple[str, ...]]:
    """(first slot, stop, each slot's chunk digest) of the record `shard_record` wrote as `name`, its rows left
    unbuilt (what hashing a stack needs: building every row, statistics and all, was most of the driver's time
    there); raises like `parse_shard_record`."""
    doc = _shard_document(name, blob)
    return int(doc["first"]), int(doc["stop"]), tuple(map(str, doc["digests"]))


def parse_shard_record(name: str, blob: bytes) -> ShardRecord:
    """The record `shard_record` wrote as `name`; raises ValueError/KeyError/TypeError on anything else."""
    doc = _shard_document(name, blob)
    return ShardRecord(name=name, first=int(doc["first"]), stop=int(doc["stop"]), fingerprint=str(doc["settings"]),
                       items=tuple((int(s), str(i), str(src), str(h)) for s, i, src, h in doc["items"]),
                       rows=tuple(from_record(r) for r in doc["rows"]), digests=tuple(map(str, doc["digests"])))
