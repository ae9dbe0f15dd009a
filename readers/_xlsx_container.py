"""The xlsx container check: what the file is, and whether its zip is safe to inflate, before openpyxl opens it.

Only the zip's central directory is read here, never a member's content, so a
zip bomb is refused in bounded memory and time. Python's `zipfile` stops
inflating a member at its declared size, so capping the declared sizes caps
what openpyxl can ever inflate.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import olefile

from ._head import looks_like_text

__all__ = ["WorkbookError", "WorkbookLimits", "check_container"]

MiB = 1 << 20
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Small members may legitimately compress far better than any cap (an empty sheet); they cannot bomb.
_RATIO_FLOOR = 1 * MiB
_SAVE_AS_XLSX = ("open it in Excel or LibreOffice, save a copy as .xlsx (Excel Workbook), "
                 "and point [labels] workbook at it")


class WorkbookError(Exception):
    """A label workbook that cannot be used as the spec says; `key` is the [labels] key at fault."""

    def __init__(self, key: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.key = key
        self.hint = hint


@dataclass(frozen=True, slots=True)
class WorkbookLimits:
    """Caps checked on the zip's directory before any XML is inflated."""

    max_unzipped_bytes: int = 256 * MiB  # all members together, as declared
    max_compression_ratio: int = 200  # per member larger than 1 MiB inflated
    max_members: int = 10_000


def check_container(path: Path, limits: WorkbookLimits) -> None:
    """Raise `WorkbookError` unless `path` is a plain (unencrypted) xlsx zip within `limits`."""
    with path.open("rb") as f:
        head = f.read(512)
    if head.startswith(_OLE_MAGIC):
        what, hint = _ole_kind(path)
        raise WorkbookError("workbook", f"not an xlsx: {what}", hint)
    if not head:
        raise WorkbookError("workbook", "not an xlsx: the file is empty (0 B)", "export the workbook again")
    if not zipfile.is_zipfile(path):
        what = "text (a CSV or TSV export?)" if looks_like_text(head) else f"content starting {head[:8]!r}"
        raise WorkbookError("workbook", f"not an xlsx: not a zip archive but {what}", _SAVE_AS_XLSX)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise WorkbookError("workbook", f"not an xlsx: a broken zip archive ({exc})",
                            "export the workbook again") from exc
    _check_members(infos, limits)


def _ole_kind(path: Path) -> tuple[str, str]:
    try:
        with olefile.OleFileIO(str(path)) as ole:
            streams = ["/".join(s) for s in ole.listdir()]
    except OSError as exc:
        return f"a damaged OLE2 compound file ({exc})", _SAVE_AS_XLSX
    if "EncryptedPackage" in streams and "EncryptionInfo" in streams:
        return ("a password-protected xlsx (an OLE2 file holding EncryptionInfo and EncryptedPackage)",
                "remove the password (Excel: File > Info > Protect Workbook > Encrypt with Password, "
                "clear it) and save a copy as .xlsx")
    if "Workbook" in streams or "Book" in streams:
        return "a legacy Excel 97-2003 .xls workbook (OLE2/BIFF)", _SAVE_AS_XLSX
    return f"an OLE2 compound file holding {', '.join(streams[:5]) or 'no streams'}, not a workbook", _SAVE_AS_XLSX


def _check_members(infos: list[zipfile.ZipInfo], limits: WorkbookLimits) -> None:
    names = [i.filename for i in infos]
    if len(infos) > limits.max_members:
        raise WorkbookError("workbook", f"zip holds {len(infos):,} members, cap {limits.max_members:,}",
                            "this is not a workbook a person edits; check the file")
    if "[Content_Types].xml" not in names or not any(n.startswith("xl/") for n in names):
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        raise WorkbookError("workbook", f"not an xlsx: a zip of something else (holds {shown or 'nothing'})",
                            "point [labels] workbook at the .xlsx file")
    encrypted = [i.filename for i in infos if i.flag_bits & 0x1]
    if encrypted:
        raise WorkbookError("workbook", f"not an xlsx: zip members are encrypted ({', '.join(encrypted[:3])})",
                            "save an unencrypted copy")
    for i in infos:
        ratio = i.file_size / max(i.compress_size, 1)
        if i.file_size > _RATIO_FLOOR and ratio > limits.max_compression_ratio:
            raise WorkbookError(
                "workbook",
                f"zip member {i.filename} inflates {i.compress_size:,} B to {i.file_size:,} B "
                f"(ratio {ratio:,.0f}:1, cap {limits.max_compression_ratio}:1; refused unread)",
                "a zip bomb, or an unusually repetitive sheet: if genuine, raise [labels] max_compression_ratio",
            )
    total = sum(i.file_size for i in infos)
    if total > limits.max_unzipped_bytes:
        raise WorkbookError(
            "workbook",
            f"zip inflates to {total:,} B in {len(infos)} members, cap {limits.max_unzipped_bytes:,} B "
            "(refused unread)",
            "a zip bomb, or a genuinely huge workbook: if genuine, raise [labels] max_unzipped_bytes",
        )
