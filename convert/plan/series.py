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
- a series is split into parts, one item each, where its files differ in
  Rows/Columns, echo number (dcm2niix's `_e2` files) or image plane (a
  3-plane localizer, radial slices): planes whose direction cosines differ by
  more than `DISTINCT_PLANE` (about 3 degrees) are different planes, smaller
  differences are orientation drift, which the layout rejects;
- a file whose own frames span parts cannot be split safely: `mixed_series`;
- a series whose every part is too short (a 3-plane localizer or scout) is one
  `series_too_short` row naming its parts, not one look-alike row per plane.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from labzarr.readers import Reason, Rejected, SeriesRules, SeriesStack
from labzarr.readers.dicom import DicomHeader, Member, layout_series

from ..discover import Candidate
from ..manifest import Row
from ..probe import Probe

__all__ = ["DISTINCT_PLANE", "SeriesItem", "group_series", "series_of"]

DISTINCT_PLANE = 0.05  # direction-cosine difference beyond which two files image different planes (~3 degrees)
KIND = "dicom"


@dataclass(frozen=True, slots=True)
class SeriesItem:
    """One DICOM item to decode: its members (relative paths, sorted), content hash and layout."""

    item_id: str
    source: str
    members: tuple[str, ...]
    sha256: str
    stack: SeriesStack


@dataclass(frozen=True, slots=True)
class _File:
    candidate: Candidate
    probe: Probe
    header: DicomHeader

    @property
    def rel(self) -> str:
        return self.candidate.rel


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
        groups[(c.item_id or "", f.header.study_uid, f.header.series_uid or posixpath.dirname(c.rel))].append(f)
    named = _name_groups(groups)
    for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0], named[kv[0]])):
        source = named[key]
        group.sort(key=lambda f: f.rel)
        if not key[0]:
            rows.append(_row(group, source, Reason.ID_UNMATCHED,
                             f"no match for [items] id_pattern {id_pattern!r} in the paths of this series "
                             f"(e.g. {group[0].rel!r})"))
            continue
        try:
            by, parts = _split(group)
        except Rejected as exc:
            rows.append(_row(group, source, exc.reason, exc.detail))
            continue
        note = (f"series split into {len(parts)} parts by {by} (as dcm2niix)",) if len(parts) > 1 else ()
        laid = [_laid_out(part, f"{source[:-1]}, {label})" if len(parts) > 1 else source, rules, note=note)
                for label, part in parts]
        if len(parts) > 1 and all(isinstance(r, Row) and r.reason is Reason.SERIES_TOO_SHORT for r in laid):
            # A localizer (scout): one row for the series, not one identical-looking row per plane.
            rows.append(_row(group, source, Reason.SERIES_TOO_SHORT, _localizer_detail(by, parts, rules)))
            continue
        for r in laid:
            _place(r, items, rows)
    return items, rows


def _place(laid: SeriesItem | Row, items: list[SeriesItem], rows: list[Row]) -> None:
    if isinstance(laid, Row):
        rows.append(laid)
    else:
        items.append(laid)


def series_of(source: str) -> str:
    """The series a row's `source` names (`<folder>/ (series N[ UID])`), without the part a split added
    (`, echo 2`, `, plane 1 of 3`); "" for a source that names a file."""
    m = _SERIES_SOURCE.fullmatch(source)
    return f"{m.group(1)})" if m else ""


_SERIES_SOURCE = re.compile(r"(.*/ \(series [^,()]*)(?:, [^()]*)?\)")


def _laid_out(part: list[_File], source: str, rules: SeriesRules, note: tuple[str, ...]) -> SeriesItem | Row:
    try:
        stack = layout_series([Member(str(f.candidate.entry.path), f.rel, f.header) for f in part], rules)
    except Rejected as exc:
        return _row(part, source, exc.reason, exc.detail)
    if note:
        stack = replace(stack, warnings=(*note, *stack.warnings))
    return SeriesItem(item_id=part[0].candidate.item_id or "", source=source,
                      members=tuple(sorted(f.rel for f in part)), sha256=_members_sha256(part), stack=stack)


def _localizer_detail(by: str, parts: Sequence[tuple[str, list[_File]]], rules: SeriesRules) -> str:
    # Slice positions per part, counted as the layout counts them (to 0.01 mm) for the message only.
    counts = [len({tuple(round(v, 2) for v in fr.position) for f in part for fr in f.header.frames
                   if fr.position is not None}) for _, part in parts]
    return (f"split by {by} into {len(parts)} parts of {', '.join(map(str, counts))} slice position(s), each "
            f"fewer than [dicom] min_slices = {rules.min_slices}: a localizer or scout, not a volume")


def _row(files: Sequence[_File], source: str, reason: Reason, detail: str) -> Row:
    return Row(item_id=files[0].candidate.item_id or "", status="rejected", source=source, reason=reason,
               detail=detail, kind=KIND, n_files=len(files), sha256=_members_sha256(files),
               members=tuple(sorted(f.rel for f in files)))


def _members_sha256(files: Sequence[_File]) -> str:
    """A series' content hash: sha256 over its members' sorted hashes (names do not matter, bytes do)."""
    if len(files) == 1:
        return files[0].probe.sha256
    return hashlib.sha256("\n".join(sorted(f.probe.sha256 for f in files)).encode()).hexdigest()


def _name_groups(groups: dict[tuple[str, str, str], list[_File]]) -> dict[tuple[str, str, str], str]:
    """`<folder>/ (series N)`: the members' common folder and series number, the UID added where that is ambiguous."""
    names = {}
    for key, group in groups.items():
        folder = posixpath.commonpath([posixpath.dirname(f.rel) for f in group]) if group else ""
        number = group[0].header.series_number
        names[key] = f"{folder or '.'}/ (series {number if number is not None else '?'})"
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for key, name in names.items():
        seen[(key[0], name)] += 1
    return {key: name if seen[(key[0], name)] == 1 else f"{name[:-1]} {key[2]})" for key, name in names.items()}


def _split(group: list[_File]) -> tuple[str, list[tuple[str, list[_File]]]]:
    """Parts of one series by (Rows x Columns, echo, plane), each labelled, and what split them."""
    planes: list[tuple[float, ...]] = []
    keyed: dict[tuple[tuple[int, int], float | None, int], list[_File]] = defaultdict(list)
    for f in group:
        h = f.header
        echoes = {fr.echo for fr in h.frames}
        plane = {_plane(fr.orientation, planes) for fr in h.frames if fr.orientation is not None}
        if len(echoes) > 1 or len(plane) > 1:
            what = "echoes" if len(echoes) > 1 else "image planes"
            raise Rejected(Reason.MIXED_SERIES, f"{f.rel} holds frames of {len(echoes if len(echoes) > 1 else plane)}"
                                                f" {what}; a multi-file series cannot be split inside one file")
        keyed[((h.rows, h.columns), next(iter(echoes)), next(iter(plane)))].append(f)
    if len(keyed) == 1:
        return "", [("", group)]
    dims = {k[0] for k in keyed}
    echo_values = {k[1] for k in keyed}
    plane_ids = {k[2] for k in keyed}
    out = []
    for k, files in sorted(keyed.items(), key=lambda kv: (min(_instance(f) for f in kv[1]), kv[1][0].rel)):
        label = []
        if len(echo_values) > 1:
            label.append(f"echo {_fmt(k[1])}")
        if len(plane_ids) > 1:
            label.append(f"plane {sorted(plane_ids).index(k[2]) + 1} of {len(plane_ids)}")
        if len(dims) > 1:
            label.append(f"{k[0][0]}x{k[0][1]}")
        out.append((", ".join(label), files))
    by = [what for what, values in (("echo", echo_values), ("image plane", plane_ids), ("matrix size", dims))
          if len(values) > 1]
    return " and ".join(by), out


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
