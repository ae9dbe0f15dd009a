"""Placing each ok volume's workbook annotations on its stored grid, and recording them on its array.

Invariant: every annotation cell row of an ok item ends either in the item's
`annotations` (its row, so the store index, and its array's `annotations` attr) or
in its warnings and the summary's `annotations.rejected`, with a reason and the
measured numbers; those of a rejected item are counted in `of_rejected_items`.
The attr is rewritten only where it differs, and removed where a corrected
workbook leaves an item none, as `set_array_labels` does for labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import zarr

from labzarr.store import Location
from labzarr.store.format.annotations import ANNOTATIONS, Annotation, encode_annotations
from labzarr.store.format.index import VolumeAttrs

from ..annotations import AnnotationCells, Geometry, Refusal, place
from ..manifest import Row
from ..spec import AnnotationsSpec

__all__ = ["Annotator"]


class Annotator:
    """Annotations placed a row at a time (`place`: `cells` on each ok item's grid, read from its array's attrs, and
    written back as the array's `annotations` attr), for rows that are never all held; the summary's section once
    every row has been placed (`summary`)."""

    def __init__(self, store: Location, spec: AnnotationsSpec) -> None:
        self.store, self.spec = store, spec
        self.refused: list[dict[str, str]] = []
        self.unplaced: dict[str, int] = {}
        self.placed = 0
        self.items = 0

    def place(self, row: Row, mine: Sequence[AnnotationCells]) -> Row:
        """`row` with `mine` (its cells) placed on its grid and recorded in its array's attrs; refusals in its
        warnings."""
        if row.status != "ok" or not row.array:
            if mine:  # counted, so none goes unaccounted: they return with the item once it is ok
                self.unplaced[row.item_id] = self.unplaced.get(row.item_id, 0) + len(mine)
            return self._counted(row)
        found: list[Annotation] = []
        notes: list[str] = []
        if mine:
            geometry = _geometry(self.store, row)
            for c in mine:
                result = place(c, self.spec, geometry)
                if isinstance(result, Refusal):
                    notes.append(f"{result.reason.value} at {result.cell}: {result.detail}")
                    self.refused.append({"item_id": row.item_id, "cell": result.cell, "reason": result.reason.value,
                                         "detail": result.detail})
                else:
                    found.append(result)
        if row.slot is None:
            _record(self.store, row.array, found)
        self.placed += len(found)
        return self._counted(replace(row, annotations=tuple(found), warnings=row.warnings + tuple(notes)))

    def summary(self) -> dict[str, Any]:
        """The summary's `annotations` section."""
        return {"annotations": {"placed": self.placed, "items": self.items, "space": self.spec.space,
                                "rejected": self.refused, "of_rejected_items": dict(sorted(self.unplaced.items()))}}

    def _counted(self, row: Row) -> Row:
        self.items += 1 if row.annotations else 0
        return row


def _geometry(store: Location, row: Row) -> Geometry:
    spatial = tuple(row.shape[1:])
    if row.slot is not None:  # an image of a stack: no patient frame, which `place` refuses by its 2 axes
        return Geometry(shape=spatial, affine=(), source_orientation="")
    arr = zarr.open_array(store.zarr(), path=row.array, mode="r", zarr_format=3)
    attrs = VolumeAttrs.decode(arr.attrs.asdict(), where=f"{store}/{row.array}")
    return Geometry(shape=spatial, affine=attrs.affine, source_orientation=attrs.source_orientation)


def _record(store: Location, path: str, annotations: Sequence[Annotation]) -> None:
    arr = zarr.open_array(store.zarr(), path=path, mode="r", zarr_format=3)
    want = encode_annotations(annotations)
    have = arr.attrs.get(ANNOTATIONS)
    if (have or []) == want:
        return
    arr = zarr.open_array(store.zarr(), path=path, mode="r+", zarr_format=3)
    if want:
        arr.attrs[ANNOTATIONS] = want
    else:
        del arr.attrs[ANNOTATIONS]
