"""Workbook builders for the label tests: real xlsx files written by openpyxl, then edited the way Excel writes them."""

from __future__ import annotations

import datetime as dt
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import openpyxl
from openpyxl.workbook.workbook import Workbook

from labzarr.convert.demo import xlsx_bytes

SHEET3 = "xl/worksheets/sheet3.xml"
HEADER = ["Case", "Reader", "Reviewed", "Slices", "Notes", "Cell type"]


@dataclass(frozen=True)
class Entry:
    """One data row of the label sheet: the ID cell (and its number format) and the column F value."""

    case: object
    cell_type: object
    id_format: str | None = None
    label_format: str | None = None


def lab_workbook(entries: Sequence[Entry], *, title_rows: int = 2, merge_label: str | None = None) -> Workbook:
    """Four sheets, labels on sheet 3 column F under merged title rows; sheets 1, 2 (hidden) and 4 distract
    with the same header names and other values."""
    wb = openpyxl.Workbook()
    readme = wb.active
    readme.title = "Read me"
    readme.append(["How to read this workbook"])
    readme.append(["Case", "Cell type"])
    readme.append(["case_001", "WRONG-readme"])

    old = wb.create_sheet("Annotations v1")
    old.sheet_state = "hidden"
    old.append(HEADER)
    old.append(["case_001", "R1", dt.date(2026, 1, 1), 1, "", "WRONG-v1"])

    ws = wb.create_sheet("Annotations v2")
    for i in range(title_rows):
        ws.append([f"Title line {i + 1} of the annotations"])
        ws.merge_cells(start_row=i + 1, start_column=1, end_row=i + 1, end_column=6)
    ws.append(HEADER)
    for n, e in enumerate(entries):
        ws.append([e.case, "R1", dt.date(2026, 11, 3), 10 + n, "", e.cell_type])
        if e.id_format:
            ws.cell(ws.max_row, 1).number_format = e.id_format
        if e.label_format:
            ws.cell(ws.max_row, 6).number_format = e.label_format
    if merge_label:
        ws.merge_cells(merge_label)

    pivot = wb.create_sheet("Pivot")
    pivot.append(["Cell type", "Count", "Case"])
    pivot.append(["WRONG-pivot", 3, "case_001"])
    return wb


Edit = Callable[[str, bytes], bytes]


def save(wb: Workbook, path: Path, *edits: Edit) -> Path:
    """Write `wb` to `path` (deterministic bytes), applying `edits` to its zip members."""

    def edit(name: str, data: bytes) -> bytes:
        for e in edits:
            data = e(name, data)
        return data

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(xlsx_bytes(wb, edit))
    return path


def _cell_xml(member: str, coord: str, replace: Callable[[re.Match[bytes]], bytes]) -> Edit:
    pattern = re.compile(rb'<c r="' + coord.encode() + rb'"[^>]*>.*?</c>')

    def edit(name: str, data: bytes) -> bytes:
        if name != member:
            return data
        new, n = pattern.subn(replace, data, count=1)
        assert n == 1, f"{coord} not in {member}"
        return new

    return edit


def cached_formula(coord: str, value: str, member: str = SHEET3) -> Edit:
    """Give the formula at `coord` a cached string value, as Excel saves it."""
    return _cell_xml(member, coord, lambda m: re.sub(rb"<v */>|<v></v>", b"<v>" + value.encode() + b"</v>",
                                                     m.group(0).replace(b"<c ", b'<c t="str" ', 1)))


def error_value(coord: str, error: str = "#N/A", member: str = SHEET3) -> Edit:
    """Replace the cell at `coord` with a formula whose cached result is an Excel error."""
    return _cell_xml(member, coord, lambda m: f'<c r="{coord}" t="e"><f>NA()</f><v>{error}</v></c>'.encode())


def stale_dimension(ref: str = "A1:B2", member: str = SHEET3) -> Edit:
    """A `<dimension>` that no longer matches the data (editors leave these behind)."""

    def edit(name: str, data: bytes) -> bytes:
        if name != member:
            return data
        return re.sub(rb'<dimension ref="[^"]*" */>', f'<dimension ref="{ref}"/>'.encode(), data)

    return edit


def entity_expansion(member: str = "xl/workbook.xml") -> Edit:
    """A billion-laughs DTD in `member`; a safe parser refuses it."""
    dtd = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
           b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
           b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>')

    def edit(name: str, data: bytes) -> bytes:
        if name != member:
            return data
        body = re.sub(rb"^<\?xml[^>]*\?>", b"", data)
        return dtd + body.replace(b"</workbook>", b"<definedNames><definedName name=\"x\">&lol3;</definedName>"
                                                  b"</definedNames></workbook>")

    return edit


def zip_bomb(path: Path, inflated: int = 1 << 30) -> Path:
    """A small `.xlsx` whose sheet1.xml inflates to `inflated` bytes, written without ever holding them.

    The deflate stream is one compressed 1 MiB block of XML rows repeated (each block a sync-flushed
    stream with no back-references outside itself), so the file is ~1 MB and the CRC is exact.
    """
    block = (b'<row><c t="inlineStr"><is><t>boom</t></is></c></row>' * 20000)[: 1 << 20]
    head = b'<?xml version="1.0"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
    tail = b"</sheetData></worksheet>"
    n = (inflated - len(head) - len(tail)) // len(block)

    def deflate(data: bytes) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)

    body = deflate(block)
    crc = zlib.crc32(head)
    for _ in range(n):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    sheet = (deflate(head), body, n, deflate(tail) + zlib.compressobj(9, zlib.DEFLATED, -15).flush())
    size = len(head) + n * len(block) + len(tail)
    small = {
        "[Content_Types].xml": b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>',
        "xl/workbook.xml": b'<?xml version="1.0"?><workbook/>',
    }
    out = bytearray()
    central = bytearray()

    def member(name: str, parts: Sequence[bytes], repeat: tuple[int, int], crc32: int, usize: int) -> None:
        offset = len(out)
        csize = sum(len(p) for p in parts) + len(parts[repeat[0]]) * (repeat[1] - 1)
        fname = name.encode()
        out.extend(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc32, csize, usize, len(fname), 0) + fname)
        for i, p in enumerate(parts):
            out.extend(p * (repeat[1] if i == repeat[0] else 1))
        central.extend(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc32, csize, usize,
                                   len(fname), 0, 0, 0, 0, 0, offset) + fname)

    for name, data in small.items():
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        member(name, [c.compress(data) + c.flush()], (0, 1), zlib.crc32(data), len(data))
    member("xl/worksheets/sheet1.xml", [sheet[0], sheet[1], sheet[3]], (1, sheet[2]), crc, size)
    count = len(small) + 1
    out_len = len(out)
    out.extend(central)
    out.extend(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), out_len, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path
