"""Splits: each ok item's train/val/test split (or fold), decided per group, stable across deliveries (pure).

Invariant: what is never split (`[splits] group`: a patient, by default the item ID) lands in one
split; a group an earlier run assigned (the committed manifest's `split_group`, `split`, `fold`) keeps
its split while the settings stay the same; and the same rows, the same earlier manifest and the same
settings give the same assignment, whatever the worker count.

How a new group is assigned: the groups of one stratum (the `stratify` label's value, the most common
among the group's items) are taken in the order of a keyed hash of (seed, group key); each goes to the
split furthest below its target (fraction x groups in the stratum, counting the groups already assigned
or pinned), ties to the first split listed. So every stratum's split sizes are within one group of the
target on a first run, and appending items fills the splits that fell short without moving any group.

A `pinned` workbook column (each row's `pin`, read apart from the labels) pins items by hand (`train`,
`val`, `test`; with folds `test` or a fold number).
The audit (`Leak`) flags a group pinned to several splits, one content (the file's sha256 or the stored
voxels' content hash) in several splits, and a group whose items disagree on the stratification label.
With `leakage = "reject"` the first two cost the copies outside the group's (or content's) first split
their place: they are rejected `split_leakage`; a stratum disagreement is only reported.

Byte-identical files of different items reach the audit (`duplicate_key`): where they land in several
splits they are a content leak like any other; a later copy in the same split as an earlier one is
`duplicate_content`, as it is without `[splits]`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from labzarr.readers import Reason

from ..ids import base_id, normalize_id
from ..manifest import Row
from ..spec import ItemsSpec, SplitsSpec

__all__ = ["Leak", "Prior", "SplitResult", "assign_splits", "duplicate_key", "previous_assignment"]


def duplicate_key(splits: SplitsSpec | None, item_id: str, sha256: str) -> tuple[str, str]:
    """What a file's bytes are compared by to find a `duplicate_content` before any split is known: the bytes
    alone, and with `[splits]` the item too. A copy under another item (another patient, maybe) may land in
    another split, where it is the leak the audit reports; so it is decoded and left to `assign_splits`."""
    return (item_id if splits is not None else "", sha256)


@dataclass(frozen=True, slots=True, order=True)
class _Cat:
    """One place a group can go: a split, and with folds a fold (None for the held-out test split)."""

    split: str
    fold: int | None

    def __str__(self) -> str:
        return self.split if self.fold is None else f"fold {self.fold}"


@dataclass(frozen=True, slots=True)
class Prior:
    """An earlier run's assignment of one group, read from the committed manifest."""

    split: str
    fold: int | None


@dataclass(frozen=True, slots=True)
class Leak:
    """One audit finding: what it is, the group or content it is about, and the items involved."""

    kind: Literal["group_in_several_splits", "content_in_several_splits", "stratum_disagrees"]
    key: str  # the group, or the content's hash
    items: tuple[tuple[str, str, str], ...]  # (item_id, source, where: a split, a fold, or a label value)
    rejected: tuple[str, ...] = ()  # the sources rejected split_leakage for it

    def encode(self) -> dict[str, Any]:
        """The finding as `summary.json` holds it."""
        return {"kind": self.kind, "key": self.key, "rejected": list(self.rejected),
                "items": [{"item_id": i, "source": s, "where": w} for i, s, w in self.items]}


@dataclass(frozen=True, slots=True)
class SplitResult:
    """Every row with its split fields set (some ok rows rejected `split_leakage`), the audit, the summary."""

    rows: tuple[Row, ...]
    leaks: tuple[Leak, ...]
    summary: dict[str, Any]


def previous_assignment(manifest: Sequence[Mapping[str, str]]) -> dict[str, Prior]:
    """Each group's split in an earlier manifest (rows as `read_manifest` gives them); the first row wins."""
    out: dict[str, Prior] = {}
    for row in manifest:
        group, split = row.get("split_group", ""), row.get("split", "")
        if group and split and row.get("status") == "ok":
            fold = row.get("fold", "")
            out.setdefault(group, Prior(split, int(fold) if fold.isdigit() else None))
    return out


def _categories(spec: SplitsSpec) -> tuple[list[_Cat], list[float]]:
    if not spec.folds:
        return [_Cat(name, None) for name, _ in spec.fractions], [f for _, f in spec.fractions]
    test = dict(spec.fractions).get("test", 0.0)
    cats = ([_Cat("test", None)] if test else []) + [_Cat("train", k) for k in range(spec.folds)]
    return cats, ([test] if test else []) + [(1 - test) / spec.folds] * spec.folds


def _keep_order(cats: Sequence[_Cat]) -> list[_Cat]:
    """Which copy of a leak stays: the training side first (train, then val, then test; folds before test)."""
    return sorted(cats, key=lambda c: (c.split == "test", c.split == "val", c.fold or 0))


def _hash(seed: int, key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8"), key=seed.to_bytes(8, "little"), digest_size=8).digest()


def _group_key(row: Row, spec: SplitsSpec, items: ItemsSpec, pattern: re.Pattern[str]) -> tuple[str, str | None]:
    """The row's group and, where it has none of its own, the warning that says so. A part kept apart
    (`case1~trace`) goes with its item."""
    if spec.group_from == "id":
        return base_id(row.item_id), None
    if spec.group_from == "label":
        value = dict(row.labels).get(spec.group, "").strip()
        if value:
            return normalize_id(value, items.id_normalize), None
        return row.item_id, f"no {spec.group!r} label: grouped alone for [splits]"
    for path in (row.source, *row.members):
        m = pattern.search(path)
        if m and m.group(spec.group):
            return normalize_id(m.group(spec.group), items.id_normalize), None
    return row.item_id, (f"[items] id_pattern group {spec.group!r} matches nothing in the path: grouped alone "
                         "for [splits]")


def _pin(value: str, cats: Sequence[_Cat], spec: SplitsSpec) -> _Cat | str | None:
    """The category a pinned cell names, None for a blank cell, or the warning for one that names none."""
    text = value.strip().casefold()
    if not text:
        return None
    if spec.folds and text.isdigit() and int(text) < spec.folds:
        return _Cat("train", int(text))
    named = [c for c in cats if c.split == text and (c.fold is None)]
    if named:
        return named[0]
    allowed = ", ".join(dict.fromkeys([c.split for c in cats if c.fold is None]
                                      + ([f"0..{spec.folds - 1}"] if spec.folds else [])))
    return f"[splits] pinned {spec.pinned!r} is {value.strip()!r}, not one of {allowed}: assigned as if blank"


def _majority(values: Sequence[Any], order: Any) -> Any:
    counts = Counter(values)
    return min(counts, key=lambda v: (-counts[v], order(v)))


def assign_splits(rows: Sequence[Row], spec: SplitsSpec, items: ItemsSpec, *, prior: Mapping[str, Prior],
                  contents: Mapping[str, str]) -> SplitResult:
    """Assign every ok row's split (see the module docstring) and audit the result.

    `prior`: an earlier run's groups (`previous_assignment`), used only when that run had the same settings
    (the caller checks). `contents`: array path -> the stored voxels' content hash, where known.
    """
    cats, fractions = _categories(spec)
    pattern = re.compile(items.id_pattern)
    out = list(rows)
    ok = [i for i, r in enumerate(out) if r.status == "ok"]
    members: dict[str, list[int]] = defaultdict(list)
    warnings: dict[int, list[str]] = defaultdict(list)
    pins: dict[int, _Cat] = {}
    for i in ok:
        key, warning = _group_key(out[i], spec, items, pattern)
        members[key].append(i)
        if warning:
            warnings[i].append(warning)
        if spec.pinned:
            pin = _pin(out[i].pin, cats, spec)
            if isinstance(pin, _Cat):
                pins[i] = pin
            elif pin is not None:
                warnings[i].append(pin)
    leaks: list[Leak] = []
    strata: dict[str, str] = {}
    for key, idx in sorted(members.items()):
        values = [v for i in idx if (v := dict(out[i].labels).get(spec.stratify, "").strip())] if spec.stratify else []
        strata[key] = _majority(values, str) if values else ""
        if len(set(values)) > 1:
            leaks.append(Leak("stratum_disagrees", key, tuple(
                (out[i].item_id, out[i].source, dict(out[i].labels).get(spec.stratify, "")) for i in idx)))
    position = {c: n for n, c in enumerate(cats)}
    chosen: dict[str, _Cat] = {}
    for key, idx in members.items():
        pinned = [pins[i] for i in idx if i in pins]
        if pinned:
            chosen[key] = _majority(pinned, position.__getitem__)
        elif key in prior and (c := _Cat(prior[key].split, prior[key].fold)) in position:
            chosen[key] = c
    by_stratum: dict[str, list[str]] = defaultdict(list)
    for key in members:
        by_stratum[strata[key]].append(key)
    for _stratum, keys in sorted(by_stratum.items()):
        counts = Counter(chosen[k] for k in keys if k in chosen)
        for key in sorted((k for k in keys if k not in chosen), key=lambda k: (_hash(spec.seed, k), k)):
            deficits = [f * len(keys) - counts[c] for c, f in zip(cats, fractions)]
            best = max(range(len(cats)), key=lambda n: (deficits[n], -n))
            chosen[key] = cats[best]
            counts[cats[best]] += 1
    place: dict[int, _Cat] = {}
    rejected: dict[int, str] = {}
    for key, idx in sorted(members.items()):
        for i in idx:
            place[i] = pins.get(i, chosen[key]) if spec.leakage == "warn" else chosen[key]
        split_pins = {pins[i] for i in idx if i in pins}
        if len(split_pins) > 1:
            losers = [i for i in idx if i in pins and pins[i] != chosen[key]]
            if spec.leakage == "reject":
                for i in losers:
                    place[i] = pins[i]
                    rejected[i] = (f"group {key!r} is pinned to {chosen[key]} by most of its items; this item's "
                                   f"[splits] pinned {spec.pinned!r} puts it in {pins[i]}")
            leaks.append(Leak("group_in_several_splits", key,
                              tuple((out[i].item_id, out[i].source, str(pins.get(i, chosen[key]))) for i in idx),
                              tuple(out[i].source for i in losers) if spec.leakage == "reject" else ()))
    copies = _same_split_copies(out, place, rejected)
    leaks += _content_leaks(out, place, rejected, contents, spec, skip=copies.keys())
    group_of = {i: key for key, idx in members.items() for i in idx}
    for i in ok:
        c = place[i]
        row = replace(out[i], split_group=group_of[i], split=c.split, fold=c.fold,
                      warnings=out[i].warnings + tuple(warnings[i]))
        if i in rejected or i in copies:
            why = (Reason.SPLIT_LEAKAGE, rejected[i]) if i in rejected else (Reason.DUPLICATE_CONTENT, copies[i])
            row = replace(row.rejected(*why), split_group=row.split_group, split=c.split, fold=c.fold)
        out[i] = row
    leaks.sort(key=lambda lk: (lk.kind, lk.key))
    return SplitResult(rows=tuple(out), leaks=tuple(leaks), summary=_summary(out, spec, cats, leaks, strata))


def _same_split_copies(rows: Sequence[Row], place: Mapping[int, _Cat], rejected: Mapping[int, str]) -> dict[int, str]:
    """Byte-identical files of different items in one split (`duplicate_key`): the later ones by source, with why."""
    first: dict[tuple[str, _Cat], str] = {}
    out: dict[int, str] = {}
    for i in sorted((i for i in place if i not in rejected and rows[i].sha256), key=lambda i: rows[i].source):
        key = (rows[i].sha256, place[i])
        if key in first:
            out[i] = f"same sha256 as {first[key]} (in {place[i]} too)"
        else:
            first[key] = rows[i].source
    return out


def _content_leaks(rows: Sequence[Row], place: Mapping[int, _Cat], rejected: dict[int, str],
                   contents: Mapping[str, str], spec: SplitsSpec, *, skip: Collection[int]) -> list[Leak]:
    """One content (file bytes, or stored voxels) in several splits; with reject, copies outside the first go.
    `skip`: rows already out (a copy of another in its own split)."""
    by_content: dict[str, list[int]] = defaultdict(list)
    for i in sorted((i for i in place if i not in rejected and i not in skip), key=lambda i: rows[i].source):
        keys = {f"sha256:{rows[i].sha256}"} if rows[i].sha256 else set()
        if rows[i].slot is None and rows[i].array in contents:  # a stack's hash is of all its images
            keys.add(f"content_sha256:{contents[rows[i].array]}")
        for k in keys:
            by_content[k].append(i)
    leaks: list[Leak] = []
    seen: set[tuple[int, ...]] = set()
    for key in sorted(by_content):
        idx = by_content[key]
        where = {place[i] for i in idx}
        if len(where) < 2 or tuple(idx) in seen:
            continue
        seen.add(tuple(idx))
        keep = _keep_order(list(where))[0]
        first = next(i for i in idx if place[i] == keep)
        losers = [i for i in idx if place[i] != keep]
        if spec.leakage == "reject":
            for i in losers:
                rejected[i] = (f"same content ({key.split(':')[0]} {key.split(':')[1][:12]}...) as "
                               f"{rows[first].item_id} ({rows[first].source}) in {keep}; this copy in {place[i]} "
                               "would put it in two splits")
        leaks.append(Leak("content_in_several_splits", key,
                          tuple((rows[i].item_id, rows[i].source, str(place[i])) for i in idx),
                          tuple(rows[i].source for i in losers) if spec.leakage == "reject" else ()))
    return leaks


def _summary(rows: Sequence[Row], spec: SplitsSpec, cats: Sequence[_Cat], leaks: Sequence[Leak],
             strata: Mapping[str, str]) -> dict[str, Any]:
    sizes: dict[str, dict[str, int]] = {str(c): {"groups": 0, "items": 0} for c in cats}
    groups: dict[str, set[str]] = defaultdict(set)
    per_stratum: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        if r.status == "ok" and r.split:
            c = str(_Cat(r.split, r.fold))
            sizes[c]["items"] += 1
            groups[c].add(r.split_group)
            per_stratum[strata.get(r.split_group, "")][c].add(r.split_group)
    for c, g in groups.items():
        sizes[c]["groups"] = len(g)
    out: dict[str, Any] = {"settings": spec.settings(), "sizes": sizes,
                           "leakage": [lk.encode() for lk in leaks]}
    if spec.stratify:
        out["strata"] = {s: {str(c): len(per_stratum[s].get(str(c), ())) for c in cats} for s in sorted(per_stratum)}
    return out
