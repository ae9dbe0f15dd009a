"""One streaming pass over a worksheet's XML for what openpyxl's read-only mode does not expose.

Read-only mode (the only mode that streams a large sheet) skips `<mergeCells>`,
and with ``data_only=True`` a formula cell without a cached `<v>` looks like a
blank cell. This pass collects both, in bounded memory: rows are dropped as
soon as they are read. The XML is parsed with defusedxml (no DTDs, no entities).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from defusedxml.ElementTree import iterparse

__all__ = ["Merge", "SheetScan", "scan_sheet"]


@dataclass(frozen=True, slots=True)
class Merge:
    """A merged range; its value is the top-left (anchor) cell's."""

    min_row: int
    min_col: int
    max_row: int
    max_col: int

    def covers(self, row: int, col: int) -> bool:
        return self.min_row <= row <= self.max_row and self.min_col <= col <= self.max_col


@dataclass(frozen=True, slots=True)
class SheetScan:
    merges: tuple[Merge, ...]  # sorted by (min_row, min_col)
    uncached_formulas: frozenset[tuple[int, int]]  # (row, col) of formulas with no cached value


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def scan_sheet(path: Path, part: str) -> SheetScan:
    """Merged ranges and uncached formula cells of worksheet `part` (a zip member name) in `path`."""
    from openpyxl.utils.cell import coordinate_to_tuple, range_boundaries  # as in excel.py: where a workbook is read

    merges: list[Merge] = []
    uncached: set[tuple[int, int]] = set()
    row = col = 0
    sheet_data = None
    with zipfile.ZipFile(path) as zf, zf.open(part) as src:
        for event, el in iterparse(src, events=("start", "end")):
            name = _local(el.tag)
            if event == "start":
                if name == "sheetData":
                    sheet_data = el
                elif name == "row":
                    row = int(el.get("r") or row + 1)
                    col = 0
                continue
            if name == "c":
                ref = el.get("r")
                row, col = coordinate_to_tuple(ref) if ref else (row, col + 1)
                children = {_local(child.tag): child for child in el}
                if "f" in children and not (children.get("v") is not None and children["v"].text):
                    uncached.add((row, col))
            elif name == "row" and sheet_data is not None:
                sheet_data.clear()  # the row is done: keep memory flat on sheets of any length
            elif name == "mergeCell" and el.get("ref"):
                min_col, min_row, max_col, max_row = range_boundaries(el.get("ref"))
                # A merge is always a full A1:B2 range; a column or row range ("A:B") has open ends.
                if min_col is not None and min_row is not None and max_col is not None and max_row is not None:
                    merges.append(Merge(min_row, min_col, max_row, max_col))
    return SheetScan(merges=tuple(sorted(merges, key=lambda m: (m.min_row, m.min_col))),
                     uncached_formulas=frozenset(uncached))
