"""Reading the first KiB of a file, transparently un-gzipped, for content sniffing."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HEAD_BYTES", "Head", "GZIP_MAGIC", "read_head", "looks_like_text"]

HEAD_BYTES = 1024
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class Head:
    """The first bytes of a file: `raw` as stored, `data` un-gzipped when `gzipped`."""

    raw: bytes
    data: bytes
    gzipped: bool
    size: int
    whole: bytes | None = None  # all of the file as stored, where it was read whole: readers need not read it again
    mtime: float | None = None  # its modification time, as the stat that gave `size` saw it


def read_head(path: Path, n: int = HEAD_BYTES, *, whole_up_to: int = 0) -> Head:
    """Read the first `n` bytes of `path`, decompressing a gzip stream's first `n` bytes if needed; a file of at
    most `whole_up_to` bytes is read whole (`Head.whole`), for a caller that reads all of it anyway."""
    stat = path.stat()
    size = stat.st_size
    with path.open("rb") as f:
        raw = f.read(size if size <= whole_up_to else max(n, 64 * 1024) if size else 0)
    whole = raw if size <= whole_up_to and len(raw) == size else None  # a file that grew is not read whole
    if raw[:2] != GZIP_MAGIC:
        return Head(raw=raw[:n], data=raw[:n], gzipped=False, size=size, whole=whole, mtime=stat.st_mtime)
    d = zlib.decompressobj(wbits=31)
    try:
        data = d.decompress(raw, n)
    except zlib.error:
        data = b""
    return Head(raw=raw[:n], data=data, gzipped=True, size=size, whole=whole, mtime=stat.st_mtime)


def looks_like_text(data: bytes) -> bool:
    """True when `data` decodes as UTF-8 (or Latin-1 without control bytes): notes, CSVs, logs."""
    if not data:
        return False
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        if exc.start >= len(data) - 4:  # a multi-byte character cut by the head's end
            return True
    allowed = set(range(32, 256)) | {9, 10, 13}
    return all(b in allowed for b in data)
