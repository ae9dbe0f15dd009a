"""What summary.json counts of a run's rows, gathered a row at a time in manifest order (the rows are never all held).

`counts`, `reasons`, `id_collisions`, `classes` and `dicom_masks` are these sums over the final rows; the rest of the
summary (labels, splits, statistics) comes from the steps that make them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from labzarr.readers import Reason

from ..manifest import Row
from ..plan.collisions import Collisions, collision_summary
from ..plan.dicom_masks import MASK_KINDS
from ..spec import MASK_ROLE, Spec

__all__ = ["Tally"]

_MASK_KINDS = frozenset(MASK_KINDS.values())


class Tally:
    """The summary's sums over the rows `add`ed (in manifest order)."""

    def __init__(self) -> None:
        self.status: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.files = 0
        self.collisions = Collisions()
        self.voxels: Counter[int] = Counter()  # per mask class, over ok samples
        self.samples: Counter[int] = Counter()  # per mask class, ok samples holding it
        self.missing: dict[str, str] = {}  # SEG/RTSTRUCT whose referenced series is not here: detail by source
        self.unmapped: dict[str, list[str]] = {}  # per RTSTRUCT, the ROIs it left out

    def add(self, row: Row) -> None:
        self.status[row.status] += 1
        if row.reason:
            self.reasons[row.reason.value] += 1
        self.files += row.n_files
        self.collisions.add(row)
        if row.status == "ok":
            for c in row.classes:
                self.voxels[c.value] += c.voxels
                self.samples[c.value] += 1 if c.voxels else 0
        if row.kind in _MASK_KINDS and row.reason is Reason.MISSING_ROLE:
            self.missing[row.source] = row.detail
        if row.unmapped:
            self.unmapped[next(x.source for x in row.roles if x.role == MASK_ROLE)] = list(row.unmapped)

    def counts(self) -> dict[str, Any]:
        """`counts`, `reasons` and `id_collisions`."""
        return {"counts": {"items": sum(self.status.values()), "files": self.files,
                           **{s: self.status.get(s, 0) for s in ("ok", "rejected", "ignored")}},
                "reasons": dict(sorted(self.reasons.items())),
                # one ID on distinct contents: a warning
                "id_collisions": collision_summary(self.collisions.done())}

    def classes(self, spec: Spec, role_names: Sequence[str]) -> dict[str, Any]:
        """`classes`: per mask class, voxels over all ok samples and how many samples hold it (only with masks)."""
        if not role_names:
            return {}
        listed = set(spec.masks.classes or ())
        return {"classes": {str(v): {"voxels": self.voxels.get(v, 0), "samples": self.samples.get(v, 0)}
                            for v in sorted(set(self.voxels) | listed)}}

    def dicom_masks(self) -> dict[str, Any]:
        """`dicom_masks` (only where there is something to list): the SEG and RTSTRUCT objects whose referenced
        series is not here (by file, with the detail naming the series), and per RTSTRUCT the ROIs it left out."""
        if not self.missing and not self.unmapped:
            return {}
        return {"dicom_masks": {"missing_series": dict(sorted(self.missing.items())),
                                "unmapped_rois": dict(sorted(self.unmapped.items()))}}
