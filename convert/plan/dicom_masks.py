"""DICOM SEG and RTSTRUCT objects in planning: each becomes the `mask` of the series it is drawn on. Pure.

Invariant: every SEG or RTSTRUCT file ends in exactly one place: the mask member
of the sample built around the series it references (found in this delivery by
SeriesInstanceUID, among the series laid out), or a rejected row of its own
saying which series it looked for and why it is not there (`missing_role`: the
sample lacks its image). It is never grouped as one more image series: a SEG's
frames are drawn on another series' grid, which only that series defines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labzarr.readers import Reason
from labzarr.readers.dicom import RTSTRUCT_CLASS, SEG_CLASS

from ..discover import Candidate
from ..manifest import Row
from ..probe import Probe
from ..spec import MASK_ROLE
from .samples import RoleFile
from .series import SeriesItem

__all__ = ["MASK_KINDS", "Attached", "attach_masks", "is_mask_object"]

# The kind a mask member is read as (run/sample_task.py), by SOP class.
MASK_KINDS: Mapping[str, str] = {SEG_CLASS: "dicom-seg", RTSTRUCT_CLASS: "rtstruct"}


def is_mask_object(p: Probe) -> bool:
    """True for a DICOM SEG or RTSTRUCT: a mask drawn on another series, not an image of its own."""
    return p.dicom is not None and p.dicom.sop_class in MASK_KINDS


@dataclass(frozen=True, slots=True)
class Attached:
    """What `attach_masks` decided: the mask member of each series that has one (by series source), and rows."""

    masks: Mapping[str, RoleFile]
    rows: tuple[Row, ...]


def attach_masks(objects: Sequence[tuple[Candidate, Probe]], series: Sequence[SeriesItem],
                 series_uid: Mapping[str, str]) -> Attached:
    """Pair each SEG/RTSTRUCT with the laid-out series it references; `series_uid` maps a series' source to its
    SeriesInstanceUID. A series takes one mask: a second object on it is rejected, naming the first."""
    by_uid: dict[str, list[SeriesItem]] = {}
    for s in series:
        by_uid.setdefault(series_uid[s.source], []).append(s)
    masks: dict[str, RoleFile] = {}
    rows: list[Row] = []
    for c, p in sorted(objects, key=lambda cp: cp[0].rel):
        assert p.dicom is not None
        kind = MASK_KINDS[p.dicom.sop_class]
        what = "SEG" if kind == "dicom-seg" else "RTSTRUCT"
        refs = p.dicom.references
        found = [s for uid in refs for s in by_uid.get(uid, ())]

        def rejected(detail: str, item_id: str = c.item_id or "", *, p: Probe = p, c: Candidate = c,
                     kind: str = kind) -> Row:
            return Row(item_id=item_id, status="rejected", source=c.rel, kind=kind, sha256=p.sha256,
                       reason=Reason.MISSING_ROLE, detail=detail)

        if not refs:
            rows.append(rejected(f"{what} names no referenced series; a mask needs the series it is drawn on"))
            continue
        if not found:
            rows.append(rejected(f"{what} references series {', '.join(refs)}, which is not in this delivery "
                                 f"({len(by_uid)} series laid out here; a rejected series has its own row); "
                                 "a mask needs the series it is drawn on"))
            continue
        if len(found) > 1:
            parts = ", ".join(s.source for s in found)
            rows.append(rejected(f"{what} references {len(found)} parts of a series ({parts}); expected exactly one "
                                 "image", found[0].item_id))
            continue
        (image,) = found
        if image.source in masks:
            rows.append(rejected(f"{what} is drawn on {image.source}, which already has mask "
                                 f"{masks[image.source].source}; one mask per series", image.item_id))
            continue
        masks[image.source] = RoleFile(role=MASK_ROLE, source=c.rel, path=str(c.entry.path), kind=kind,
                                       sha256=p.sha256, size=p.size)
    return Attached(masks=masks, rows=tuple(rows))
