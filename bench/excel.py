"""Label workbooks: reading one sheet (vs plain openpyxl iteration), the join, and refusing a zip bomb."""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import openpyxl
from common import Result, median_p90, time_calls

from labzarr.convert.labels import join_labels
from labzarr.convert.manifest import Row
from labzarr.convert.spec import LabelsSpec
from labzarr.readers import ColumnRef, WorkbookError, read_label_sheet

# appended, not prepended: the repository root holds folders named like sections (convert/, loaders/), and
# sections import each other by name in worker processes too
sys.path.append(str(Path(__file__).resolve().parents[1]))
from tests.workbooks import Entry, lab_workbook, save, zip_bomb  # noqa: E402

NAME = "labels from Excel (20,000 ID rows, sheet 3 column F)"
ROWS = 20_000
STEPS = ("strip", "casefold", "drop_separators", "strip_leading_zeros")


def run(workdir: Path) -> list[Result]:
    book = workdir / "labels-20k.xlsx"
    if not book.exists():
        save(lab_workbook([Entry(f"case_{i:05d}", f"type{i % 7}") for i in range(ROWS)]), book)
    cols = {"cell_type": ColumnRef.parse("F")}

    def plain() -> None:
        wb = openpyxl.load_workbook(book, read_only=True, data_only=True)
        for _ in wb.worksheets[2].iter_rows(values_only=True):
            pass
        wb.close()

    def ours() -> object:
        return read_label_sheet(book, sheet=3, id_column=ColumnRef.parse("A"), columns=cols, header_row="auto")

    base, _ = median_p90(time_calls(plain, 3))
    mine, _ = median_p90(time_calls(ours, 3))
    sheet = ours()
    rows = [Row(item_id=f"case{i}", status="ok", source=f"case_{i:05d}.nii", array=f"volumes/case{i}")
            for i in range(ROWS)]
    spec = LabelsSpec(workbook=book, columns=cols)
    join, _ = median_p90(time_calls(lambda: join_labels(rows, sheet, spec, STEPS, workbook="l.xlsx"), 3))  # type: ignore[arg-type]

    bomb = zip_bomb(workdir / "bomb.xlsx", inflated=1 << 30)
    tracemalloc.start()
    t = time.perf_counter()
    try:
        ours_bomb = read_label_sheet(bomb, sheet=1, id_column=ColumnRef.parse("A"), columns=cols, header_row="auto")
        raise AssertionError(f"bomb accepted: {ours_bomb}")
    except WorkbookError:
        refused = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return [
        Result("openpyxl read-only, values only, sheet 3", ROWS / base, "rows/s", baseline=True),
        Result("read_label_sheet (zip check + merge scan + cell text)", ROWS / mine, "rows/s"),
        Result("join_labels, 20,000 items x 20,000 rows", ROWS / join, "items/s"),
        Result(f"refuse a 1 GiB zip bomb ({bomb.stat().st_size / 1e6:.1f} MB file)", refused * 1e3, "ms",
               higher_is_better=False, note=f"peak Python memory {peak / 1e6:.2f} MB"),
    ]
