"""Finding the label workbook of a new delivery: which sheet and column hold its item IDs.

`survey_workbooks` is the I/O: every `.xlsx` under raw, every sheet, every column A..Z tried
as the ID column with `read_label_sheet` itself (the header row found as `header_row = "auto"`
finds it), so what init proposes is what `convert` will read. `best_column` is pure: the
(workbook, sheet, column) whose IDs match the most item IDs after `id_normalize`.
"""

from __future__ import annotations

import string
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from labzarr.readers import ColumnRef, LabelSheet, WorkbookError, WorkbookLimits, read_label_sheet, sheet_names

from ..discover import Candidate
from ..ids import normalize_id

__all__ = ["IdColumn", "LabelColumn", "Workbook", "best_column", "label_columns", "survey_workbooks"]

_LETTERS = tuple(string.ascii_uppercase)  # columns tried: labs keep IDs and labels near the left


@dataclass(frozen=True, slots=True)
class IdColumn:
    """One column that reads as an ID column: its sheet, letter, header row and text, and its IDs."""

    sheet_index: int  # 1-based, hidden sheets counted
    sheet: str
    letter: str
    header_row: int
    header: str
    ids: tuple[str, ...]  # as typed in the cells

    def matches(self, item_ids: Collection[str], normalize: Sequence[str]) -> int:
        """How many of its IDs, normalised, are item IDs."""
        return sum(1 for i in self.ids if normalize_id(i, normalize) in item_ids)


@dataclass(frozen=True, slots=True)
class Workbook:
    """An `.xlsx` under raw (`rel` as the manifest names it) and its columns that read as ID columns."""

    rel: str
    path: Path
    sheets: tuple[str, ...]
    columns: tuple[IdColumn, ...]
    problem: str = ""  # why it could not be read at all


@dataclass(frozen=True, slots=True)
class LabelColumn:
    """A column beside the ID column: what a label from it would hold."""

    letter: str
    header: str
    filled: int  # ID rows with a value here
    values: tuple[str, ...]  # distinct values, sorted


def survey_workbooks(candidates: Sequence[Candidate], limits: WorkbookLimits = WorkbookLimits()) -> list[Workbook]:
    """Every `.xlsx` among `candidates` (not excluded), read sheet by sheet, column by column."""
    books = []
    for c in candidates:
        if c.excluded_by or c.entry.outside or c.entry.special or not c.rel.lower().endswith(".xlsx"):
            continue
        path = Path(c.entry.path)
        try:
            names = sheet_names(path, limits)
        except WorkbookError as exc:
            books.append(Workbook(c.rel, path, (), (), problem=str(exc)))
            continue
        columns = [col for index in range(1, len(names) + 1) for col in _sheet_columns(path, index, limits)]
        books.append(Workbook(c.rel, path, names, tuple(columns)))
    return books


def _sheet_columns(path: Path, index: int, limits: WorkbookLimits) -> list[IdColumn]:
    out = []
    for letter in _LETTERS:
        ref = ColumnRef(letter=letter)
        try:
            # The column is also read as a label, to learn its header text.
            sheet = read_label_sheet(path, sheet=index, id_column=ref, columns={"id": ref}, header_row="auto",
                                     limits=limits)
        except WorkbookError as exc:
            if exc.key == "sheet":  # a chart sheet: no column of it is a table
                break
            continue
        out.append(IdColumn(sheet_index=index, sheet=sheet.sheet, letter=letter, header_row=sheet.header_row,
                            header=sheet.columns[0][2], ids=tuple(r.id.value for r in sheet.rows)))
    return out


def best_column(books: Sequence[Workbook], item_ids: Collection[str],
                normalize: Sequence[str]) -> tuple[Workbook, IdColumn, int] | None:
    """The ID column matching the most item IDs (then fewest unmatched IDs, then first); None if none matches."""
    scored = [(col.matches(item_ids, normalize), -len(col.ids), -n, book, col)
              for n, (book, col) in enumerate((b, c) for b in books for c in b.columns)]
    if not scored:
        return None
    hits, _, _, book, col = max(scored, key=lambda s: s[:3])
    return (book, col, hits) if hits else None


def label_columns(book: Workbook, id_col: IdColumn, limits: WorkbookLimits = WorkbookLimits()) -> list[LabelColumn]:
    """The other columns of `id_col`'s sheet under the same header row, read against its ID rows."""
    out = []
    for other in book.columns:
        if other.sheet_index != id_col.sheet_index or other.letter == id_col.letter:
            continue
        sheet = _read(book.path, id_col, other.letter, limits)
        if sheet is None:
            continue
        values = [r.values[0].value.strip() for r in sheet.rows]
        out.append(LabelColumn(letter=other.letter, header=sheet.columns[0][2], filled=sum(1 for v in values if v),
                               values=tuple(sorted({v for v in values if v}))))
    return out


def _read(path: Path, id_col: IdColumn, letter: str, limits: WorkbookLimits) -> LabelSheet | None:
    try:
        return read_label_sheet(path, sheet=id_col.sheet_index, id_column=ColumnRef(letter=id_col.letter),
                                columns={"x": ColumnRef(letter=letter)}, header_row=id_col.header_row, limits=limits)
    except WorkbookError:  # a column with no value in any ID row
        return None
