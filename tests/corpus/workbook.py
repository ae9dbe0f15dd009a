"""Label workbooks that cannot be used: each stops the run before any conversion with one clear usage error."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import openpyxl
import pytest

from labzarr.convert.demo import xlsx_bytes

from ..workbooks import entity_expansion, lab_workbook, save, zip_bomb


def _write(data: bytes):
    def build(raw: Path) -> str:
        (raw / "labels").mkdir(parents=True, exist_ok=True)
        (raw / "labels" / "labels.xlsx").write_bytes(data)
        return "labels/labels.xlsx"
    return build


def _zip_of_png(raw: Path) -> str:
    (raw / "labels").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(raw / "labels" / "labels.xlsx", "w") as zf:
        zf.writestr("scan_001.png", b"\x89PNG\r\n\x1a\n" + bytes(64))
    return "labels/labels.xlsx"


def _bomb(raw: Path) -> str:
    (raw / "labels").mkdir(parents=True, exist_ok=True)
    zip_bomb(raw / "labels" / "labels.xlsx", inflated=1 << 30)
    return "labels/labels.xlsx"


def _entities(raw: Path) -> str:
    (raw / "labels").mkdir(parents=True, exist_ok=True)
    save(lab_workbook([]), raw / "labels" / "labels.xlsx", entity_expansion())
    return "labels/labels.xlsx"


def _one_sheet() -> bytes:
    wb = openpyxl.Workbook()
    wb.active.append(["Case", "Cell type"])
    wb.active.append(["case_001", "neuron"])
    return xlsx_bytes(wb)


def _outside(raw: Path) -> str:
    (raw.parent / "elsewhere.xlsx").write_bytes(_one_sheet())
    return "../elsewhere.xlsx"


def _symlink_outside(raw: Path) -> str:
    (raw.parent / "linked.xlsx").write_bytes(_one_sheet())
    (raw / "labels").mkdir(parents=True, exist_ok=True)
    os.symlink(raw.parent / "linked.xlsx", raw / "labels" / "labels.xlsx")
    return "labels/labels.xlsx"


# (build(raw) -> the workbook path relative to raw, extra [labels] keys, the message the run stops with)
WORKBOOK = [
    pytest.param(_write(b""), "", r"empty \(0 B\)", id="workbook-empty"),
    pytest.param(_write(b"Case,Cell type\ncase_001,neuron\n"), "", r"not a zip archive but text", id="workbook-csv"),
    pytest.param(_zip_of_png, "", r"a zip of something else", id="workbook-zip-of-png"),
    pytest.param(_bomb, "", r"inflates .* \(ratio \d+:1, cap 200:1", id="workbook-zip-bomb-1gib"),
    pytest.param(_entities, "", r"unsafe or malformed XML", id="workbook-entity-expansion"),
    pytest.param(_write(_one_sheet()), "", r"sheet 3 is past the end", id="workbook-sheet-past-end"),
    pytest.param(_outside, "", r"outside raw", id="workbook-dotdot-leaves-raw"),
    pytest.param(_symlink_outside, "", r"outside raw", id="workbook-symlink-leaves-raw"),
]
