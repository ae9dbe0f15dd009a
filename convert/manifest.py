"""The manifest: one row per item, sorted and stable, written as CSV beside the spec.

Invariant: the same rows give the same bytes: rows sorted by (item_id, source),
floats formatted with fixed precision, `\n` line endings, no timestamps.

The `index` column is stable across deliveries (`number_rows`): a row keeps the index the
committed manifest gave its source, and a new row gets the next index never handed out
(`summary.json`'s `next_index`), in manifest order; an index is never reused. So a rerun's
`git diff` shows only the rows that changed, and a first run numbers 0, 1, 2, ... in order.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from labzarr.readers import Reason
from labzarr.store.format.annotations import Annotation
from labzarr.store.format.pickling import fast_pickling
from labzarr.store.format.stats import ItemStats
from labzarr.store.location.folder import (
    atomic_write,  # re-exported: the manifest, summary and report are written whole
)

__all__ = ["BASE_COLUMNS", "ClassCount", "EarlierIndex", "Numbering", "RoleSource", "Row", "Status", "atomic_write",
           "earlier_index", "manifest_bytes", "manifest_cells", "manifest_header", "number_rows", "read_manifest",
           "role_columns", "sort_rows", "split_columns", "summary_json"]

log = logging.getLogger(__name__)

Status = Literal["ok", "rejected", "ignored"]

BASE_COLUMNS: tuple[str, ...] = (
    "index", "item_id", "status", "reason", "detail", "kind", "source", "n_files", "sha256",
    "shape", "dtype", "spacing", "orientation", "array", "slot", "warnings",
)


@fast_pickling
@dataclass(frozen=True, slots=True)
class RoleSource:
    """One file of a sample (image, mask, ...): where it came from and, once converted, its array."""

    role: str
    source: str
    sha256: str
    array: str = ""
    dtype: str = ""


@fast_pickling
@dataclass(frozen=True, slots=True)
class ClassCount:
    """A mask class in one sample: its voxel count and the rows [start, stop) of its stored locations."""

    value: int
    voxels: int
    start: int = 0
    stop: int = 0


@fast_pickling
@dataclass(frozen=True, slots=True)
class Row:
    """One manifest row: an item (ok or rejected) or a file that is not an image (ignored)."""

    item_id: str
    status: Status
    source: str
    reason: Reason | None = None
    detail: str = ""
    kind: str = ""
    n_files: int = 1
    sha256: str = ""
    shape: tuple[int, ...] = ()
    dtype: str = ""
    spacing: tuple[float, ...] = ()
    orientation: str = ""
    array: str = ""
    slot: int | None = None
    warnings: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    label_source: str = ""
    members: tuple[str, ...] = field(default=())  # files of a multi-file item (a DICOM series); not a column
    roles: tuple[RoleSource, ...] = ()  # a sample's files by role (spec order); columns role.<name>[.sha256]
    classes: tuple[ClassCount, ...] = ()  # a sample's mask classes, ascending; column `classes`
    group: str = ""  # a sample's group in the store (its role arrays live under it); not a column
    # With [splits] (convert/plan/splits.py), decided afresh on every run like labels: what is never split
    # (column `split_group`), the split, and the fold (with `folds`; None for a held-out test item).
    split_group: str = ""
    split: str = ""
    fold: int | None = None
    pin: str = ""  # the `[splits] pinned` cell's text, read with the labels (convert/labels.py); not a column
    # A DICOM item's acquisition metadata (readers/_dicom_meta.py), sorted (name, value) pairs; the columns
    # `meta.<name>` that `[manifest] metadata` names.
    metadata: tuple[tuple[str, Any], ...] = ()
    # An ok item's intensity statistics (convert/intensity.py; of the image role for a sample); not a column. In a
    # run's result, their moments only: the full records (histograms) are in the store's statistics table.
    stats: ItemStats | None = None
    # An ok volume's `[labels] annotations`, placed on its canonical grid (convert/annotations.py); not a column.
    annotations: tuple[Annotation, ...] = ()
    # RTSTRUCT ROI names that no `[masks] rois` rule maps (or with no closed contour); in `detail` and summary.json.
    unmapped: tuple[str, ...] = ()

    def rejected(self, reason: Reason, detail: str) -> Row:
        """The same row, turned into a rejection (its array, if any, is no longer part of the store)."""
        return replace(self, status="rejected", reason=reason, detail=detail, array="", slot=None, classes=(),
                       stats=None, annotations=(),
                       roles=tuple(replace(r, array="", dtype="") for r in self.roles))


def sort_rows(rows: Sequence[Row]) -> list[Row]:
    """Manifest order: by item_id, then source."""
    return sorted(rows, key=lambda r: (r.item_id, r.source))


def _fmt_float(v: float) -> str:
    return f"{v:.6g}"


def _role_cells(row: Row, role_names: Sequence[str]) -> list[str]:
    if not role_names:
        return []
    cells: list[str] = []
    for name in role_names:
        mine = [r for r in row.roles if r.role == name]  # several only in a sample rejected as ambiguous
        cells += ["; ".join(r.source for r in mine), "; ".join(r.sha256 for r in mine)]
    cells.append(" ".join(f"{c.value}:{c.voxels}" for c in row.classes))
    return cells


def role_columns(role_names: Sequence[str]) -> list[str]:
    """The columns a delivery with `[items] roles` adds: each role's source and sha256, and the class counts."""
    if not role_names:
        return []
    return [*(c for n in role_names for c in (f"role.{n}", f"role.{n}.sha256")), "classes"]


def split_columns(folds: bool) -> list[str]:
    """The columns a delivery with `[splits]` adds: the group never split, the split, and with folds the fold."""
    return ["split_group", "split", *(["fold"] if folds else [])]


def _split_cells(row: Row, columns: Sequence[str]) -> list[str]:
    cells = {"split_group": row.split_group, "split": row.split, "fold": "" if row.fold is None else str(row.fold)}
    return [cells[c] for c in columns]


def _meta_cell(value: object) -> str:
    """A metadata value in one cell: numbers as written, lists space-separated, a list of vectors `;`-separated."""
    if isinstance(value, list | tuple):
        return ("; " if any(isinstance(v, list | tuple) for v in value) else " ").join(_meta_cell(v) for v in value)
    return _fmt_float(value) if isinstance(value, float) else str(value)


def manifest_cells(index: int, row: Row, label_names: Sequence[str], role_names: Sequence[str] = (),
           splits: Sequence[str] = (), metadata: Sequence[str] = ()) -> list[str]:
    """`row`'s cells, numbered `index`, under the columns `manifest_bytes` describes."""
    labels = dict(row.labels)
    return [
        str(index), row.item_id, row.status, row.reason.value if row.reason else "", row.detail, row.kind,
        row.source, str(row.n_files), row.sha256, "x".join(map(str, row.shape)), row.dtype,
        "x".join(map(_fmt_float, row.spacing)), row.orientation, row.array,
        "" if row.slot is None else str(row.slot), "; ".join(row.warnings), *_role_cells(row, role_names),
        *_split_cells(row, splits), *(labels.get(name, "") for name in label_names), row.label_source,
        *(_meta_cell(dict(row.metadata)[n]) if n in dict(row.metadata) else "" for n in metadata),
    ]


@dataclass(frozen=True, slots=True)
class EarlierIndex:
    """What the committed manifest numbered: each source's index, and the next index never handed out."""

    by_source: Mapping[str, int] = field(default_factory=dict)
    next: int = 0


def earlier_index(manifest: Path, summary: Path) -> EarlierIndex:
    """The committed `manifest.csv`'s index by source and `summary.json`'s `next_index` (one past the manifest's
    largest index where the summary has none); empty when there is no manifest, or one that cannot be read."""
    from .source_index import SourceIndex

    by_source = SourceIndex()  # compact: no string per source held (source_index.py)
    try:
        # Read a row at a time: a manifest of a million rows as dicts would be most of a run's memory.
        with manifest.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                by_source.add(row["source"], int(row["index"]))
    except FileNotFoundError:
        return EarlierIndex()
    except (OSError, ValueError, KeyError, TypeError, csv.Error) as exc:
        log.warning("%s: cannot read the earlier index (%s); rows are numbered afresh", manifest, exc)
        return EarlierIndex()
    after = by_source.values_max() + 1
    try:
        recorded = json.loads(summary.read_bytes()).get("next_index", 0)
    except (OSError, ValueError, AttributeError):
        recorded = 0  # a manifest without its summary: the manifest's own numbers still stand
    return EarlierIndex(by_source, max(after, recorded if isinstance(recorded, int) else 0))


class Numbering:
    """Each row's `index`, the rows given one at a time in manifest order; see the module docstring."""

    def __init__(self, earlier: EarlierIndex) -> None:
        self._earlier = earlier
        # Per earlier index below `next`, 1 once a row took it: a byte an index, not a set of Python ints. An index
        # out of that range (a hand-edited manifest's) is kept in `_taken_else`.
        self._taken = bytearray(max(0, earlier.next))
        self._taken_else: set[int] = set()
        self.next = earlier.next  # the next index never handed out

    def number(self, row: Row) -> int:
        """`row`'s index: the one the earlier manifest gave its source (once), else the next never handed out."""
        index = self._earlier.by_source.get(row.source)
        if index is None or self._taken_already(index):  # a source listed twice keeps its index once
            index, self.next = self.next, self.next + 1
        return index

    def _taken_already(self, index: int) -> bool:
        """Whether a row took `index` before; marks it taken."""
        if 0 <= index < len(self._taken):
            before = bool(self._taken[index])
            self._taken[index] = 1
            return before
        before = index in self._taken_else
        self._taken_else.add(index)
        return before


def number_rows(rows: Sequence[Row], earlier: EarlierIndex) -> tuple[list[int], int]:
    """Each row's `index` (rows in manifest order) and the next index never handed out; see the module docstring."""
    numbering = Numbering(earlier)
    return [numbering.number(row) for row in rows], numbering.next


def manifest_bytes(rows: Sequence[Row], label_names: Sequence[str], role_names: Sequence[str] = (),
                   splits: Sequence[str] = (), metadata: Sequence[str] = (),
                   index: Sequence[int] | None = None) -> bytes:
    """The CSV for `rows` (already in manifest order); `index` is each row's (`number_rows`), by default its
    position.

    With `role_names` (a delivery of samples), each role's source and sha256 and the mask's
    class voxel counts (`classes`, "value:voxels" pairs) follow the base columns; then the
    `splits` columns (`split_columns`), the labels and `label_source`; last, `meta.<name>` for each
    `metadata` name (`[manifest] metadata`).
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(manifest_header(label_names, role_names, splits, metadata))
    for i, row in enumerate(rows):
        w.writerow(manifest_cells(i if index is None else index[i], row, label_names, role_names, splits, metadata))
    return buf.getvalue().encode("utf-8")


def manifest_header(label_names: Sequence[str], role_names: Sequence[str] = (), splits: Sequence[str] = (),
                    metadata: Sequence[str] = ()) -> list[str]:
    """The manifest's header row: its columns, as `manifest_bytes` describes them."""
    return [*BASE_COLUMNS, *role_columns(role_names), *splits, *(f"label.{n}" for n in label_names), "label_source",
            *(f"meta.{n}" for n in metadata)]


def read_manifest(path: Path) -> list[dict[str, str]]:
    """Read a manifest CSV back as one dict per row (for diff, report and tests)."""
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def summary_json(summary: Mapping[str, object]) -> bytes:
    """`summary.json` bytes: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode("utf-8")
