"""What a sampler's checkpoint records of the store, so a resume on a changed store is refused, or remapped.

Invariant: an epoch's sequence and its deal to ranks depend on the dataset only through its
`Population`: the selected items (by their key in the store), samples per item, class of each item
(a stratified sampler) and group of each item. A checkpoint records the population and a hash of
the store's whole index; a resume on another index raises `StoreChangedError` naming what changed.
With ``strict=False`` the checkpoint's population re-derives what was left of its epoch, and each
left sample whose item is still selected maps to that item's sample now.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from labzarr.store import IndexItem
from labzarr.store.format.items import IndexItems

__all__ = ["Population", "StoreChangedError", "entries_hash", "index_hash"]

_SHOWN = 5  # item names listed per kind of change; the counts are always complete


def index_hash(items: Sequence[IndexItem]) -> str:
    """A sha256 that changes whenever the store's whole index does: of the index table's name (a digest of its
    content, recorded by its writer: nothing to compute), or `entries_hash` of items not read from a store."""
    if isinstance(items, IndexItems) and (name := items.table_digest) is not None:
        return hashlib.sha256(f"labzarr index table {name}".encode()).hexdigest()
    return entries_hash(items)


def entries_hash(items: Sequence[IndexItem]) -> str:
    """A sha256 over every item's entry, in order (what checkpoints recorded before `index_hash` read the table's
    digest: a resume from one compares this, once, when the recorded hash is not the table's)."""
    h = hashlib.sha256()
    for item in items:
        h.update(item.digest().encode())
    return h.hexdigest()


class StoreChangedError(ValueError):
    """A sampler state taken over another version of the store's index (items added, removed or changed)."""

    def __init__(self, message: str, *, added: Sequence[str], removed: Sequence[str], changed: Sequence[str]) -> None:
        super().__init__(message)
        self.added, self.removed, self.changed = tuple(added), tuple(removed), tuple(changed)


@dataclass(frozen=True, slots=True)
class Population:
    """The dataset's selection as a sampler sees it: item keys and names, their entries' digests, samples per
    item, class per item (None for a sampler without a label) and group per item."""

    keys: tuple[str, ...]
    names: tuple[str, ...]
    digests: tuple[str, ...]
    counts: tuple[int, ...]
    targets: tuple[int, ...] | None
    groups: tuple[str, ...]

    @classmethod
    def of(cls, items: Sequence[IndexItem], counts: Sequence[int], targets: Sequence[int] | None) -> Population:
        """The population of `items` with `counts` samples each and class `targets` (or None); of an `IndexItems`,
        from its columns (no item built)."""
        if isinstance(items, IndexItems):
            return cls(keys=tuple(items.keys()), names=tuple(items.values("item_id")), digests=tuple(items.digests()),
                       counts=tuple(int(c) for c in counts),
                       targets=None if targets is None else tuple(int(t) for t in targets),
                       groups=tuple(items.split_groups()))
        return cls(keys=tuple(i.key for i in items), names=tuple(i.item_id for i in items),
                   digests=tuple(i.digest()[:16] for i in items), counts=tuple(int(c) for c in counts),
                   targets=None if targets is None else tuple(int(t) for t in targets),
                   groups=tuple(i.split_group for i in items))

    def encode(self) -> dict[str, Any]:
        """The population as JSON-ready data, for a sampler's `state_dict`."""
        return {"keys": list(self.keys), "names": list(self.names), "digests": list(self.digests),
                "counts": list(self.counts), "targets": None if self.targets is None else list(self.targets),
                "groups": list(self.groups)}

    @classmethod
    def decode(cls, d: Mapping[str, Any]) -> Population:
        """The population `encode` wrote."""
        targets = d.get("targets")
        return cls(keys=tuple(str(k) for k in d["keys"]), names=tuple(str(n) for n in d["names"]),
                   digests=tuple(str(x) for x in d["digests"]), counts=tuple(int(c) for c in d["counts"]),
                   targets=None if targets is None else tuple(int(t) for t in targets),
                   groups=tuple(str(g) for g in d["groups"]))

    def sample_items(self) -> npt.NDArray[np.int64]:
        """For every sample index, the position of its item."""
        return np.repeat(np.arange(len(self.keys), dtype=np.int64), self.counts)

    def starts(self) -> npt.NDArray[np.int64]:
        """The first sample index of each item."""
        return np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def sample_targets(self) -> npt.NDArray[np.int64]:
        """The class of every sample (all 0 without a label)."""
        per_item = np.zeros(len(self.keys), dtype=np.int64) if self.targets is None else \
            np.asarray(self.targets, dtype=np.int64)
        return per_item[self.sample_items()]

    def sample_groups(self) -> tuple[int, npt.NDArray[np.int64]]:
        """How many groups there are, and the group code of every sample (codes in sorted group order)."""
        names, codes = np.unique(np.asarray(self.groups, dtype=object), return_inverse=True)
        return len(names), np.asarray(codes, dtype=np.int64)[self.sample_items()]

    def change(self, other: Population, *, where: str) -> StoreChangedError:
        """The error saying how `other` (the store now) differs from this population (the checkpoint's)."""
        mine, theirs = dict(zip(self.keys, self.digests)), dict(zip(other.keys, other.digests))
        name = dict(zip(self.keys, self.names)) | dict(zip(other.keys, other.names))
        added = [name[k] for k in other.keys if k not in mine]
        removed = [name[k] for k in self.keys if k not in theirs]
        changed = [name[k] for k in self.keys if k in theirs and mine[k] != theirs[k]]
        parts = [f"{len(v)} {what} ({_names(v)})" for what, v in
                 (("added", added), ("removed", removed), ("changed", changed)) if v]
        what = ", ".join(parts) if parts else "items outside this dataset's selection changed"
        return StoreChangedError(
            f"{where}: the store's index changed since this checkpoint: {what}; the checkpoint covered "
            f"{len(self.keys)} items, the store now gives {len(other.keys)}. Resume on the store the checkpoint "
            "was taken on, or pass strict=False to finish the epoch over the items still present",
            added=added, removed=removed, changed=changed)

    def remap(self, indexes: npt.NDArray[np.int64], now: Population) -> npt.NDArray[np.int64]:
        """Each of this population's sample `indexes` as a sample index of `now` (-1 where its item is gone)."""
        item = self.sample_items()[indexes]
        local = indexes - self.starts()[item]
        position = {k: p for p, k in enumerate(now.keys)}
        new_item = np.array([position.get(self.keys[j], -1) for j in item.tolist()], dtype=np.int64)
        counts = np.asarray(now.counts, dtype=np.int64)
        ok = (new_item >= 0) & (local < counts[np.maximum(new_item, 0)])
        return np.where(ok, now.starts()[np.maximum(new_item, 0)] + local, -1).astype(np.int64)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f", ... {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
