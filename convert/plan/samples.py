"""Samples: the parts of one item_id, one per role (`[items] roles`), planned as one unit. Pure, no I/O.

A part is a single file or a whole DICOM series (its slices grouped first, by
`series.group_series`, so a series is one member of its sample, never one
member per slice). Invariant: with roles, every file that belongs to an item
(it has an ID and a role, and is an image or was rejected as one) is in exactly
one part, and every part in exactly one sample; a sample is converted as a
whole (`SampleTask`) or rejected as a whole (one `Row` whose `roles` lists
every member and whose `n_files`/`members` count every file), so a mask never
outlives its image and every file stays accounted for. The reference role
(`image`) gives the row its `source` and `sha256`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labzarr.readers import Reason, SeriesStack

from ..discover import Candidate, glob_match
from ..manifest import RoleSource, Row
from ..probe import Probe
from ..spec import REFERENCE_ROLE, ItemsSpec, RolePattern
from .series import SeriesItem

__all__ = ["Part", "RoleFile", "SampleTask", "file_part", "group_samples", "role_of", "series_part"]


@dataclass(frozen=True, slots=True)
class RoleFile:
    """One member of a sample, probed (or laid out, for a DICOM series) and ready to decode.

    A series has its `stack` and its files in `members`; `source` is then the series' name and `path` its first file.
    """

    role: str
    source: str
    path: str
    kind: str
    sha256: str
    size: int = 0
    members: tuple[str, ...] = ()
    stack: SeriesStack | None = None

    @property
    def files(self) -> tuple[str, ...]:
        """The relative paths this member was read from."""
        return self.members or (self.source,)


@dataclass(frozen=True, slots=True)
class SampleTask:
    """Decode a sample's members into arrays `<group>/<role>`; `files` in spec role order, the reference first."""

    item_id: str
    group: str
    files: tuple[RoleFile, ...]
    warnings: tuple[str, ...] = ()

    @property
    def reference(self) -> RoleFile:
        """The member whose geometry every other role must match (role `image`)."""
        return self.files[0]

    @property
    def source(self) -> str:
        return self.reference.source

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def base_row(self) -> Row:
        """The sample's row before conversion: ok, every file counted, roles filled in."""
        ref = self.reference
        files = tuple(p for f in self.files for p in f.files)
        return Row(item_id=self.item_id, status="ok", source=ref.source, kind=ref.kind, sha256=ref.sha256,
                   n_files=len(files), members=files,
                   roles=tuple(RoleSource(f.role, f.source, f.sha256) for f in self.files), group=self.group)


@dataclass(frozen=True, slots=True)
class Part:
    """One would-be member of a sample: a file or a DICOM series, with what planning decided about it.

    `decided` is the file's probe, the laid-out series, or the row that already rejects it (a bad
    file, a broken series); `files` are the relative paths it covers, `source` how rows name it.
    """

    item_id: str
    source: str
    files: tuple[str, ...]
    kind: str
    sha256: str
    decided: Probe | SeriesItem | Row
    path: str = ""
    size: int = 0


def file_part(c: Candidate, d: Probe | Row) -> Part:
    """A single file of an item as a part."""
    return Part(item_id=c.item_id or "", source=c.rel, files=(c.rel,), kind=d.kind or "", sha256=d.sha256,
                decided=d, path=str(c.entry.path), size=d.size if isinstance(d, Probe) else 0)


def series_part(s: SeriesItem | Row, *, path: str = "", size: int = 0) -> Part:
    """A DICOM series of an item as a part: laid out (`SeriesItem`), or rejected as a whole (its `Row`)."""
    return Part(item_id=s.item_id, source=s.source, files=s.members or (s.source,), kind="dicom", sha256=s.sha256,
                decided=s, path=path, size=size)


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


@dataclass(frozen=True, slots=True)
class _Roled:
    """A part with its role: the first role (spec order) its files match, and what else they match."""

    role: str
    part: Part
    also: tuple[str, ...]  # further roles a file of it matches (a warning)
    split: str  # non-empty when its files match different roles (a series cannot be split between roles)


def _role_of_part(part: Part, roles: Sequence[tuple[str, RolePattern]]) -> _Roled | None:
    matched = {f: role_of(f, roles) for f in part.files}
    firsts = Counter(m[0] if m else None for m in matched.values())
    if set(firsts) == {None}:
        return None
    order = [r for r, _ in roles]
    role = min((r for r in firsts if r is not None), key=order.index)
    split = ""
    if len(firsts) > 1:
        split = (f"{part.source}: its {len(part.files)} files match different roles ("
                 + ", ".join(f"{r or 'no role'}: {n} files" for r, n in sorted(firsts.items(), key=lambda kv: (
                     kv[0] is None, order.index(kv[0]) if kv[0] else 0)))
                 + "); a series is one member, of one role")
    also = tuple(dict.fromkeys(r for m in matched.values() for r in m[1:] if r != role))
    return _Roled(role=role, part=part, also=also, split=split)


def group_samples(items: ItemsSpec, parts: Sequence[Part],
                  names: Mapping[str, str]) -> tuple[list[SampleTask], list[Row]]:
    """Group the parts of items (probed, laid out, or rejected on their own) into samples by item_id and role.

    `names` maps each item_id to its store-safe group name under `volumes/`. A sample lacking a
    required role, with two parts for one role, with a series whose files match different roles,
    or with a member already rejected, becomes one rejected row; a part matching no role is ignored
    with the patterns in its detail.
    """
    by_item: dict[str, list[_Roled]] = {}
    rows: list[Row] = []
    order = [r for r, _ in items.roles]
    for part in parts:
        roled = _role_of_part(part, items.roles)
        if roled is None:
            rows.append(Row(item_id=part.item_id, status="ignored", source=part.source, kind=part.kind,
                            sha256=part.sha256, n_files=len(part.files),
                            members=part.files if len(part.files) > 1 else (),
                            detail=f"matches no [items] roles pattern ({_describe(items.roles)}); "
                                   "not part of any sample"))
            continue
        by_item.setdefault(part.item_id, []).append(roled)
    tasks: list[SampleTask] = []
    for item_id in sorted(by_item):
        found = sorted(by_item[item_id], key=lambda x: (order.index(x.role), x.part.source))
        warnings = tuple(f"{x.part.source} matches roles {x.role!r} and {', '.join(map(repr, x.also))}; "
                         f"taken as {x.role!r} (the first in [items] roles)" for x in found if x.also)
        ref = next((x for x in found if x.role == REFERENCE_ROLE), found[0])
        members = [ref] + [x for x in found if x is not ref]
        files = tuple(f for x in members for f in x.part.files)
        base = Row(item_id=item_id, status="rejected", source=ref.part.source, kind=ref.part.kind,
                   sha256=ref.part.sha256, n_files=len(files), members=files,
                   roles=tuple(RoleSource(x.role, x.part.source, x.part.sha256) for x in members), warnings=warnings)
        problem = _problem(items, item_id, members)
        if problem is not None:
            reason, detail = problem
            rows.append(base.rejected(reason, detail))
            continue
        tasks.append(SampleTask(item_id=item_id, group=f"volumes/{names[item_id]}", warnings=warnings,
                                files=tuple(_role_file(x) for x in members)))
    return tasks, rows


def _role_file(x: _Roled) -> RoleFile:
    p = x.part
    if isinstance(p.decided, SeriesItem):
        return RoleFile(role=x.role, source=p.source, path=p.path, kind=p.kind, sha256=p.sha256, size=p.size,
                        members=p.files, stack=p.decided.stack)
    return RoleFile(role=x.role, source=p.source, path=p.path, kind=p.kind, sha256=p.sha256, size=p.size)


def _problem(items: ItemsSpec, item_id: str, members: Sequence[_Roled]) -> tuple[Reason, str] | None:
    has = "; ".join(f"{x.role}: {x.part.source}" for x in members)
    by_role: dict[str, list[Part]] = {}
    for x in members:
        by_role.setdefault(x.role, []).append(x.part)
    for role in items.required_roles:
        if role not in by_role:
            pattern = dict(items.roles)[role]
            return Reason.MISSING_ROLE, (f"no file for required role {role!r} "
                                         f"({'regex ' if pattern.regex else ''}{pattern.pattern!r}) of item "
                                         f"{item_id!r}; has {has}")
    for x in members:
        if x.split:
            return Reason.MISSING_ROLE, f"{x.role} {x.split}"
    # A bad member decides before ambiguity: a corrupt slice beside its series is that slice's fault, not a 2nd image.
    for x in members:
        if isinstance(x.part.decided, Row):
            assert x.part.decided.reason is not None
            return x.part.decided.reason, f"{x.role} {x.part.source}: {x.part.decided.detail}"
    for role, parts in by_role.items():
        if len(parts) > 1:
            what = "files" if all(len(p.files) == 1 for p in parts) else "members"
            return Reason.MISSING_ROLE, (f"role {role!r} of item {item_id!r} is ambiguous: {len(parts)} {what} "
                                         f"({', '.join(p.source for p in parts)}); expected exactly one")
    flat = {x.role: _is_2d(x.part) for x in members}
    if len(set(flat.values())) > 1:
        ref = members[0]
        other = next(x for x in members if flat[x.role] != flat[ref.role])
        shape_of = {True: "a 2D image", False: "a volume"}
        return Reason.UNSUPPORTED_FORMAT, (f"{ref.role} {ref.part.source} is {shape_of[flat[ref.role]]}, {other.role} "
                                           f"{other.part.source} {shape_of[flat[other.role]]}; a sample pairs volumes "
                                           "with volumes (NIfTI files, DICOM series) or 2D images with 2D images")
    return None


def _is_2d(part: Part) -> bool:
    """A 2D image (JPEG, PNG, TIFF, a DICOM radiograph) rather than a volume."""
    d = part.decided
    return (isinstance(d, Probe) and d.plane is not None) or (isinstance(d, SeriesItem) and d.stack.layout != "volume")
