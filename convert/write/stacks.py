"""Stacks of 2D images in the store: staged for this run's shard tasks, then hashed, sealed and installed whole.

A stack with a shard to decode is rebuilt in a staging folder: the shards an
earlier run wrote for the same sources (`plan.kept`) are linked in (copied
server-side on a URL store), the shard tasks write the rest, and the stack is
installed by one move once its content hash is computed from the shard
records (`plan/records.py`) -- no voxel is read back. A stack whose shards are
all kept stays as it is, untouched.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from labzarr.store import Location, sorted_glob
from labzarr.store.content import chunk_digest, combine_digests
from labzarr.store.format.nodes import read_node_at

from ..manifest import Row
from ..plan.build import Plan
from ..plan.records import SHARD_RECORDS, parse_shard_digests
from ..plan.stacks import STACKS, Stack
from ..spec import Spec
from .arrays import carry_shard, create_stack, fill_missing_shards, install, open_stack, staging_folder
from .state import records_dir

__all__ = ["StagedStack", "install_stack", "records_in_use", "stage_stacks"]


@dataclass(frozen=True, slots=True)
class StagedStack:
    """A stack being rebuilt in a staging folder: what the shard tasks write into, and its records folder."""

    stack: Stack
    folder: Location
    records_id: str
    records: Location


def stage_stacks(store: Location, plan: Plan, spec: Spec) -> dict[str, StagedStack]:
    """Stage every stack with a shard to decode; link the kept shards (and their records) into it.

    A stack whose shards are all kept stays as it is, untouched.
    """
    staged: dict[str, StagedStack] = {}
    decode = {s.stack.array for s in plan.shards}
    for stack in plan.stacks:
        if stack.array not in decode:
            continue
        records_id = uuid.uuid4().hex
        folder = staging_folder(store, stack.array)
        array = create_stack(folder, stack, spec=spec.store)
        records = records_dir(store) / records_id
        records.mkdir(parents=True)
        for kept in (k for k in plan.kept if k.shard.stack.array == stack.array):
            carry_shard(store / stack.array, folder, array, kept.shard.shard)
            for rec in kept.records:
                old = _installed_records(store, stack.array)
                (records_dir(store) / old / rec.name).share_as(records / rec.name)  # type: ignore[arg-type]  # both of the store's kind
        staged[stack.array] = StagedStack(stack=stack, folder=folder, records_id=records_id, records=records)
    return staged


def _installed_records(store: Location, array: str) -> str:
    return str(read_node_at(store / array)["attributes"]["records"])


def install_stack(store: Location, staged: StagedStack, decoded: Iterable[Row], run_id: str, fingerprint: str) -> None:
    """Hash the staged stack from its shard records, seal it and move it into place; `decoded` (the run's decoded
    rows) is gone through once."""
    array = open_stack(staged.folder)
    empty = fill_missing_shards(staged.folder, array)
    digests: dict[tuple[int, ...], bytes] = {}
    for path in sorted_glob(staged.records, SHARD_RECORDS):
        first, stop, recorded = parse_shard_digests(path.name, path.read_bytes())
        for slot, digest in zip(range(first, stop), recorded):
            digests[(slot, 0, 0, 0)] = bytes.fromhex(digest)
    zero = chunk_digest(np.zeros(array.chunks, dtype=array.dtype))
    for slot in range(array.shape[0]):  # slots no task recorded (its worker died): zeros
        digests.setdefault((slot, 0, 0, 0), zero)
    ok = sorted((r.slot or 0, r.sha256) for r in decoded if r.status == "ok" and r.array == staged.stack.array)
    attrs = {
        "content_sha256": combine_digests(array.shape, array.dtype, array.chunks, digests),
        "records": staged.records_id, "settings": fingerprint, "ok": len(ok),
    }
    complete = hashlib.sha256("\n".join(f"{slot}:{sha}" for slot, sha in ok).encode()).hexdigest()
    install(store, staged.stack.array, staged.folder, array, complete=complete, run_id=run_id, attrs=attrs,
            never_written=empty)


def records_in_use(store: Location) -> set[str]:
    """The records folders the installed stacks name (what `prune_records` keeps)."""
    return {str(meta["attributes"]["records"]) for _, meta in (store / STACKS).array_nodes()
            if "records" in meta.get("attributes", {})}
