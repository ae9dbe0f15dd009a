"""Label workbooks (.xlsx): one sheet's ID column and label columns, each value with the cell it came from.

Invariant: nothing is guessed. A value is the cell's text as a person sees it
(merged ranges filled from their top-left cell, zero-padded number formats kept,
dates as ISO 8601), or it is missing with a warning naming the cell (a formula
saved without a cached value, an error value). A workbook that cannot be read as
the spec says raises `WorkbookError` naming the sheets and headers found.

The container is checked before openpyxl opens it (`_xlsx_container`); openpyxl
reads in read-only mode with cached formula values, and parses XML through
defusedxml (a dependency of labzarr, so openpyxl always finds it).
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException

from ._cell_text import cell_text
from ._sheet_scan import Merge, SheetScan, scan_sheet
from ._xlsx_container import WorkbookError, WorkbookLimits, check_container

if TYPE_CHECKING:
    from openpyxl.workbook.workbook import Workbook
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

__all__ = ["ColumnRef", "LabelCell", "LabelRow", "LabelSheet", "WorkbookError", "WorkbookLimits", "read_label_sheet",
           "sheet_names"]

_LETTERS = re.compile(r"[A-Z]{1,3}")
_MAX_COLUMN = 16384  # XFD, Excel's last column
_SHOWN_ROWS = 6  # rows quoted in a "header not found" message


# openpyxl is imported where a workbook is read, not with this module: `labzarr.readers` is imported by every run
# and worker, most deliveries have no workbook, and importing openpyxl costs each process a tenth of a second.
def _column_index(letters: str) -> int:
    from openpyxl.utils.cell import column_index_from_string

    return column_index_from_string(letters)


def _column_letter(index: int) -> str:
    from openpyxl.utils.cell import get_column_letter

    return get_column_letter(index)


@dataclass(frozen=True, slots=True)
class ColumnRef:
    """A column named by its letter (``"F"``) or by the text of its header cell (``"Cell type"``).

    `parse` reads 1-3 upper-case letters up to XFD as a letter and anything else as header text;
    header text is matched ignoring case and runs of whitespace.
    """

    letter: str = ""
    header: str = ""

    @classmethod
    def parse(cls, text: str) -> ColumnRef:
        """A letter when `text` is one (``"F"``, ``"AB"``), else header text."""
        if _LETTERS.fullmatch(text) and _column_index(text) <= _MAX_COLUMN:
            return cls(letter=text)
        return cls(header=text)

    def describe(self) -> str:
        return f"column {self.letter}" if self.letter else f"header {self.header!r}"


@dataclass(frozen=True, slots=True)
class LabelCell:
    """One cell's text; `missing` says why a cell that is not blank has no value."""

    value: str
    ref: str  # "Annotations v2!F17"
    missing: str = ""


@dataclass(frozen=True, slots=True)
class LabelRow:
    """A data row: its ID cell and one cell per requested label column, in request order."""

    id: LabelCell
    values: tuple[LabelCell, ...]


@dataclass(frozen=True, slots=True)
class LabelSheet:
    """What was read, and from where: enough to explain every label and every skipped row."""

    sheet: str
    sheet_index: int  # 1-based, hidden sheets counted
    sheets: tuple[str, ...]  # every tab, in order
    header_row: int
    id_column: str  # letter
    columns: tuple[tuple[str, str, str], ...]  # (label name, letter, header text)
    rows: tuple[LabelRow, ...]
    warnings: tuple[str, ...]


def read_label_sheet(path: Path, *, sheet: int | str, id_column: ColumnRef, columns: Mapping[str, ColumnRef],
                     header_row: int | Literal["auto"], limits: WorkbookLimits = WorkbookLimits(),
                     may_be_blank: Collection[str] = ()) -> LabelSheet:
    """Read the ID and label columns of one sheet; raises `WorkbookError` for a workbook unusable as asked.

    A column holding no value in any ID row is taken for a wrong column, except those `may_be_blank` names.
    """
    check_container(path, limits)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = _read(path, sheet, id_column, columns, header_row, may_be_blank)
        except (DefusedXmlException, ParseError) as exc:
            raise WorkbookError("workbook", f"unsafe or malformed XML inside the xlsx: {type(exc).__name__}: {exc}",
                                "export the workbook again from Excel or LibreOffice") from exc
    said = tuple(dict.fromkeys(f"openpyxl: {w.message}" for w in caught))
    return replace(result, warnings=result.warnings + said)


def sheet_names(path: Path, limits: WorkbookLimits = WorkbookLimits()) -> tuple[str, ...]:
    """Every tab of the workbook, in order (hidden ones too, as `[labels] sheet` indexes count them)."""
    check_container(path, limits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read_label_sheet reports openpyxl's warnings; a listing needs none
        wb = _open(path)
    try:
        return tuple(wb.sheetnames)
    finally:
        wb.close()


def _open(path: Path) -> Workbook:
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        return openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (InvalidFileException, KeyError, ValueError, TypeError, AttributeError, OSError) as exc:
        # openpyxl raises these for parts that are missing or malformed (e.g. a chart sheet without its drawing),
        # and wraps XML refused by defusedxml in a ValueError
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, (DefusedXmlException, ParseError)):
            raise WorkbookError("workbook", f"unsafe or malformed XML inside the xlsx: {type(cause).__name__}: "
                                f"{cause}", "export the workbook again from Excel or LibreOffice") from exc
        raise WorkbookError("workbook", f"not a readable xlsx: {type(exc).__name__}: {exc}",
                            "open it in Excel or LibreOffice and save a copy as .xlsx") from exc


def _read(path: Path, sheet: int | str, id_column: ColumnRef, columns: Mapping[str, ColumnRef],
          header_row: int | Literal["auto"], may_be_blank: Collection[str]) -> LabelSheet:
    wb = _open(path)
    try:
        ws, index, notes = _pick(wb, sheet, path)
        # Read-only mode hides merged ranges and uncached formulas; `_worksheet_path` is the sheet's zip member.
        scan = scan_sheet(path, ws._worksheet_path)  # type: ignore[attr-defined]  # private: not in the stubs
        ws.reset_dimensions()  # read-only mode trusts <dimension>, which editors often leave stale
        rows = _rows(ws, scan)
        refs = {"id_column": id_column, **{f"columns.{n}": c for n, c in columns.items()}}
        header, cols = _find_header(rows, refs, header_row, ws.title, index)
        sheet_rows, read_notes = _data_rows(rows, cols, list(columns), ws.title, header.r, may_be_blank)
    finally:
        wb.close()
    headers = {c: t for c, t in header.header_cells()}
    return LabelSheet(
        sheet=ws.title, sheet_index=index, sheets=tuple(wb.sheetnames), header_row=header.r,
        id_column=_column_letter(cols["id_column"]),
        columns=tuple((n, _column_letter(cols[f"columns.{n}"]), headers.get(cols[f"columns.{n}"], ""))
                      for n in columns),
        rows=sheet_rows, warnings=(*notes, *read_notes),
    )


def _listing(wb: Workbook) -> str:
    return ", ".join(f"{i} {name!r}" + ("" if wb[name].sheet_state == "visible" else " (hidden)")
                     for i, name in enumerate(wb.sheetnames, start=1))


def _pick(wb: Workbook, sheet: int | str, path: Path) -> tuple[ReadOnlyWorksheet, int, list[str]]:
    names = wb.sheetnames
    found = f"{path.name} has {len(names)} sheet{'s' if len(names) != 1 else ''}: {_listing(wb)}"
    if isinstance(sheet, int):
        if sheet > len(names):
            raise WorkbookError("sheet", f"sheet {sheet} is past the end: {found}",
                                f"use an index in 1..{len(names)} (hidden sheets count) or a sheet name")
        name = names[sheet - 1]
    elif sheet in names:
        name = sheet
    else:
        near = [n for n in names if " ".join(n.split()).casefold() == " ".join(sheet.split()).casefold()]
        raise WorkbookError("sheet", f"no sheet named {sheet!r}: {found}",
                            f"did you mean {near[0]!r}? names match exactly" if near
                            else "use one of the names above or a 1-based index")
    index = names.index(name) + 1
    ws = wb[name]
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    if not isinstance(ws, ReadOnlyWorksheet):
        raise WorkbookError("sheet", f"sheet {index} {name!r} is a chart sheet, not a table: {found}",
                            "pick the sheet that holds the ID and label columns")
    notes = []
    hidden = [f"{i} {n!r}" for i, n in enumerate(names, start=1) if wb[n].sheet_state != "visible"]
    if hidden:
        notes.append(f"hidden sheets (counted in [labels] sheet indexes): {', '.join(hidden)}")
    if ws.sheet_state != "visible":
        notes.append(f"labels are read from hidden sheet {index} {name!r}")
    return ws, index, notes


class _Row:
    """One sheet row with merged ranges filled: `cell(col)` is what a person sees at that column."""

    def __init__(self, r: int, cells: Sequence[object], title: str, scan: SheetScan,
                 merges: Sequence[Merge], anchors: dict[Merge, LabelCell]) -> None:
        self.r, self._cells, self._title, self._scan = r, cells, title, scan
        self._merges, self._anchors = merges, anchors

    def _own(self, col: int) -> LabelCell:
        from openpyxl.cell.read_only import EMPTY_CELL

        ref = f"{self._title}!{_column_letter(col)}{self.r}"
        cell = self._cells[col - 1] if col <= len(self._cells) else EMPTY_CELL
        value = getattr(cell, "value", None)
        if value is None:
            missing = "formula without a cached value" if (self.r, col) in self._scan.uncached_formulas else ""
            return LabelCell("", ref, missing)
        if getattr(cell, "data_type", "n") == "e":
            return LabelCell("", ref, f"error value {value}")
        return LabelCell(cell_text(value, getattr(cell, "number_format", None)), ref)

    def merge_at(self, col: int) -> Merge | None:
        return next((m for m in self._merges if m.covers(self.r, col)), None)

    def cell(self, col: int) -> LabelCell:
        m = self.merge_at(col)
        if m is None or (m.min_row, m.min_col) == (self.r, col):
            return self._own(col)
        anchor = self._anchors.get(m, LabelCell("", ""))
        return LabelCell(anchor.value, f"{self._title}!{_column_letter(col)}{self.r}", anchor.missing)

    def header_cells(self) -> list[tuple[int, str]]:
        """(column, text) of non-empty cells, a merged range counted once at its first column."""
        width = max([len(self._cells), *(m.max_col for m in self._merges)])
        out = []
        for col in range(1, width + 1):
            m = self.merge_at(col)
            if m is not None and col != m.min_col:
                continue
            text = self.cell(col).value
            if text.strip():
                out.append((col, text))
        return out


def _rows(ws: ReadOnlyWorksheet, scan: SheetScan) -> Iterator[_Row]:
    """Every row from 1 on (openpyxl fills missing rows), merged ranges filled from their anchors."""
    pending = list(scan.merges)
    active: list[Merge] = []
    anchors: dict[Merge, LabelCell] = {}
    # types-openpyxl gives ReadOnlyWorksheet.iter_rows Worksheet's `self`; at run time it is its own method.
    for r, cells in enumerate(ws.iter_rows(), start=1):  # type: ignore[misc]
        while pending and pending[0].min_row <= r:
            active.append(pending.pop(0))
        active = [m for m in active if m.max_row >= r]
        row = _Row(r, cells, ws.title, scan, active, anchors)
        for m in active:
            if m.min_row == r:
                anchors[m] = row.cell(m.min_col)
        yield row


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _describe(row: _Row) -> str:
    cells = row.header_cells()
    shown = ", ".join(repr(t if len(t) <= 40 else t[:39] + "…") for _, t in cells[:8])
    return f"row {row.r}: {shown}" + (", ..." if len(cells) > 8 else "")


def _find_header(rows: Iterator[_Row], refs: Mapping[str, ColumnRef], header_row: int | Literal["auto"],
                 title: str, index: int) -> tuple[_Row, dict[str, int]]:
    where = f"sheet {index} {title!r}"
    seen: list[str] = []
    first: list[_Row] = []
    for row in rows:
        if header_row != "auto" and row.r < header_row:
            continue
        if row.header_cells() and len(seen) < _SHOWN_ROWS:
            seen.append(_describe(row))
            first.append(row)
        if header_row != "auto":
            return row, _resolve(row, refs, where, strict=True, seen=seen)
        if any(c.header for c in refs.values()):
            cols = _resolve(row, refs, where, strict=False, seen=seen)
            if cols:
                return row, cols
        elif _looks_like_header(row, _column_index(refs["id_column"].letter)):
            return row, _resolve(row, refs, where, strict=True, seen=seen)
    found = "; ".join(seen) or "no non-empty rows"
    if header_row != "auto":
        raise WorkbookError("header_row", f"row {header_row} is past the last row of {where} ({found})",
                            'use "auto" or a row number inside the sheet')
    named = [k for k, c in refs.items() if c.header]
    if named:
        texts = ", ".join(f"{k} = {refs[k].header!r}" for k in named)
        absent = [k for k in named
                  if not any(_norm(t) == _norm(refs[k].header) for r in first for _, t in r.header_cells())]
        misses = "".join(f"; {refs[k].header!r} is in none of them, {_nearest(refs[k].header, first)}"
                         for k in absent)
        raise WorkbookError((absent or named)[0],
                            f"no row of {where} holds all the headers ({texts}){misses}; rows found: {found}",
                            "fix the header text (matched ignoring case and extra spaces), use a column letter, "
                            "or set header_row")
    for row in first:  # a letter that is really a header's text ("ID") explains the miss best
        _resolve(row, {k: c for k, c in refs.items() if c.letter}, where, strict=True, seen=seen)
    raise WorkbookError("header_row", f"no header row found in {where}: no row below the title rows has an ID in "
                        f"column {refs['id_column'].letter} and a second value; rows found: {found}",
                        "set header_row to the row number of the header")


def _nearest(header: str, rows: Sequence[_Row]) -> str:
    """`nearest: 'Diagnosis' (row 4, column D)`: the cells of `rows` whose text is most like `header`."""
    cells: dict[str, tuple[int, int, str]] = {}
    for row in rows:
        for col, text in row.header_cells():
            cells.setdefault(_norm(text), (row.r, col, text))
    close = difflib.get_close_matches(_norm(header), list(cells), n=3)
    if not close:
        return "and no cell there resembles it"
    return "nearest: " + ", ".join(f"{t!r} (row {r}, column {_column_letter(c)})"
                                   for r, c, t in (cells[k] for k in close))


def _looks_like_header(row: _Row, id_col: int) -> bool:
    # A title row (merged or not) holds one text; a header holds the ID column's name and others.
    return bool(row.cell(id_col).value.strip()) and len({t for _, t in row.header_cells()}) >= 2


def _resolve(row: _Row, refs: Mapping[str, ColumnRef], where: str, *, strict: bool,
             seen: Sequence[str]) -> dict[str, int]:
    """Each ref's column number in header `row`; {} when a header is absent and not `strict`.

    Headers are looked up first: only a row that holds them all is the header row, so a letter is checked
    against a header of the same text (`id_column = "ID"`) there, never against a data row's values (a site
    coded 'A' under id_column = 'A').
    """
    cells = row.header_cells()
    cols: dict[str, int] = {}
    for key, ref in sorted(refs.items(), key=lambda kv: bool(kv[1].letter)):
        if ref.letter:
            cols[key] = _column_index(ref.letter)
            clash = [c for c, t in cells if _norm(t) == _norm(ref.letter) and c != cols[key]]
            if clash:
                raise WorkbookError(key, f"{ref.letter!r} is read as column letter {ref.letter}, but header row "
                                    f"{row.r} of {where} has a header {ref.letter!r} in column "
                                    f"{_column_letter(clash[0])}",
                                    f"write the letter {_column_letter(clash[0])!r} or "
                                    f'{{ header = "{ref.letter}" }} to mean that header')
            continue
        hits = [c for c, t in cells if _norm(t) == _norm(ref.header)]
        if len(hits) > 1:
            raise WorkbookError(key, f"header {ref.header!r} appears in columns "
                                f"{', '.join(_column_letter(c) for c in hits)} of row {row.r} in {where}",
                                "name the column by its letter instead")
        if not hits:
            if strict:
                raise WorkbookError(key, f"header {ref.header!r} is not in header row {row.r} of {where}; "
                                    f"rows found: {'; '.join(seen)}",
                                    'fix the header text or the header_row, or use "auto"')
            return {}
        cols[key] = hits[0]
    return {k: cols[k] for k in refs}


def _data_rows(rows: Iterator[_Row], cols: Mapping[str, int], names: Sequence[str], title: str,
               header: int, may_be_blank: Collection[str]) -> tuple[tuple[LabelRow, ...], list[str]]:
    out: list[LabelRow] = []
    notes: list[str] = []
    filled = dict.fromkeys(names, 0)
    last = header
    for row in rows:
        last = row.r
        id_cell = row.cell(cols["id_column"])
        values = tuple(row.cell(cols[f"columns.{n}"]) for n in names)
        for v in (id_cell, *values):
            if v.missing:
                notes.append(f"{v.ref}: {v.missing}; read as missing")
        if not id_cell.value.strip():
            if any(v.value for v in values):
                notes.append(f"{id_cell.ref}: no ID, but labels {', '.join(repr(v.value) for v in values if v.value)}"
                             "; row skipped")
            continue
        for n, v in zip(names, values):
            filled[n] += bool(v.value.strip())
        out.append(LabelRow(id_cell, values))
    if not out:
        raise WorkbookError("id_column", f"no IDs in column {_column_letter(cols['id_column'])} below header row "
                            f"{header} of sheet {title!r} (rows {header + 1}..{last})",
                            "check [labels] sheet, id_column and header_row")
    for n, count in filled.items():
        if count == 0 and n not in may_be_blank:
            col = _column_letter(cols[f"columns.{n}"])
            raise WorkbookError(f"columns.{n}", f"column {col} holds no value in any of the {len(out)} ID rows "
                                f"below header row {header} of sheet {title!r}", "point the label at the right column")
    return tuple(out), notes
