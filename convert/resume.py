"""Incremental runs: what earlier runs decoded, recorded in the store, so unchanged items are not decoded again.

Invariant: an outcome is reused only for the same source path, the same source
sha256, the same item ID and array name, and the same settings fingerprint
(tool version and every spec key that shapes a decoded result); the reused row
is the one the earlier run produced, so rows of unchanged items stay
byte-identical. An ok outcome lives in its array's attrs (`row`, `settings`,
and `complete`, which must equal the row's sha256); rejections of decoded items
live in `.labzarr/outcomes.json`. Rejections that may be transient
(`decoder_crash`, `timeout`) are never recorded, so a rerun tries them again.

A stack of 2D images is reused shard by shard: each shard task records what
it wrote (slots, sources, rows, each slot's chunk digest) in a file under
`.labzarr/records/<id>/`, where `<id>` is named by the stack's `records` attr,
set with `complete` when the stack is installed. A shard whose slots hold the
same sources under the same settings is carried into the next stack as it is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labzarr.readers import Reason
from labzarr.store import Location, sorted_glob

from .manifest import ClassCount, RoleSource, Row
from .spec import Spec
from .stacks import ShardTask
from .state import outcomes_path, records_dir
from .store import array_nodes

__all__ = ["KeptShard", "Outcome", "RETRIED", "Recorded", "ShardRecord", "StackRecord", "from_record",
           "read_outcomes", "settings_fingerprint", "shard_record", "to_record", "write_outcomes"]

log = logging.getLogger(__name__)

RETRIED: frozenset[Reason] = frozenset({Reason.DECODER_CRASH, Reason.TIMEOUT})
_OUTCOMES_VERSION = 1


@dataclass(frozen=True, slots=True)
class Outcome:
    """The row an earlier run's decoding produced for one source, and the settings it was produced with."""

    settings: str
    row: Row


@dataclass(frozen=True, slots=True)
class ShardRecord:
    """What one shard task wrote into a stack: its slots' items and rows, and each slot's chunk digest."""

    name: str  # its file in the stack's records folder
    first: int
    stop: int
    settings: str
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

    def covering(self, shard: ShardTask, settings: str) -> tuple[ShardRecord, ...] | None:
        """The records that together wrote exactly `shard`'s items under `settings`, or None."""
        stack = shard.stack
        if (self.shape, self.dtype, self.per_shard) != (tuple(stack.shape), stack.plane.dtype, stack.per_shard):
            return None
        mine = tuple(sorted((r for r in self.records if shard.first <= r.first and r.stop <= shard.stop),
                            key=lambda r: r.first))
        want = tuple((i.slot, i.item_id, i.source, i.sha256) for i in shard.items)
        if tuple(item for r in mine for item in r.items) != want:
            return None
        if any(r.settings != settings or any(row.reason in RETRIED for row in r.rows) for r in mine):
            return None
        return mine


@dataclass(frozen=True, slots=True)
class KeptShard:
    """A planned shard whose earlier content is carried into the new stack instead of being decoded."""

    shard: ShardTask
    records: tuple[ShardRecord, ...]


@dataclass(frozen=True, slots=True)
class Recorded:
    """Everything earlier runs recorded: volume outcomes by source, stacks by array path."""

    volumes: Mapping[str, Outcome] = field(default_factory=dict)
    stacks: Mapping[str, StackRecord] = field(default_factory=dict)


def settings_fingerprint(spec: Spec, tool_version: str) -> str:
    """A hash of everything besides the source bytes that shapes a decoded row or array."""
    shaping = {
        "tool_version": tool_version,
        "store": dataclasses.asdict(spec.store),
        "validate": dataclasses.asdict(spec.validate),
        "readers": list(spec.run.readers),
    }
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, default=str).encode()).hexdigest()[:32]


def to_record(row: Row) -> dict[str, Any]:
    """A JSON-able dict of a row's decoded fields (labels are joined afresh on every run, so left out)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Row):
        if f.name in ("labels", "label_source"):
            continue
        value = getattr(row, f.name)
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
    return Row(**values)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


_NESTED: dict[str, type] = {"roles": RoleSource, "classes": ClassCount}  # Row fields holding records


def read_outcomes(store: Location) -> Recorded:
    """What `store` records: complete volumes' rows and recorded rejections by source; complete stacks."""
    volumes: dict[str, Outcome] = {}
    stacks: dict[str, StackRecord] = {}
    if not store.is_dir():
        return Recorded()
    for array, meta in array_nodes(store):
        attrs = meta.get("attributes", {})
        if attrs.get("kind") == "stack":
            stack = _stack_record(store, array, meta)
            if stack is not None:
                stacks[array] = stack
            continue
        try:
            row = from_record(attrs["row"])
            settings = attrs["settings"]
        except (ValueError, KeyError, TypeError):
            continue  # not one of ours, or damaged: converted again
        if attrs.get("complete") == row.sha256 and row.array == array and row.status == "ok":
            volumes[row.source] = Outcome(settings=settings, row=row)
    for record in _read_rejections(store):
        try:
            row = from_record(record["row"])
            volumes.setdefault(row.source, Outcome(settings=record["settings"], row=row))
        except (KeyError, ValueError, TypeError):
            continue
    return Recorded(volumes=volumes, stacks=stacks)


def _stack_record(store: Location, array: str, meta: Mapping[str, Any]) -> StackRecord | None:
    attrs = meta.get("attributes", {})
    records_id = attrs.get("records")
    if not attrs.get("complete") or not isinstance(records_id, str):
        return None
    try:
        shards = meta["chunk_grid"]["configuration"]["chunk_shape"]  # the shard shape
        per_shard = int(shards[0])
        records = tuple(read_shard_record(p) for p in sorted_glob(records_dir(store) / records_id, "*.json"))
        # A shard whose file is gone (damage) cannot be carried over: its images are decoded again.
        inner = ["0"] * (len(meta["shape"]) - 1)
        present = tuple(r for r in records
                        if (store / array / "/".join(["c", str(r.first // per_shard), *inner])).is_file())
        return StackRecord(array=array, shape=tuple(meta["shape"]), dtype=str(meta["data_type"]),
                           per_shard=per_shard, records_id=records_id, records=present)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # damaged or foreign: its images are decoded again


def shard_record(task: ShardTask, rows: Sequence[Row], digests: Sequence[bytes], settings: str) -> tuple[str, bytes]:
    """The file name and bytes recording what shard task `task` wrote."""
    doc = {
        "version": _OUTCOMES_VERSION, "settings": settings, "first": task.first, "stop": task.stop,
        "items": [[i.slot, i.item_id, i.source, i.sha256] for i in task.items],
        "rows": [to_record(r) for r in rows], "digests": [d.hex() for d in digests],
    }
    return f"{task.first:010d}-{task.stop:010d}.json", (json.dumps(doc, sort_keys=True) + "\n").encode()


def read_shard_record(path: Location) -> ShardRecord:
    """A record `shard_record` wrote; raises OSError/ValueError/KeyError/TypeError on anything else."""
    doc = json.loads(path.read_bytes())
    if doc.get("version") != _OUTCOMES_VERSION:
        raise ValueError(f"{path}: record version {doc.get('version')!r}")
    return ShardRecord(name=path.name, first=int(doc["first"]), stop=int(doc["stop"]), settings=str(doc["settings"]),
                       items=tuple((int(s), str(i), str(src), str(h)) for s, i, src, h in doc["items"]),
                       rows=tuple(from_record(r) for r in doc["rows"]), digests=tuple(map(str, doc["digests"])))


def _read_rejections(store: Location) -> list[dict[str, Any]]:
    path = outcomes_path(store)
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); its items are decoded again", path, exc)
        return []
    if not isinstance(doc, dict) or doc.get("version") != _OUTCOMES_VERSION:
        return []
    rejected = doc.get("rejected", [])
    return rejected if isinstance(rejected, list) else []


def write_outcomes(store: Location, rows: Iterable[Row], settings: str) -> None:
    """Record the rejections decoding produced (not the retried kinds), replacing the earlier record."""
    records: list[dict[str, Any]] = [{"settings": settings, "row": to_record(r)} for r in rows
               if r.status == "rejected" and r.reason is not None and r.reason not in RETRIED]
    records.sort(key=lambda r: r["row"]["source"])
    doc = {"version": _OUTCOMES_VERSION, "rejected": records}
    outcomes_path(store).write_atomic((json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
