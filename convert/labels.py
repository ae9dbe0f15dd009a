"""The label join: workbook rows to manifest rows by normalised ID, with provenance and a report.

Invariant: every label in the manifest names the cell it came from, and every
workbook row and every item is accounted for: matched, conflicting (both cells
named), unlabelled (listed), or matching no item (listed with its cell).
`join_labels` is pure; `load_labels` is the only I/O and runs before any conversion.

An item is *labelled* when its ID has a workbook row and each label column holds a
value there (outer whitespace removed); a missing one is `no_label` when
`[labels] required = true`. One ID on several rows (also as differently written
IDs that normalise alike) is fine while they agree; where they differ the item is
`label_conflict` (or, with `conflict = "warn"`, kept with that label empty).

A `[splits] pinned` column is read from the same sheet but is no label: its cell goes to the row's
`pin` (blank: not pinned), never makes an item `no_label`, and an ID's rows that pin it differently
leave it unpinned with a warning.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from labzarr.readers import ColumnRef, LabelCell, LabelRow, LabelSheet, Reason, WorkbookError, read_label_sheet

from .annotations import AnnotationCells
from .errors import UsageError
from .ids import base_id, normalize_id
from .manifest import Row
from .spec import LabelsSpec, Spec

__all__ = ["ANNOTATION", "PIN", "LabelJoin", "LabelJoiner", "join_labels", "load_labels", "workbook_rel"]

log = logging.getLogger(__name__)

# The `[splits] pinned` column's name in the sheet read: not an identifier, so never a label's name.
PIN = "[splits] pinned"
# The prefix of the `[labels] annotations` columns' names in the sheet read ("[labels] annotations.center.x").
ANNOTATION = "[labels] annotations."


def load_labels(spec: Spec) -> LabelSheet | None:
    """Read the spec's label workbook (None without `[labels]`); a workbook problem is a `UsageError`."""
    labels = spec.labels
    if labels is None:
        return None
    rel = workbook_rel(spec)
    columns = dict(labels.columns)
    pin = spec.splits.pinned_column if spec.splits is not None else None
    if pin is not None:
        columns[PIN] = pin
    marks: dict[str, ColumnRef] = {}
    if labels.annotations is not None:
        marks = {ANNOTATION + role: ref for role, ref in labels.annotations.columns().items()}
        columns |= marks
    try:
        # A pin column may be blank throughout: nothing pinned yet; so may annotations: no lesion found yet.
        sheet = read_label_sheet(labels.workbook, sheet=labels.sheet, id_column=labels.id_column,
                                 columns=columns, header_row=labels.header_row, limits=labels.limits,
                                 may_be_blank=(PIN, *marks))
    except WorkbookError as exc:
        key = ("[splits] pinned" if exc.key == f"columns.{PIN}"
               else exc.key.replace(f"columns.{ANNOTATION}", "[labels] annotations ")
               if exc.key.startswith(f"columns.{ANNOTATION}") else f"[labels] {exc.key}")
        raise UsageError(f"{spec.path}: {key}: {rel}: {exc}", exc.hint) from exc
    for note in sheet.warnings:
        log.warning("%s: %s", rel, note)
    log.info("%s: %d ID rows from sheet %d %r below header row %d", rel, len(sheet.rows), sheet.sheet_index,
             sheet.sheet, sheet.header_row)
    return sheet


def workbook_rel(spec: Spec) -> str:
    """The workbook's path as the manifest names files: relative to raw (absolute when outside it)."""
    assert spec.labels is not None
    path = spec.labels.workbook
    return path.relative_to(spec.delivery.raw).as_posix() if path.is_relative_to(spec.delivery.raw) else str(path)


@dataclass(frozen=True, slots=True)
class LabelJoin:
    """Rows with labels filled (some now rejected), and the summary's label sections."""

    rows: tuple[Row, ...]
    names: tuple[str, ...]
    summary: dict[str, Any]
    # Each row's `[labels] annotations` cells, one entry a workbook row that is not blank there (parallel to rows).
    annotations: tuple[tuple[AnnotationCells, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class _Outcome:
    labels: tuple[tuple[str, str], ...]
    source: str
    problem: Reason | None = None
    detail: str = ""
    warnings: tuple[str, ...] = ()


class LabelJoiner:
    """`join_labels` a row at a time (`join`), for rows that are never all held (a run's, read from disk); the
    summary's label sections once every row has been joined (`summary`). What it holds beyond the workbook is the
    IDs of the unlabelled items and a count per label value."""

    def __init__(self, sheet: LabelSheet, spec: LabelsSpec, normalize: Sequence[str], workbook: str) -> None:
        self.sheet, self.spec, self.normalize, self.workbook = sheet, spec, tuple(normalize), workbook
        self.at = {n: i for i, (n, _, _) in enumerate(sheet.columns)}
        self.pin_at = self.at.pop(PIN, None)
        self.marks = [self.at.pop(n) for n in list(self.at) if n.startswith(ANNOTATION)]
        self.names = tuple(self.at)
        self.by_id: dict[str, list[LabelRow]] = defaultdict(list)
        for r in sheet.rows:
            self.by_id[normalize_id(r.id.value, normalize)].append(r)
        self.matched: set[str] = set()  # workbook IDs some item has
        self.unlabelled: set[str] = set()
        self.counts: dict[str, Counter[str]] = {n: Counter() for n in self.names}

    def join(self, row: Row) -> tuple[Row, tuple[AnnotationCells, ...]]:
        """`row` with its labels (and pin), and its `[labels] annotations` cells (one per workbook row with one)."""
        cells: tuple[AnnotationCells, ...] = ()
        if row.status == "ignored" or not row.item_id:
            joined = row
        else:
            joined, cells = self._join(row)
            if not _labelled(joined, self.names):
                self.unlabelled.add(joined.item_id)
        if joined.status == "ok":
            for name, value in dict(joined.labels).items():
                if name in self.counts:
                    self.counts[name][value] += 1
        return joined, cells

    def _join(self, row: Row) -> tuple[Row, tuple[AnnotationCells, ...]]:
        # A part kept apart (`case1~trace`) is labelled as its item.
        key = base_id(row.item_id)
        group = self.by_id.get(key, [])
        if group:
            self.matched.add(key)
        outcome = _outcome(row.item_id, group, self.at, self.spec, self.sheet, self.workbook)
        labelled = _apply(row, outcome, self.spec)
        if self.pin_at is not None:
            labelled = _pinned(labelled, [r.values[self.pin_at] for r in group])
        return labelled, _annotation_cells(group, self.marks)

    def summary(self) -> dict[str, Any]:
        """The summary's `labels`, `unmatched_workbook_ids`, `unlabelled_items` and `label_workbook`, over the rows
        joined so far."""
        sheet = self.sheet
        unmatched = [{"id": r.id.value, "normalized": key, "cell": r.id.ref}
                     for key, group in self.by_id.items() if key not in self.matched for r in group]
        return {
            "labels": {n: dict(sorted(c.items())) for n, c in self.counts.items()},
            "unmatched_workbook_ids": unmatched,
            "unlabelled_items": sorted(self.unlabelled),
            "label_workbook": {
                "path": self.workbook, "sheet": sheet.sheet, "sheet_index": sheet.sheet_index,
                "sheets": list(sheet.sheets), "header_row": sheet.header_row, "id_column": sheet.id_column,
                "columns": {n: {"column": letter, "header": header} for n, letter, header in sheet.columns
                            if n != PIN and not n.startswith(ANNOTATION)},
                "id_rows": len(sheet.rows), "id_normalize": list(self.normalize), "required": self.spec.required,
                "conflict": self.spec.conflict, "warnings": list(sheet.warnings),
            },
        }


def join_labels(rows: Sequence[Row], sheet: LabelSheet, spec: LabelsSpec, normalize: Sequence[str],
                workbook: str) -> LabelJoin:
    """Attach labels (and `[splits] pinned` cells, as `pin`) to `rows` (item IDs already normalised by
    `normalize`); pure."""
    joiner = LabelJoiner(sheet, spec, normalize, workbook)
    joined = [joiner.join(row) for row in rows]
    return LabelJoin(rows=tuple(r for r, _ in joined), names=joiner.names, summary=joiner.summary(),
                     annotations=tuple(a for _, a in joined))


def _annotation_cells(group: Sequence[LabelRow], marks: Sequence[int]) -> tuple[AnnotationCells, ...]:
    """The annotation of each of an ID's workbook rows that holds one (centre x, y, z, then the extent cells)."""
    if not marks:
        return ()
    out = []
    for r in group:
        cells = [r.values[i] for i in marks]
        found = AnnotationCells(center=(cells[0], cells[1], cells[2]), extent=tuple(cells[3:]))
        if not found.blank:
            out.append(found)
    return tuple(out)


def _pinned(row: Row, cells: Sequence[LabelCell]) -> Row:
    """`row` with its pin: the one text its ID's rows agree on; blank, or rows that disagree, pin nothing."""
    distinct = dict.fromkeys(c.value.strip() for c in cells if c.value.strip())
    if len(distinct) <= 1:
        return replace(row, pin=next(iter(distinct), ""))
    text = ", ".join(f"{_shown(c)} at {c.ref}" for c in cells)
    return replace(row, warnings=row.warnings + (f"[splits] pinned cells disagree: {text}; not pinned",))


def _outcome(item_id: str, group: Sequence[LabelRow], at: Mapping[str, int], spec: LabelsSpec, sheet: LabelSheet,
             workbook: str) -> _Outcome:
    if not group:
        return _Outcome((), "", Reason.NO_LABEL,
                        f"no row for ID {item_id!r} in {workbook} sheet {sheet.sheet!r} column {sheet.id_column} "
                        f"(IDs compared after id_normalize)")
    labels: list[tuple[str, str]] = []
    sources: list[str] = []
    conflicts: list[str] = []
    blanks: list[str] = []
    names = tuple(at)
    for name, i in at.items():
        cells = [r.values[i] for r in group]
        distinct = dict.fromkeys(c.value.strip() for c in cells)
        if len(distinct) > 1:
            conflicts.append(f"{name}: " + ", ".join(f"{_shown(c)} at {c.ref}" for c in cells))
            sources += [c.ref for c in cells]
            continue
        value = next(iter(distinct))
        if value:
            labels.append((name, value))
            sources.append(cells[0].ref)
        else:
            blanks.append(f"{name} is {cells[0].missing or 'blank'} at {cells[0].ref}")
    if not names:
        sources.append(group[0].id.ref)  # no label columns: the row itself is the label (an inclusion list)
    source = "; ".join(dict.fromkeys(sources))
    if conflicts:
        text = "; ".join(conflicts)
        if spec.conflict == "reject":
            return _Outcome(tuple(labels), source, Reason.LABEL_CONFLICT, text)
        return _Outcome(tuple(labels), source, warnings=(f"label_conflict: {text}; label left empty",))
    if blanks:
        return _Outcome(tuple(labels), source, Reason.NO_LABEL,
                        f"row for ID {item_id!r} at {group[0].id.ref}, but " + "; ".join(blanks))
    return _Outcome(tuple(labels), source)


def _labelled(row: Row, names: Sequence[str]) -> bool:
    have = dict(row.labels)
    return all(n in have for n in names) if names else bool(row.label_source)


def _shown(cell: LabelCell) -> str:
    return repr(cell.value.strip()) if cell.value.strip() else f"({cell.missing or 'blank'})"


def _apply(row: Row, o: _Outcome, spec: LabelsSpec) -> Row:
    row = replace(row, labels=o.labels, label_source=o.source, warnings=row.warnings + o.warnings)
    if o.problem is None:
        return row
    if row.status == "ok" and (o.problem is Reason.LABEL_CONFLICT or spec.required):
        return row.rejected(o.problem, o.detail)
    # Already rejected for its data, or labels optional: keep the row's fate, say what is missing.
    return replace(row, warnings=row.warnings + (f"{o.problem.value}: {o.detail}",))
