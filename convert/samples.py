"""Samples: the files of one item_id, one per role (`[items] roles`), planned as one unit. Pure, no I/O.

Invariant: with roles, every file that belongs to an item (it has an ID and a
role, and is an image or was rejected as one) is a member of exactly one
sample; a sample is converted as a whole (`SampleTask`) or rejected as a whole
(one `Row` whose `roles` lists every member), so a mask never outlives its
image and every file stays accounted for. The reference role (`image`) gives
the row its `source` and `sha256`; the row's `members` are all of its files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labzarr.readers import Reason

from .discover import Candidate, glob_match
from .manifest import RoleSource, Row
from .probe import Probe
from .spec import REFERENCE_ROLE, ItemsSpec, RolePattern

__all__ = ["RoleFile", "SampleTask", "group_samples", "role_of"]


@dataclass(frozen=True, slots=True)
class RoleFile:
    """One file of a sample, probed and ready to decode."""

    role: str
    source: str
    path: str
    kind: str
    sha256: str
    size: int = 0


@dataclass(frozen=True, slots=True)
class SampleTask:
    """Decode a sample's files into arrays `<group>/<role>`; `files` in spec role order, the reference first."""

    item_id: str
    group: str
    files: tuple[RoleFile, ...]
    warnings: tuple[str, ...] = ()

    @property
    def reference(self) -> RoleFile:
        """The file whose geometry every other role must match (role `image`)."""
        return self.files[0]

    @property
    def source(self) -> str:
        return self.reference.source

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def base_row(self) -> Row:
        """The sample's row before conversion: ok, members and roles filled in."""
        ref = self.reference
        return Row(item_id=self.item_id, status="ok", source=ref.source, kind=ref.kind, sha256=ref.sha256,
                   n_files=len(self.files), members=tuple(f.source for f in self.files),
                   roles=tuple(RoleSource(f.role, f.source, f.sha256) for f in self.files), group=self.group)


def role_of(rel: str, roles: Sequence[tuple[str, RolePattern]]) -> list[str]:
    """Every role whose pattern matches `rel`, in spec order."""
    name = rel.rsplit("/", 1)[-1]
    out = []
    for role, p in roles:
        if p.regex:
            hit = re.search(p.pattern, rel) is not None
        else:
            hit = glob_match(rel if "/" in p.pattern else name, p.pattern)
        if hit:
            out.append(role)
    return out


def _describe(roles: Sequence[tuple[str, RolePattern]]) -> str:
    return ", ".join(f"{r}: {'regex ' if p.regex else ''}{p.pattern!r}" for r, p in roles)


def group_samples(items: ItemsSpec, decided: Sequence[tuple[Candidate, Row | Probe]],
                  names: Mapping[str, str]) -> tuple[list[SampleTask], list[Row]]:
    """Group files that belong to an item (probed, or rejected on their own) into samples by item_id and role.

    `names` maps each item_id to its store-safe group name under `volumes/`. A sample lacking a
    required role, with two files for one role, or with a member already rejected, becomes one
    rejected row; a file matching no role is ignored with the patterns in its detail.
    """
    by_item: dict[str, dict[str, list[tuple[Candidate, Row | Probe]]]] = {}
    rows: list[Row] = []
    order = [r for r, _ in items.roles]
    for c, d in decided:
        matched = role_of(c.rel, items.roles)
        if not matched:
            kind = d.kind if isinstance(d, Probe) else d.kind
            rows.append(Row(item_id=c.item_id or "", status="ignored", source=c.rel, kind=kind or "",
                            sha256=d.sha256, detail=f"matches no [items] roles pattern ({_describe(items.roles)}); "
                                                    "not part of any sample"))
            continue
        by_item.setdefault(c.item_id or "", {}).setdefault(matched[0], []).append((c, d))
    tasks: list[SampleTask] = []
    for item_id in sorted(by_item):
        found = by_item[item_id]
        files = [(role, c, d) for role in order for c, d in found.get(role, [])]
        warnings: list[str] = []
        for role, c, _ in files:
            also = role_of(c.rel, items.roles)[1:]
            if also:
                warnings.append(f"{c.rel} matches roles {role!r} and {', '.join(map(repr, also))}; "
                                f"taken as {role!r} (the first in [items] roles)")
        ref = next((x for x in files if x[0] == REFERENCE_ROLE), files[0])
        _, ref_c, ref_d = ref
        members = [ref] + [x for x in files if x is not ref]
        base = Row(item_id=item_id, status="rejected", source=ref_c.rel, kind=ref_d.kind or "", sha256=ref_d.sha256,
                   n_files=len(files), members=tuple(c.rel for _, c, _ in members),
                   roles=tuple(RoleSource(r, c.rel, d.sha256) for r, c, d in members), warnings=tuple(warnings))
        problem = _problem(items, item_id, found, members)
        if problem is not None:
            reason, detail = problem
            rows.append(base.rejected(reason, detail))
            continue
        tasks.append(SampleTask(
            item_id=item_id, group=f"volumes/{names[item_id]}", warnings=tuple(warnings),
            files=tuple(RoleFile(role=r, source=c.rel, path=str(c.entry.path), kind=d.kind or "", sha256=d.sha256,
                                 size=d.size) for r, c, d in members if isinstance(d, Probe)),
        ))
    return tasks, rows


def _problem(items: ItemsSpec, item_id: str, found: Mapping[str, Sequence[tuple[Candidate, Row | Probe]]],
             members: Sequence[tuple[str, Candidate, Row | Probe]]) -> tuple[Reason, str] | None:
    has = "; ".join(f"{r}: {c.rel}" for r, c, _ in members)
    for role in items.required_roles:
        if role not in found:
            pattern = dict(items.roles)[role]
            return Reason.MISSING_ROLE, (f"no file for required role {role!r} "
                                         f"({'regex ' if pattern.regex else ''}{pattern.pattern!r}) of item "
                                         f"{item_id!r}; has {has}")
    for role, files in found.items():
        if len(files) > 1:
            return Reason.MISSING_ROLE, (f"role {role!r} of item {item_id!r} is ambiguous: {len(files)} files "
                                         f"({', '.join(c.rel for c, _ in files)}); expected exactly one")
    for role, c, d in members:
        if isinstance(d, Row):
            assert d.reason is not None
            return d.reason, f"{role} {c.rel}: {d.detail}"
        if d.plane is not None:
            return Reason.UNSUPPORTED_FORMAT, (f"{role} {c.rel}: a 2D {d.kind} image; samples with [items] roles "
                                               "pair single-file volumes (NIfTI)")
    return None
