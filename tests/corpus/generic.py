"""Format-independent bad inputs: empty files, wrong content behind image names, no ID, duplicates."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from labzarr.convert.demo import NIBABEL_DATA
from labzarr.readers import Reason

from ._util import gz, put


def empty(name: str):
    def build(raw: Path, slot: str, seed: int) -> str:
        return put(raw, f"{slot}/{name}", b"")
    return build


def content(name: str, make):
    def build(raw: Path, slot: str, seed: int) -> str:
        return put(raw, f"{slot}/{name}", make(seed))
    return build


def _zip(seed: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("scan.nii", f"not really {seed}")
    return buf.getvalue()


def no_id(raw: Path, slot: str, seed: int) -> str:
    return put(raw, "scan_final_no_identifier.nii.gz", (NIBABEL_DATA / "standard.nii.gz").read_bytes())


def duplicate(raw: Path, slot: str, seed: int) -> str:
    put(raw, f"{slot}/original.nii", (NIBABEL_DATA / "functional.nii").read_bytes())
    return put(raw, f"{slot}/zz_copy.nii", (NIBABEL_DATA / "functional.nii").read_bytes())


GENERIC = [
    pytest.param(empty("scan.nii.gz"), Reason.EMPTY_FILE, id="empty-nii-gz"),
    pytest.param(empty("image.dcm"), Reason.EMPTY_FILE, id="empty-dcm"),
    pytest.param(empty("photo.jpg"), Reason.EMPTY_FILE, id="empty-jpg"),
    pytest.param(content("scan.nii", lambda s: f"exported by a script, run {s}\n".encode()),
                 Reason.UNSUPPORTED_FORMAT, id="text-named-nii"),
    pytest.param(content("scan.nii.gz", lambda s: bytes((i * 7 + s) % 256 for i in range(4096))),
                 Reason.UNSUPPORTED_FORMAT, id="binary-junk-named-nii-gz"),
    pytest.param(content("scan.nii.gz", lambda s: gz(f"notes {s}\n".encode() * 50)), Reason.UNSUPPORTED_FORMAT,
                 id="gzipped-text-named-nii-gz"),
    pytest.param(content("image.dcm", lambda s: b"%PDF-1.4\n" + bytes(s % 256 for _ in range(64))),
                 Reason.UNSUPPORTED_FORMAT, id="pdf-named-dcm"),
    pytest.param(content("photo.jpeg", lambda s: f"<html><body>{s}</body></html>".encode()),
                 Reason.UNSUPPORTED_FORMAT, id="html-named-jpeg"),
    pytest.param(content("scan.nii", _zip), Reason.UNSUPPORTED_FORMAT, id="zip-named-nii"),
    pytest.param(content("scan.mgz", lambda s: gz(bytes([1, 0, 0, 0, s % 256]) * 100)), Reason.UNSUPPORTED_FORMAT,
                 id="mgz-no-reader"),
    pytest.param(content("notes.txt", lambda s: f"case {s}: re-exported\n".encode()), "ignored",
                 id="notes-ignored"),
    pytest.param(content("thumb.bin", lambda s: bytes(range(256)) * (s % 3 + 1)), "ignored",
                 id="unknown-binary-ignored"),
    pytest.param(no_id, Reason.ID_UNMATCHED, id="no-item-id-in-path"),
    pytest.param(duplicate, Reason.DUPLICATE_CONTENT, id="byte-identical-copy"),
]
