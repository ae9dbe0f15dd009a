"""Grouping DICOM files into items: series by UID, split where dcm2niix would split, each laid out.

Pure: a function of the probes' header records and the spec's `[dicom]`
rules. Invariant: every DICOM file with a readable image header ends in
exactly one place, a member of one `SeriesItem` or of one rejected `Row`
(files without pixel data and unreadable headers are decided per file by
`plan`, before they reach here).

Grouping and splitting, in dcm2niix's spirit:

- images without patient geometry (CR, DX, US, secondary captures) are one
  item per file: a 2D image, or a multi-frame object's frames;
- the rest are grouped by (item ID, StudyInstanceUID, SeriesInstanceUID);
- a series is split into parts, one item each, where its frames differ in
  Rows/Columns, echo (dcm2niix's `_e2` files), image type (a phase, real or
  imaginary image, a field map: dcm2niix's `_ph`, `_real`, `_imaginary`,
  `_fieldmaphz`) or image plane (a 3-plane localizer, radial slices): planes
  whose direction cosines differ by more than `DISTINCT_PLANE` (about 3
  degrees) are different planes, smaller differences are orientation drift,
  which the layout rejects. The split is by frame, so one enhanced file
  holding two echoes is two items (the file is a member of both);
- derived volumes are their own item, `<id>~trace`, `<id>~adc` or
  `<id>~derived` (dcm2niix removes them from the 4D and writes them apart),
  or with `[dicom] derived = "drop"` are left out, with a warning either way.
  Recognised as dcm2niix does (nii_dicom_batch.cpp, isADCnotDTI and the
  "ADC or trace" removal): on Philips a b > 0 volume with a zero gradient
  (the scanner's isotropic trace, ImageType ORIGINAL/PRIMARY), removed only
  while two or more other volumes remain; ADC or TRACE(W) in ImageType or
  FrameType; ISOTROPIC diffusion directionality (enhanced files, Philips'
  2001,1004); DERIVED frames in a series that also holds original ones;
- a series whose every part is too short (a 3-plane localizer or scout) is one
  `series_too_short` row naming its parts, not one look-alike row per plane.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from labzarr.readers import Reason, Rejected, SeriesRules, SeriesStack
from labzarr.readers.dicom import DicomHeader, Frame, Member, layout_series

from ..discover import Candidate
from ..ids import PART
from ..manifest import Row
from ..probe import Probe

__all__ = ["DISTINCT_PLANE", "SeriesItem", "group_series", "series_key", "series_of"]

DISTINCT_PLANE = 0.05  # direction-cosine difference beyond which two files image different planes (~3 degrees)
KIND = "dicom"


@dataclass(frozen=True, slots=True)
class SeriesItem:
    """One DICOM item to decode: its members (relative paths, sorted), content hash and layout; the members' bytes
    and their SeriesInstanceUID, which the plan would otherwise look up in the probes again, file by file."""

    item_id: str
    source: str
    members: tuple[str, ...]
    sha256: str
    stack: SeriesStack
    size: int  # bytes of the member files
    series_uid: str  # "" where the members have none (grouped by folder: `series_key`)


@dataclass(frozen=True, slots=True)
class _File:
    """A file of a series part; `header.frames` are the file's frames that belong to the part."""

    candidate: Candidate
    probe: Probe
    header: DicomHeader
    whole: bool = True  # False when the file's other frames went to another part

    @property
    def rel(self) -> str:
        return self.candidate.rel


@dataclass(frozen=True, slots=True)
class _Part:
    """One part of a split series: its label (", echo 2", ...), derived kind ("" for the acquisition), files."""

    label: str
    derived: str
    files: list[_File]


def group_series(files: Sequence[tuple[Candidate, Probe]], rules: SeriesRules, *, id_pattern: str
                 ) -> tuple[list[SeriesItem], list[Row]]:
    """Group DICOM image files into items; returns the items to decode and the rows decided without decoding."""
    items: list[SeriesItem] = []
    rows: list[Row] = []
    groups: dict[tuple[str, str, str], list[_File]] = defaultdict(list)
    for c, p in files:
        assert p.dicom is not None and p.dicom.has_pixels
        f = _File(c, p, p.dicom)
        if not f.header.spatial:  # a radiograph, a photo, a cine loop: each file is its own item
            _place(_laid_out([f], f.rel, rules, note=()), items, rows)
            continue
        groups[(c.item_id or "", *series_key(c.rel, f.header))].append(f)
    named = _name_groups(groups)
    for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0], named[kv[0]])):
        source = named[key]
        group.sort(key=lambda f: f.rel)
        if not key[0]:
            rows.append(_row(group, source, Reason.ID_UNMATCHED,
                             f"no match for [items] id_pattern {id_pattern!r} in the paths of this series "
                             f"(e.g. {group[0].rel!r})"))
            continue
        by, parts = _split(group)
        derived = [p for p in parts if p.derived]
        primary = [p for p in parts if not p.derived]
        notes = _derived_notes(derived, key[0], rules)
        if rules.derived == "drop":
            if not primary:  # a whole series of derived images (a scanner's ADC map series): listed, not stored
                rows.append(replace(_row(group, source, Reason.UNSUPPORTED_FORMAT, ""), status="ignored", reason=None,
                                    detail=notes[0]))
                continue
            parts, dropped = primary, [f for p in derived for f in p.files]
        else:
            dropped = []
        multi = len(parts) > 1
        note = (f"series split into {len(parts)} parts by {by} (as dcm2niix)",) if multi and by else ()
        laid = [_laid_out(p.files, f"{source[:-1]}, {p.label})" if p.label else source, rules,
                          note=note + notes,
                          item_id=f"{key[0]}{PART}{p.derived}" if p.derived else key[0], label=p.label,
                          extra=dropped if p is parts[0] else [])
                for p in parts]
        if multi and all(isinstance(r, Row) and r.reason is Reason.SERIES_TOO_SHORT for r in laid):
            # A localizer (scout): one row for the series, not one identical-looking row per plane.
            rows.append(_row(group, source, Reason.SERIES_TOO_SHORT, _localizer_detail(by, parts, rules)))
            continue
        for r in laid:
            _place(r, items, rows)
    return items, rows


def series_key(rel: str, header: DicomHeader) -> tuple[str, str]:
    """The series a file with patient geometry belongs to, whatever ID its path gives it: (StudyInstanceUID,
    SeriesInstanceUID), the file's folder standing in for a missing SeriesInstanceUID."""
    return header.study_uid, header.series_uid or posixpath.dirname(rel)


def _derived_notes(derived: Sequence[_Part], item_id: str, rules: SeriesRules) -> tuple[str, ...]:
    """The warning each derived part earns: what it is, why, and where it went."""
    out = []
    for p in derived:
        frames = [fr for f in p.files for fr in f.header.frames]
        why = _DERIVED_WHY[p.derived]
        where = ('left out ([dicom] derived = "drop")' if rules.derived == "drop"
                 else f"stored as item {item_id}{PART}{p.derived}")
        out.append(f"{len(frames)} frame(s) appear to be {why} (as dcm2niix, which removes them from the 4D); "
                   f"{where}")
    return tuple(out)


_DERIVED_WHY = {"trace": "a trace (isotropic diffusion) image", "adc": "an ADC map",
                "derived": "derived images (DERIVED in ImageType, in a series of ORIGINAL ones)"}


def _place(laid: SeriesItem | Row, items: list[SeriesItem], rows: list[Row]) -> None:
    if isinstance(laid, Row):
        rows.append(laid)
    else:
        items.append(laid)


def series_of(source: str) -> str:
    """The series a row's `source` names (`<folder>/ (series N[ UID])`, `<file> (series N)`), without the part
    a split added (`, echo 2`, `, plane 1 of 3`); "" for a source that names a file alone."""
    m = _SERIES_SOURCE.fullmatch(source)
    return f"{m.group(1)})" if m else ""


_SERIES_SOURCE = re.compile(r"(.* \(series [^,()]*)(?:, [^()]*)?\)")


def _laid_out(part: list[_File], source: str, rules: SeriesRules, note: tuple[str, ...], *, item_id: str | None = None,
              label: str = "", extra: Sequence[_File] = ()) -> SeriesItem | Row:
    """One part laid out; `extra` are files left out of it (derived images dropped) but accounted for in its row."""
    listed = [*part, *(f for f in extra if f.rel not in {p.rel for p in part})]
    sha256 = _members_sha256(listed, label if not all(f.whole for f in part) else "")
    item_id = item_id if item_id is not None else part[0].candidate.item_id or ""
    try:
        stack = layout_series([Member(str(f.candidate.entry.path), f.rel, f.header) for f in part], rules)
    except Rejected as exc:
        return replace(_row(listed, source, exc.reason, exc.detail), item_id=item_id, sha256=sha256)
    if note:
        stack = replace(stack, warnings=(*note, *stack.warnings))
    return SeriesItem(item_id=item_id, source=source, members=tuple(sorted(f.rel for f in listed)), sha256=sha256,
                      stack=stack, size=sum(f.probe.size for f in listed), series_uid=part[0].header.series_uid)


def _localizer_detail(by: str, parts: Sequence[_Part], rules: SeriesRules) -> str:
    # Slice positions per part, counted as the layout counts them (to 0.01 mm) for the message only.
    counts = [len({tuple(round(v, 2) for v in fr.position) for f in part.files for fr in f.header.frames
                   if fr.position is not None}) for part in parts]
    return (f"split by {by} into {len(parts)} parts of {', '.join(map(str, counts))} slice position(s), each "
            f"fewer than [dicom] min_slices = {rules.min_slices}: a localizer or scout, not a volume")


def _row(files: Sequence[_File], source: str, reason: Reason, detail: str) -> Row:
    return Row(item_id=files[0].candidate.item_id or "", status="rejected", source=source, reason=reason,
               detail=detail, kind=KIND, n_files=len(files), sha256=_members_sha256(files),
               members=tuple(sorted(f.rel for f in files)))


def _members_sha256(files: Sequence[_File], part: str = "") -> str:
    """A series' content hash: sha256 over its members' sorted hashes (names do not matter, bytes do); a part
    holding only some frames of a file adds its label, so the parts of one file do not share a hash."""
    if len(files) == 1 and not part:
        return files[0].probe.sha256
    text = "\n".join(sorted(f.probe.sha256 for f in files)) + (f"\n{part}" if part else "")
    return hashlib.sha256(text.encode()).hexdigest()


def _name_groups(groups: dict[tuple[str, str, str], list[_File]]) -> dict[tuple[str, str, str], str]:
    """Each group's source, unique across the delivery and naming its files: a one-file series is
    `<file> (series N)`, a longer one `<folder>/ (series N)` (the members' common folder). Where two names
    still clash (two series in one folder, or one series whose files carry two IDs), the SeriesInstanceUID
    is added, then the item ID and StudyInstanceUID: a report, or an email to the lab, names one series."""
    names = {}
    for key, group in groups.items():
        number = group[0].header.series_number
        series = f"(series {number if number is not None else '?'})"
        if len(group) == 1:
            names[key] = f"{group[0].rel} {series}"
        else:
            folder = posixpath.commonpath([posixpath.dirname(f.rel) for f in group])
            names[key] = f"{folder or '.'}/ {series}"
    names = _disambiguated(names, lambda key, name: f"{name[:-1]} {key[2]})")
    return _disambiguated(names, lambda key, name: f"{name[:-1]} {key[0] or 'no-ID'} {key[1]})")


def _disambiguated(names: dict[tuple[str, str, str], str], more: Callable[[tuple[str, str, str], str], str]
                   ) -> dict[tuple[str, str, str], str]:
    """`names`, with `more` applied to each name another key shares."""
    seen = Counter(names.values())
    return {key: name if seen[name] == 1 else more(key, name) for key, name in names.items()}


_Key = tuple[tuple[int, int], float | None, int, str, str]  # (Rows x Columns, echo, plane, image type, derived)


def _split(group: list[_File]) -> tuple[str, list[_Part]]:
    """Parts of one series by (Rows x Columns, echo, image type, plane, derived), frame by frame, each labelled,
    and what split them (derived parts aside)."""
    planes: list[tuple[float, ...]] = []
    derived = _derived_kinds(group)
    keyed: dict[_Key, list[_File]] = defaultdict(list)
    for f in group:
        h = f.header
        by_key: dict[_Key, list[Frame]] = defaultdict(list)
        for fr in h.frames:
            plane = _plane(fr.orientation, planes) if fr.orientation is not None else -1
            by_key[((h.rows, h.columns), fr.echo, plane, _image_kind(fr), derived.get((f.rel, fr.index), ""))
                   ].append(fr)
        whole = len(by_key) == 1
        for k, frames in by_key.items():
            keyed[k].append(f if whole else replace(f, header=replace(h, frames=tuple(frames)), whole=False))
    if len(keyed) == 1:
        ((k, files),) = keyed.items()
        return "", [_Part(_label((k[3], k[4])), k[4], files)]
    dims = {k[0] for k in keyed}
    echo_values = {k[1] for k in keyed}
    echo_names = _echo_names(keyed)
    plane_ids = {k[2] for k in keyed}
    kinds = {k[3] for k in keyed}
    out = []
    for k, files in sorted(keyed.items(), key=lambda kv: (min(_instance(f) for f in kv[1]), kv[1][0].rel,
                                                          kv[1][0].header.frames[0].index)):
        label = []
        if len(echo_values) > 1:
            label.append(f"echo {echo_names[k[1]]}")
        if len(plane_ids) > 1:
            label.append(f"plane {sorted(plane_ids).index(k[2]) + 1} of {len(plane_ids)}")
        if len(dims) > 1:
            label.append(f"{k[0][0]}x{k[0][1]}")
        out.append(_Part(_label((*label, k[3], k[4])), k[4], files))
    by = [what for what, values in (("echo", echo_values), ("image type", kinds), ("image plane", plane_ids),
                                    ("matrix size", dims)) if len(values) > 1]
    return " and ".join(by), out


def _label(parts: Sequence[str]) -> str:
    return ", ".join(p for p in parts if p)


def _echo_names(keyed: dict[_Key, list[_File]]) -> dict[float | None, str]:
    """Echo numbers as dcm2niix's `_e1`, `_e2`: the EchoNumbers value of classic files; for echo times (an
    enhanced file's EffectiveEchoTime), their rank in acquisition order (first frame first)."""
    values = {k[1] for k in keyed}
    if all(v is not None and float(v).is_integer() for v in values):
        return {v: _fmt(v) for v in values}
    first: dict[float | None, tuple[int, str, int]] = {}
    for k, files in keyed.items():
        at = min((_instance(f), f.rel, f.header.frames[0].index) for f in files)
        first[k[1]] = min(first.get(k[1], at), at)
    return {v: str(n + 1) for n, v in enumerate(sorted(values, key=lambda v: first[v]))}


def _image_kind(fr: Frame) -> str:
    """dcm2niix's suffix for what a frame holds: "" for a magnitude image (or unsaid), else phase, real,
    imaginary or fieldmap (a B0 map, which Philips and GE store beside their magnitude frames)."""
    if {"FIELD_MAP", "B0 MAP", "B0_MAP", "B0MAP"} & set(fr.image_type):
        return "fieldmap"
    return {"PHASE": "phase", "REAL": "real", "IMAGINARY": "imaginary"}.get(fr.component, "")


def _derived_kinds(group: Sequence[_File]) -> dict[tuple[str, int], str]:
    """(file, frame index) -> "trace" | "adc" | "derived" for the derived frames of a series (module docstring)."""
    out: dict[tuple[str, int], str] = {}
    zero_gradient: list[tuple[str, int]] = []
    for f in group:
        philips = "PHILIPS" in f.header.manufacturer.upper()
        for fr in f.header.frames:
            types = set(fr.image_type)
            if "ADC" in types or "EADC" in types:
                out[(f.rel, fr.index)] = "adc"
            elif {"TRACEW", "TRACE"} & types or fr.directionality == "ISOTROPIC":
                out[(f.rel, fr.index)] = "trace"
            elif fr.image_type[:1] == ("DERIVED",):
                out[(f.rel, fr.index)] = "derived"
            elif philips and fr.bvalue and fr.gradient is not None and not any(fr.gradient):
                zero_gradient.append((f.rel, fr.index))
    frames = {(f.rel, fr.index): fr for f in group for fr in f.header.frames}
    if any(v == "derived" for v in out.values()) and len(out) == len(frames):
        # Every frame DERIVED (a reformat, a CT reconstruction): that is the series, not a part of it.
        out = {k: v for k, v in out.items() if v != "derived"}
    # A zero-gradient b > 0 volume is a trace only while two or more other volumes remain (dcm2niix disables
    # the removal for a b=0 + trace pair).
    rest = [frames[k] for k in frames if k not in out and k not in zero_gradient]
    positions = {tuple(round(v, 2) for v in fr.position) for fr in rest if fr.position is not None} or {()}
    if zero_gradient and len(rest) >= 2 * len(positions):
        out.update({k: "trace" for k in zero_gradient})
    return out


def _plane(orientation: Sequence[float] | None, planes: list[tuple[float, ...]]) -> int:
    """Index of the first known plane within DISTINCT_PLANE of `orientation`, registering a new one if none is."""
    assert orientation is not None
    for i, p in enumerate(planes):
        if max(abs(a - b) for a, b in zip(orientation, p)) <= DISTINCT_PLANE:
            return i
    planes.append(tuple(orientation))
    return len(planes) - 1


def _instance(f: _File) -> int:
    return f.header.instance_number if f.header.instance_number is not None else 1 << 31


def _fmt(v: float | None) -> str:
    if v is None:
        return "?"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"
