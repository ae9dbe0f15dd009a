from __future__ import annotations

import datetime as dt
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import openpyxl
import pytest

from labzarr.readers import ColumnRef, LabelSheet, WorkbookError, WorkbookLimits, read_label_sheet
from labzarr.readers._cell_text import cell_text

from ..workbooks import (
    Entry,
    cached_formula,
    entity_expansion,
    error_value,
    lab_workbook,
    save,
    stale_dimension,
    zip_bomb,
)

LETTERS = {"id_column": ColumnRef.parse("A"), "columns": {"cell_type": ColumnRef.parse("F")}}
HEADERS = {"id_column": ColumnRef.parse("Case"), "columns": {"cell_type": ColumnRef.parse("cell  TYPE")}}


def read(path: Path, *, sheet: int | str = 3, header_row: int | str = "auto", refs=LETTERS, **kw) -> LabelSheet:
    return read_label_sheet(path, sheet=sheet, header_row=header_row, **refs, **kw)  # type: ignore[arg-type]


def pairs(sheet: LabelSheet) -> list[tuple[str, str, str]]:
    return [(r.id.value, r.values[0].value, r.values[0].ref) for r in sheet.rows]


ENTRIES = [Entry("case_001", "neuron"), Entry(" CASE-002 ", "astrocyte"), Entry(7, "microglia", id_format="000")]


@pytest.mark.parametrize("refs", [LETTERS, HEADERS], ids=["letters", "header-texts"])
def test_sheet3_column_f_under_merged_titles_ignores_distractor_sheets(tmp_path: Path, refs) -> None:
    book = save(lab_workbook(ENTRIES), tmp_path / "labels.xlsx")
    sheet = read(book, refs=refs)
    assert (sheet.sheet, sheet.sheet_index, sheet.header_row) == ("Annotations v2", 3, 3)
    assert sheet.sheets == ("Read me", "Annotations v1", "Annotations v2", "Pivot")
    assert sheet.id_column == "A" and sheet.columns == (("cell_type", "F", "Cell type"),)
    assert pairs(sheet) == [("case_001", "neuron", "Annotations v2!F4"),
                            (" CASE-002 ", "astrocyte", "Annotations v2!F5"),
                            ("007", "microglia", "Annotations v2!F6")]
    assert [r.id.ref for r in sheet.rows] == ["Annotations v2!A4", "Annotations v2!A5", "Annotations v2!A6"]
    assert any("hidden sheets" in w and "2 'Annotations v1'" in w for w in sheet.warnings)


def test_sheet_by_name_and_fixed_header_row(tmp_path: Path) -> None:
    book = save(lab_workbook(ENTRIES, title_rows=3), tmp_path / "labels.xlsx")
    assert pairs(read(book, sheet="Annotations v2", header_row=4)) == pairs(read(book, sheet=3))
    assert read(book, sheet=3).header_row == 4


def test_hidden_sheet_is_counted_and_readable_with_a_warning(tmp_path: Path) -> None:
    sheet = read(save(lab_workbook(ENTRIES), tmp_path / "labels.xlsx"), sheet=2)
    assert pairs(sheet) == [("case_001", "WRONG-v1", "Annotations v1!F2")]
    assert any("hidden sheet 2 'Annotations v1'" in w for w in sheet.warnings)


@pytest.mark.parametrize(("entry", "want_id", "want_label"), [
    pytest.param(Entry(7, "x", id_format="000"), "007", "x", id="number-000-keeps-padding"),
    pytest.param(Entry(7.0, "x"), "7", "x", id="integral-float"),
    pytest.param(Entry(7, "x", id_format='"CASE-"000'), "CASE-007", "x", id="literal-prefix-format"),
    pytest.param(Entry(1234, "x", id_format="#,##0"), "1234", "x", id="thousands-format-plain"),
    pytest.param(Entry("case_7", 2.5), "case_7", "2.5", id="float-label"),
    pytest.param(Entry("case_7", dt.datetime(2026, 11, 3)), "case_7", "2026-11-03", id="date-label"),
    pytest.param(Entry("case_7", dt.datetime(2026, 11, 3, 14, 30)), "case_7", "2026-11-03T14:30:00", id="datetime"),
    pytest.param(Entry("case_7", True), "case_7", "TRUE", id="bool-label"),
    pytest.param(Entry(" CASE-007 ", "x"), " CASE-007 ", "x", id="text-verbatim"),
])
def test_cell_values_read_as_displayed(tmp_path: Path, entry: Entry, want_id: str, want_label: str) -> None:
    sheet = read(save(lab_workbook([entry]), tmp_path / "labels.xlsx"))
    assert [(r.id.value, r.values[0].value) for r in sheet.rows] == [(want_id, want_label)]


@pytest.mark.parametrize(("value", "fmt", "want"), [
    (7, "000", "007"), (-7, "000", "-007"), (7, "000;(000)", "007"), (7, "\\C000", "C007"), (7, "General", "7"),
    (7, "0.00", "7"), (12345, "000", "12345"), (0.1, None, "0.1"), (1e20, None, "100000000000000000000"),
    (dt.date(2026, 1, 2), None, "2026-01-02"), (dt.time(9, 5), None, "09:05:00"), (None, "000", ""),
])
def test_cell_text(value: object, fmt: str | None, want: str) -> None:
    assert cell_text(value, fmt) == want


def test_formulas_cached_uncached_and_errors(tmp_path: Path) -> None:
    entries = [Entry("case_1", "=F5"), Entry("case_2", "neuron"), Entry("case_3", "=F5"), Entry("case_4", "x")]
    book = save(lab_workbook(entries), tmp_path / "labels.xlsx", cached_formula("F6", "neuron"), error_value("F7"))
    sheet = read(book)
    got = [(r.id.value, r.values[0].value, r.values[0].missing) for r in sheet.rows]
    assert got == [("case_1", "", "formula without a cached value"), ("case_2", "neuron", ""),
                   ("case_3", "neuron", ""), ("case_4", "", "error value #N/A")]
    assert "Annotations v2!F4: formula without a cached value; read as missing" in sheet.warnings
    assert "Annotations v2!F7: error value #N/A; read as missing" in sheet.warnings


def test_merged_cells_fill_every_covered_cell(tmp_path: Path) -> None:
    entries = [Entry("case_1", "neuron"), Entry("case_2", None), Entry("case_3", None), Entry("case_4", "glia")]
    sheet = read(save(lab_workbook(entries, merge_label="F4:F6"), tmp_path / "labels.xlsx"))
    assert pairs(sheet) == [("case_1", "neuron", "Annotations v2!F4"), ("case_2", "neuron", "Annotations v2!F5"),
                            ("case_3", "neuron", "Annotations v2!F6"), ("case_4", "glia", "Annotations v2!F7")]


def test_stale_dimension_does_not_hide_rows(tmp_path: Path) -> None:
    entries = [Entry(f"case_{i}", f"t{i}") for i in range(1, 30)]
    sheet = read(save(lab_workbook(entries), tmp_path / "labels.xlsx", stale_dimension("A1:B3")))
    assert len(sheet.rows) == 29 and sheet.rows[-1].id.ref == "Annotations v2!A32"


def test_rows_without_id_are_reported_not_dropped_silently(tmp_path: Path) -> None:
    sheet = read(save(lab_workbook([Entry("case_1", "a"), Entry(None, "orphan"), Entry("case_3", "c")]),
                      tmp_path / "labels.xlsx"))
    assert [r.id.value for r in sheet.rows] == ["case_1", "case_3"]
    assert "Annotations v2!A5: no ID, but labels 'orphan'; row skipped" in sheet.warnings


def _xls(path: Path) -> Path:
    import xlwt

    book = xlwt.Workbook()
    book.add_sheet("Labels").write(0, 0, "Case")
    book.save(str(path))
    return path


def _encrypted(path: Path) -> Path:
    from msoffcrypto.format.ooxml import OOXMLFile

    plain = save(lab_workbook(ENTRIES), path.with_suffix(".plain.xlsx"))
    with plain.open("rb") as src, path.open("wb") as out:
        OOXMLFile(src).encrypt("secret", out)
    return path


def _zip_of_images(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("scan_001.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    return path


def _csv(path: Path) -> Path:
    path.write_text("Case,Cell type\ncase_001,neuron\n")
    return path


def _wb(edit: Callable[[openpyxl.Workbook], None] | None = None, *edits) -> Callable[[Path], Path]:
    def build(path: Path) -> Path:
        wb = lab_workbook(ENTRIES)
        if edit:
            edit(wb)
        return save(wb, path, *edits)
    return build


def _dup_header(wb: openpyxl.Workbook) -> None:
    wb["Annotations v2"]["B3"] = "Cell type"


def _empty_f(wb: openpyxl.Workbook) -> None:
    for row in wb["Annotations v2"].iter_rows(min_row=4, min_col=6, max_col=6):
        row[0].value = None


def _chart(wb: openpyxl.Workbook) -> None:
    from openpyxl.chart import BarChart, Reference

    chart = BarChart()
    chart.add_data(Reference(wb["Pivot"], min_col=2, min_row=1, max_row=2), titles_from_data=True)
    wb.create_chartsheet("Chart", 2).add_chart(chart)


def _site_a(wb: openpyxl.Workbook) -> None:
    wb["Annotations v2"]["B4"] = "A"  # a data row's site code, the same text as id_column's letter


BAD = [
    pytest.param(_xls, {}, "workbook", r"legacy Excel 97-2003 \.xls", "save a copy as .xlsx", id="xls"),
    pytest.param(_encrypted, {}, "workbook", r"password-protected xlsx", "remove the password", id="encrypted"),
    pytest.param(_zip_of_images, {}, "workbook", r"a zip of something else \(holds scan_001\.png\)", "",
                 id="zip-of-png"),
    pytest.param(_csv, {}, "workbook", r"not a zip archive but text", "", id="csv-named-xlsx"),
    pytest.param(lambda p: (p.write_bytes(b""), p)[1], {}, "workbook", r"empty \(0 B\)", "", id="empty"),
    pytest.param(_wb(), {"sheet": 5}, "sheet",
                 r"sheet 5 is past the end: labels\.xlsx has 4 sheets: 1 'Read me', 2 'Annotations v1' \(hidden\), "
                 r"3 'Annotations v2', 4 'Pivot'", "1..4", id="sheet-past-end"),
    pytest.param(_wb(), {"sheet": "annotations v2"}, "sheet", r"no sheet named 'annotations v2'",
                 "did you mean 'Annotations v2'", id="sheet-name-case"),
    pytest.param(_wb(_chart), {"sheet": 3}, "sheet", r"'Chart' is a chart sheet", "", id="chart-sheet"),
    pytest.param(_wb(), {"refs": {"id_column": ColumnRef.parse("Case"),
                                  "columns": {"cell_type": ColumnRef.parse("Celltype")}}},
                 "columns.cell_type", r"no row of sheet 3 'Annotations v2' holds all the headers .*rows found: "
                 r"row 1: 'Title line 1 of the annotations'; .*row 3: 'Case', 'Reader', 'Reviewed', 'Slices', 'Notes', "
                 r"'Cell type'", "matched ignoring case", id="header-not-found"),
    pytest.param(_wb(), {"refs": HEADERS, "header_row": 2}, "id_column", r"header 'Case' is not in header row 2", "",
                 id="header-not-in-fixed-row"),
    pytest.param(_wb(_dup_header), {"refs": HEADERS}, "columns.cell_type",
                 r"header 'cell  TYPE' appears in columns B, F", "letter", id="header-twice"),
    pytest.param(_wb(_empty_f), {}, "columns.cell_type", r"column F holds no value in any of the 3 ID rows", "",
                 id="label-column-empty"),
    pytest.param(_wb(), {"header_row": 40}, "header_row", r"row 40 is past the last row", "", id="header-row-past-end"),
    pytest.param(_wb(lambda wb: wb["Annotations v2"].__setitem__("F3", "ID")),
                 {"refs": {"id_column": ColumnRef.parse("ID"), "columns": {"cell_type": ColumnRef.parse("B")}}},
                 "id_column", r"'ID' is read as column letter ID, but header row 3 .* has a header 'ID' in column F",
                 '{ header = "ID" }', id="letter-or-header"),
    # Issue 33: a misspelt header under id_column = 'A' was blamed on a data row's 'A' in column B ("write the
    # letter 'B'", which takes the IDs from another column); the header that matches nothing is the error.
    pytest.param(_wb(_site_a), {"refs": {"id_column": ColumnRef.parse("A"),
                                         "columns": {"cell_type": ColumnRef.parse("Cel type")}}},
                 "columns.cell_type",
                 r"holds all the headers \(columns\.cell_type = 'Cel type'\); 'Cel type' is in none of them, "
                 r"nearest: 'Cell type' \(row 3, column F\); rows found", "fix the header text",
                 id="misspelt-header-under-a-letter"),
    pytest.param(_wb(None, entity_expansion()), {}, "workbook", r"unsafe or malformed XML.*(Entities|DTD)Forbidden", "",
                 id="billion-laughs"),
]


@pytest.mark.parametrize(("build", "kw", "key", "match", "hint"), BAD)
def test_unusable_workbook_is_one_clear_error(tmp_path: Path, build, kw, key: str, match: str, hint: str) -> None:
    book = build(tmp_path / "labels.xlsx")
    with pytest.raises(WorkbookError, match=match) as info:
        read(book, **kw)
    assert info.value.key == key
    assert hint in info.value.hint


def test_zip_bomb_refused_unread_in_bounded_memory(tmp_path: Path) -> None:
    bomb = zip_bomb(tmp_path / "labels.xlsx", inflated=1 << 30)
    assert bomb.stat().st_size < 8 << 20
    tracemalloc.start()
    try:
        with pytest.raises(WorkbookError,
                           match=r"sheet1\.xml inflates .* to 1,073,\d{3},\d{3} B \(ratio \d+:1, cap 200:1"):
            read(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # the 1 GiB member was never inflated


def test_total_inflated_size_cap(tmp_path: Path) -> None:
    book = save(lab_workbook(ENTRIES), tmp_path / "labels.xlsx")
    total = sum(i.file_size for i in zipfile.ZipFile(book).infolist())
    with pytest.raises(WorkbookError, match=rf"inflates to {total:,} B in \d+ members, cap 1,000 B") as info:
        read(book, limits=WorkbookLimits(max_unzipped_bytes=1000))
    assert "max_unzipped_bytes" in info.value.hint


def test_openpyxl_parses_through_defusedxml() -> None:
    assert openpyxl.DEFUSEDXML is True
