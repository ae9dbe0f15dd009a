"""The conversion plan: pure data decided from discovery and probes, before any decoding.

Invariant: every candidate ends in exactly one place, a `VolumeTask` (a volume to
decode), a slot of a `ShardTask` (a 2D image to decode into its stack), a
decided `Row` (ignored, or rejected without decoding), or an `unchanged` row an
earlier run produced for the same bytes and settings (`records.py`: a volume's
array, or a whole shard of a stack, is kept as it is, unless found damaged: then
it is decoded again and listed in `repaired`); array names and slots
depend only on the sorted file list, never on worker count, timing or what
earlier runs did.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from labzarr.readers import DicomReader, Plane, Reason, Rejected, SeriesStack, check_plane
from labzarr.store.format.ngff import LEVEL0

from ..discover import Candidate
from ..manifest import Row
from ..probe import Probe
from ..spec import MASK_ROLE, REFERENCE_ROLE, Spec
from .dicom_masks import attach_masks, is_mask_object
from .records import Damage, KeptShard, Outcome, Recorded, Repair
from .samples import Part, RoleFile, SampleTask, file_part, group_samples, series_part
from .series import group_series
from .splits import duplicate_key
from .stacks import ShardTask, Stack, StackEntry, plan_stacks

__all__ = ["IMAGE_SUFFIXES", "Plan", "VolumeTask", "plan"]

# Names that claim to be an image: such a file with unknown content is rejected, not ignored.
IMAGE_SUFFIXES: tuple[str, ...] = (
    ".nii", ".nii.gz", ".hdr", ".img", ".dcm", ".dicom", ".ima", ".jpg", ".jpeg", ".jpe", ".png",
    ".tif", ".tiff", ".mgz", ".mnc", ".nrrd", ".gz",
)
VOLUMES = "volumes"


def item_unit(path: str) -> str:
    """What is staged, installed and removed as one for the item at `path`: `volumes/<item>` for any path below
    it (its level-0 array, a role, a level), else `path` itself (a stack)."""
    group, _, rest = path.partition("/")
    return f"{group}/{rest.partition('/')[0]}" if group == VOLUMES and rest else path


def item_array(path: str) -> str:
    """The array an item's damage is keyed by (what a task names): a volume's level 0 for any path in its group,
    a stack itself."""
    unit = item_unit(path)
    return f"{unit}/{LEVEL0}" if unit.startswith(f"{VOLUMES}/") else unit
# The names each kind is expected under; another image suffix on it earns a warning (a PNG named .jpg).
_KIND_SUFFIXES: dict[str, tuple[str, ...]] = {
    "nifti": (".nii", ".nii.gz", ".gz", ".hdr", ".img"), "dicom": (".dcm", ".dicom", ".ima"),
    "jpeg": (".jpg", ".jpeg", ".jpe"), "png": (".png",), "tiff": (".tif", ".tiff"),
}


@dataclass(frozen=True, slots=True)
class VolumeTask:
    """Decode one item into one array; `array` is its path in the store.

    A single-file item is read from `path`; a DICOM item from its `stack` (the
    laid-out series), its files listed in `members` (relative paths).
    """

    item_id: str
    source: str
    path: str
    kind: str
    sha256: str
    array: str
    size: int = 0  # bytes of the source file(s): progress, throughput and scheduling, never what is written
    warnings: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    stack: SeriesStack | None = None

    def base_row(self) -> Row:
        """The row every outcome of this task starts from: what the plan knows about the item."""
        return Row(item_id=self.item_id, status="ok", source=self.source, kind=self.kind, sha256=self.sha256,
                   n_files=max(1, len(self.members)), members=self.members)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run will do: volume `tasks` and 2D `shards` to decode into `stacks`, `rows` already decided,
    `unchanged` rows reused from the store (volumes as they are, the shards in `kept` carried into their stack);
    `repaired`: the items among those to decode that are decoded only because their array was damaged."""

    tasks: tuple[VolumeTask, ...]
    rows: tuple[Row, ...]
    unchanged: tuple[Row, ...] = ()
    stacks: tuple[Stack, ...] = ()
    shards: tuple[ShardTask, ...] = ()
    samples: tuple[SampleTask, ...] = ()  # with [items] roles: image + mask (+ ...) files decoded together
    kept: tuple[KeptShard, ...] = ()
    repaired: tuple[Repair, ...] = ()

    @property
    def n_items(self) -> int:
        """Items to decode: one per volume task, one per 2D slot, one per sample."""
        return len(self.tasks) + sum(len(s.items) for s in self.shards) + len(self.samples)

    def describe(self) -> str:
        """A human-readable listing for `--dry-run`."""
        lines = [f"{self.n_items} to convert, {len(self.unchanged)} unchanged, "
                 f"{len(self.rows)} decided without decoding"]
        lines += [f"  convert  {t.kind:<6} {t.item_id:<16} {t.source}"
                  + (f" [{len(t.members)} files]" if len(t.members) > 1 else "") + f" -> {t.array}"
                  for t in self.tasks]
        lines += [f"  sample   {s.reference.kind:<6} {s.item_id:<16} "
                  + ", ".join(f"{f.role} {f.source}" + (f" [{len(f.members)} files]" if len(f.members) > 1 else "")
                              for f in s.files) + f" -> {s.group}" for s in self.samples]
        for st in self.stacks:
            lines.append(f"  stack    {st.array}: {st.n} images, {st.per_shard} per shard, {st.n_shards} shards")
        lines += [f"  convert  {i.kind:<6} {i.item_id:<16} {i.source} -> {s.stack.array}[{i.slot}] (shard {s.shard})"
                  for s in self.shards for i in s.items]
        lines += [f"  unchanged {r.status:<8} {r.item_id:<14} {r.source}" for r in self.unchanged]
        lines += [f"  repair   {r.item_id:<23} {r.source} -> {r.array} ({r.why})" for r in self.repaired]
        for r in self.rows:
            why = f"{r.reason.value}: " if r.reason else ""
            lines.append(f"  {r.status:<8} {r.item_id or '-':<23} {r.source}  ({why}{r.detail})")
        return "\n".join(lines)


def plan(spec: Spec, candidates: Sequence[Candidate], probes: Mapping[str, Probe],
         done: Recorded | None = None, *, fingerprint: str = "") -> Plan:
    """Decide each candidate's fate from its probe and what earlier runs recorded (`done`); no I/O.

    DICOM files are grouped into series, 2D images into stacks. `fingerprint` is the run's settings
    fingerprint (`records.settings_fingerprint`): an earlier outcome is reused only when it was produced
    with the same one, and only when `done.damaged` finds nothing wrong with its array.
    """
    done = done or Recorded()
    others: list[tuple[Candidate, Probe]] = []
    dicom: list[tuple[Candidate, Probe]] = []
    objects: list[tuple[Candidate, Probe]] = []  # DICOM SEG and RTSTRUCT: masks of another series
    rows: list[Row] = []
    limits = spec.validate.limits()
    if spec.items.roles:
        return _plan_samples(spec, candidates, probes, done.damaged)
    planes: dict[Plane, Plane] = {}
    for c in candidates:
        decided = _decide(spec, c, probes.get(c.rel))
        if isinstance(decided, Row):
            rows.append(decided)
        elif is_mask_object(decided):
            objects.append((c, decided))
        elif decided.kind == DicomReader.kind:
            dicom.append((c, decided))
        else:
            others.append((c, _kept(decided, c.rel, planes)))
    others, duplicates = _split_duplicates(others, spec)
    rows += duplicates
    planar: list[StackEntry] = []
    todo: list[VolumeTask] = []
    for c, p in others:
        if p.plane is None:
            todo.append(VolumeTask(item_id=c.item_id or "", source=c.rel, path=str(c.entry.path), kind=p.kind or "",
                             sha256=p.sha256, array="", size=p.size, warnings=_name_warning(c.rel, p.kind or "")))
            continue
        try:
            check_plane(p.plane, limits)  # the header-first cap: a bomb is refused before any decoding
        except Rejected as exc:
            rows.append(Row(item_id=c.item_id or "", status="rejected", source=c.rel, kind=p.kind or "",
                            sha256=p.sha256, reason=exc.reason, detail=exc.detail))
            continue
        planar.append(StackEntry(item_id=c.item_id or "", source=c.rel, path=str(c.entry.path), kind=p.kind or "",
                                 sha256=p.sha256, plane=p.plane, warnings=_name_warning(c.rel, p.kind or ""),
                                 size=p.size))
    series, series_rows = group_series(dicom, spec.dicom.rules(), id_pattern=spec.items.id_pattern)
    rows += series_rows
    first = {duplicate_key(spec.splits, c.item_id or "", p.sha256): c.rel for c, p in others}
    volumes = []
    for s in sorted(series, key=lambda s: s.source):
        key = duplicate_key(spec.splits, s.item_id, s.sha256)
        if key in first:  # a whole series delivered twice (e.g. copied into two folders)
            rows.append(Row(item_id=s.item_id, status="rejected", source=s.source, kind=DicomReader.kind,
                            sha256=s.sha256, n_files=len(s.members), members=s.members,
                            reason=Reason.DUPLICATE_CONTENT, detail=f"same sha256 as {first[key]}"))
            continue
        first[key] = s.source
        size = s.size
        if s.stack.layout == "image":  # a radiograph or photograph: a 2D item, stacked like a JPEG
            plane = Plane(s.stack.samples, s.stack.rows, s.stack.columns, s.stack.dtype)
            try:
                check_plane(plane, limits)
            except Rejected as exc:
                rows.append(Row(item_id=s.item_id, status="rejected", source=s.source, kind=DicomReader.kind,
                                sha256=s.sha256, reason=exc.reason, detail=exc.detail))
                continue
            planar.append(StackEntry(item_id=s.item_id, source=s.source, path=str(spec.delivery.raw / s.members[0]),
                                     kind=DicomReader.kind, sha256=s.sha256, plane=plane,
                                     warnings=_name_warning(s.source, DicomReader.kind), size=size))
            continue
        todo.append(VolumeTask(item_id=s.item_id, source=s.source, path=str(spec.delivery.raw / s.members[0]),
                         kind=DicomReader.kind, sha256=s.sha256, array="", size=size, members=s.members, stack=s.stack))
        volumes.append(s)
    attached = attach_masks(objects, volumes, {s.source: s.series_uid for s in volumes})
    rows += attached.rows
    todo.sort(key=lambda t: (t.item_id, t.source))
    names = _array_names([t.item_id for t in todo])
    tasks: list[VolumeTask] = []
    unchanged: list[Row] = []
    repaired: list[Repair] = []
    # A volume is an NGFF image group; its array (what the row and the index name) is the group's level 0.
    samples: list[SampleTask] = []
    for task in (replace(t, array=f"{VOLUMES}/{name}/{LEVEL0}") for t, name in zip(todo, names)):
        mask = attached.masks.get(task.source)
        if mask is not None:  # a series with its SEG or RTSTRUCT: one sample, decoded on every run as samples are
            samples.append(_masked_sample(task, mask))
            continue
        earlier = done.volumes.get(task.source)
        same = earlier is not None and _same(earlier, task, fingerprint)
        hurt = done.damaged.get(task.array)
        if same and hurt is None:
            assert earlier is not None
            unchanged.append(earlier.row)
            continue
        tasks.append(task)
        # A repair is what would have been reused, or an array whose record the damage took with it (the index
        # may still say whose it was); a changed file is converted again anyway, damaged or not.
        if hurt is not None and (same or (earlier is None and hurt.source in ("", task.source))):
            repaired.append(Repair(item_id=task.item_id, source=task.source, array=task.array, why=hurt.why))
    stacks, all_shards = plan_stacks(planar)
    shards: list[ShardTask] = []
    kept: list[KeptShard] = []
    for shard in all_shards:
        earlier_stack = done.stacks.get(shard.stack.array)
        records = earlier_stack.covering(shard, fingerprint) if earlier_stack is not None else None
        hurt = _shard_damage(done.damaged.get(shard.stack.array), shard)
        absent = earlier_stack.absent if earlier_stack is not None else frozenset()  # no file to carry over
        if records is not None and hurt is None and shard.shard not in absent:
            kept.append(KeptShard(shard=shard, records=records))
            unchanged += [r for rec in records for r in rec.rows]
            continue
        shards.append(shard)
        if hurt is not None and (records is not None or earlier_stack is None):
            repaired += [Repair(item_id=i.item_id, source=i.source, array=shard.stack.array, why=hurt.why)
                         for i in shard.items]
    return Plan(tasks=tuple(tasks), rows=tuple(rows), unchanged=tuple(unchanged), stacks=stacks,
                shards=tuple(shards), kept=tuple(kept), repaired=tuple(repaired), samples=tuple(samples))


def _with_masks(samples: Sequence[SampleTask], masks: Mapping[str, RoleFile]) -> tuple[list[SampleTask], list[Row]]:
    """With roles: each SEG/RTSTRUCT joins the sample whose image is its series, as its `mask`; one whose series is
    no sample's image, or whose sample has a mask already, is rejected."""
    out, rows, used = [], [], set()
    for s in samples:
        mask = masks.get(s.reference.source) if s.reference.stack is not None else None
        if mask is None:
            out.append(s)
            continue
        used.add(s.reference.source)
        had = next((f for f in s.files if f.role == MASK_ROLE), None)
        if had is not None:
            rows.append(Row(item_id=s.item_id, status="rejected", source=mask.source, kind=mask.kind,
                            sha256=mask.sha256, reason=Reason.MISSING_ROLE,
                            detail=f"drawn on {s.reference.source}, whose sample already has mask {had.source}; "
                                   "one mask per sample"))
            out.append(s)
            continue
        out.append(replace(s, files=(*s.files, mask)))
    for source, mask in sorted(masks.items()):
        if source not in used:
            rows.append(Row(item_id="", status="rejected", source=mask.source, kind=mask.kind, sha256=mask.sha256,
                            reason=Reason.MISSING_ROLE,
                            detail=f"drawn on {source}, which is not the image of a converted sample (its own row "
                                   "says why)"))
    return out, rows


def _masked_sample(task: VolumeTask, mask: RoleFile) -> SampleTask:
    """A DICOM volume item and the SEG or RTSTRUCT drawn on it, as an image + mask sample in the item's group."""
    image = RoleFile(role=REFERENCE_ROLE, source=task.source, path=task.path, kind=task.kind, sha256=task.sha256,
                     size=task.size, members=task.members, stack=task.stack)
    return SampleTask(item_id=task.item_id, group=item_unit(task.array), files=(image, mask), warnings=task.warnings)


def _shard_damage(damage: Damage | None, shard: ShardTask) -> Damage | None:
    """`damage` where it touches `shard`'s slots (the shard's whole range, its empty slots too), else None."""
    if damage is None or damage.slots is None:
        return damage
    lo = shard.shard * shard.stack.per_shard
    return damage if any(lo <= s < lo + shard.stack.per_shard for s in damage.slots) else None


def _plan_samples(spec: Spec, candidates: Sequence[Candidate], probes: Mapping[str, Probe],
                  damaged: Mapping[str, Damage]) -> Plan:
    """With `[items] roles`: every file of an item joins its sample; see `samples.group_samples`.

    DICOM files are grouped into series first (as without roles), so a series is one part of its
    sample. Samples are decoded on every run (not yet reused from earlier runs), so a damaged one is
    repaired by any run; it is still listed in `repaired`.
    """
    rows: list[Row] = []
    parts: list[Part] = []
    dicom: list[tuple[Candidate, Probe]] = []
    objects: list[tuple[Candidate, Probe]] = []
    for c in candidates:
        decided = _decide(spec, c, probes.get(c.rel))
        if isinstance(decided, Probe) and is_mask_object(decided):
            objects.append((c, decided))
        elif isinstance(decided, Probe) and decided.kind == DicomReader.kind:
            dicom.append((c, decided))  # item IDs are checked per series
        elif c.item_id and (not isinstance(decided, Row) or decided.status == "rejected"):
            parts.append(file_part(c, decided))
        else:
            assert isinstance(decided, Row)
            rows.append(decided)
    series, series_rows = group_series(dicom, spec.dicom.rules(), id_pattern=spec.items.id_pattern)
    for r in series_rows:
        if r.item_id:
            parts.append(series_part(r))
        else:  # no item ID: not part of any sample
            rows.append(r)
    parts += [series_part(s, path=str(spec.delivery.raw / s.members[0]), size=s.size)
              for s in series]
    ids = sorted({p.item_id for p in parts})
    names = dict(zip(ids, _array_names(ids)))
    samples, sample_rows = group_samples(spec.items, parts, names)
    attached = attach_masks(objects, [s for s in series if s.stack.layout == "volume"],
                            {s.source: s.series_uid for s in series})
    samples, mask_rows = _with_masks(samples, attached.masks)
    sample_rows += [*attached.rows, *mask_rows]
    repaired = [Repair(item_id=s.item_id, source=s.source, array=array, why=damage.why) for s in samples
                for array, damage in sorted(damaged.items()) if array == s.group or array.startswith(f"{s.group}/")]
    return Plan(tasks=(), rows=(*rows, *sample_rows), samples=tuple(samples),
                repaired=tuple({(r.item_id, r.source): r for r in repaired}.values()))


def _same(earlier: Outcome, task: VolumeTask, fingerprint: str) -> bool:
    """An earlier outcome stands for `task` when nothing that shaped it has changed."""
    row = earlier.row
    return (earlier.fingerprint == fingerprint and row.source == task.source and row.sha256 == task.sha256
            and row.item_id == task.item_id and row.array in (task.array, "") and row.members == task.members)


def _kept(p: Probe, rel: str, planes: dict[Plane, Plane]) -> Probe:
    """What the plan reads of a file decoded alone (not DICOM): its size, digest, kind and plane, with the
    candidate's rel and one `Plane` object per distinct plane; held per file until the plan is made."""
    plane = None if p.plane is None else planes.setdefault(p.plane, p.plane)
    return Probe(rel=rel, size=p.size, sha256=p.sha256, kind=p.kind, text=False, gzipped=False, gzip_error=None,
                 magic=b"", plane=plane)


def _split_duplicates(decoding: list[tuple[Candidate, Probe]],
                      spec: Spec) -> tuple[list[tuple[Candidate, Probe]], list[Row]]:
    """The first file with given bytes is decoded; later ones are `duplicate_content`, decided here, not decoded
    (with `[splits]`, only copies under the same item: see `duplicate_key`).

    "First" prefers a file's own name over an NFC alias of another name, then source order.
    """
    first: dict[tuple[str, str], str] = {}
    keep: list[tuple[Candidate, Probe]] = []
    rows: list[Row] = []
    for c, p in sorted(decoding, key=lambda cp: (cp[0].entry.alias_of is not None, cp[0].rel)):
        key = duplicate_key(spec.splits, c.item_id or "", p.sha256)
        if key in first:
            detail = f"same sha256 as {first[key]}"
            if c.entry.alias_of == first[key]:
                detail += " (the same name in another Unicode normalisation form)"
            rows.append(Row(item_id=c.item_id or "", status="rejected", source=c.rel, kind=p.kind or "",
                            sha256=p.sha256, reason=Reason.DUPLICATE_CONTENT, detail=detail))
        else:
            first[key] = c.rel
            keep.append((c, p))
    keep.sort(key=lambda cp: cp[0].rel)
    return keep, rows


def _decide(spec: Spec, c: Candidate, p: Probe | None) -> Row | Probe:
    item_id = c.item_id or ""
    if c.excluded_by:
        return Row(item_id="", status="ignored", source=c.rel, detail=f"excluded: {c.excluded_by}")
    if c.entry.outside:
        return Row(item_id=item_id, status="rejected", source=c.rel, reason=Reason.PATH_OUTSIDE_RAW,
                   detail=f"symlink to {c.entry.outside}, outside raw {spec.delivery.raw}; not read")
    if c.entry.unreadable:
        return Row(item_id=item_id, status="rejected", source=c.rel, reason=Reason.CORRUPT_DATA,
                   detail=f"{c.entry.unreadable}; not read")
    if c.entry.special:
        return Row(item_id=item_id, status="rejected", source=c.rel, reason=Reason.UNSUPPORTED_FORMAT,
                   detail=f"not a regular file: {c.entry.special}; not read")
    assert p is not None, f"no probe for {c.rel}"  # the driver probes every candidate that is a readable file
    if p.error:
        return Row(item_id=item_id, status="rejected", source=c.rel, reason=Reason.CORRUPT_DATA,
                   detail=f"cannot read the file: {p.error}")
    # The fields every row of this file shares; a partial keeps them typed (a **dict would not).
    file_row = partial(Row, item_id=item_id, source=c.rel, sha256=p.sha256)
    if spec.labels is not None and os.path.normpath(c.entry.path) == str(spec.labels.workbook):
        return Row(item_id="", status="ignored", source=c.rel, sha256=p.sha256,
                   detail="label workbook ([labels] workbook): read for labels, not an image")
    if p.size == 0:
        return file_row(status="rejected", reason=Reason.EMPTY_FILE, detail="0 B; expected an image")
    if p.gzip_error:
        return file_row(status="rejected", reason=Reason.CORRUPT_DATA, detail=p.gzip_error)
    if p.kind == DicomReader.kind:
        if p.header_rejected:  # a DICOM header that does not parse: the file's own row, before any grouping
            reason, detail = p.header_rejected
            return file_row(status="rejected", reason=reason, detail=detail, kind=DicomReader.kind)
        if is_mask_object(p):
            return p  # a SEG or RTSTRUCT: the mask of the series it references (plan/dicom_masks.py)
        if p.dicom is None or not p.dicom.has_pixels:
            sop = p.dicom.sop_class_name if p.dicom else "?"
            uid = f" ({p.dicom.sop_class})" if p.dicom and p.dicom.sop_class else ""
            return file_row(status="ignored", kind=DicomReader.kind,
                            detail=f"not an image: {sop}{uid} has no Pixel Data")
        return p  # grouped into series, item IDs checked per series
    if p.kind is None:
        what = ("gzip-compressed " if p.gzipped else "") + ("text" if p.text else f"unrecognised content {p.magic!r}")
        suffix = _image_suffix(c.rel)
        if suffix:
            return file_row(status="rejected", reason=Reason.UNSUPPORTED_FORMAT,
                            detail=f"named {suffix} but content is {what}; no reader recognises it")
        return file_row(status="ignored", detail=f"not an image: {what}")
    if not c.item_id:
        return file_row(status="rejected", reason=Reason.ID_UNMATCHED, kind=p.kind,
                        detail=f"no match for [items] id_pattern {spec.items.id_pattern!r} in {c.rel!r}")
    if p.header_rejected:
        reason, detail = p.header_rejected
        return file_row(status="rejected", reason=reason, kind=p.kind, detail=detail)
    return p


def _name_warning(rel: str, kind: str) -> tuple[str, ...]:
    """A warning when the file's name claims another image format than its content (a PNG named .jpg)."""
    suffix = _image_suffix(rel)
    if suffix is None or kind not in _KIND_SUFFIXES or suffix in _KIND_SUFFIXES[kind]:
        return ()
    return (f"named {suffix} but the content is {kind}; read as {kind}",)


def _image_suffix(rel: str) -> str | None:
    name = rel.rsplit("/", 1)[-1].lower()
    return next((s for s in sorted(IMAGE_SUFFIXES, key=len, reverse=True) if name.endswith(s)), None)


def _array_names(item_ids: Sequence[str]) -> list[str]:
    """Store-safe names: the ID itself when unique, else `<id>~<n>` in source order."""
    safe = [re.sub(r"[^A-Za-z0-9._-]", "_", i) or "_" for i in item_ids]
    counts = Counter(safe)
    seen: Counter[str] = Counter()
    out = []
    for name in safe:
        if counts[name] > 1:
            seen[name] += 1
            name = f"{name}~{seen[name]}"
        out.append(name)
    return out
