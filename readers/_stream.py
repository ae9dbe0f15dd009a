"""Reading a whole file, gunzipping and validating the entire stream under a byte cap.

nibabel reads gzip lazily, so a truncated stream, a bad CRC or a missing
trailer surfaces late or never; here every byte is inflated and the gzip
trailer is checked before any voxel is trusted.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from .reasons import Reason, Rejected

__all__ = ["read_stream"]

_BLOCK = 1 << 20


def read_stream(path: Path, *, gzipped: bool, cap: int) -> bytes:
    """Return the (un-gzipped) content of `path`; reject past `cap` bytes, on truncation or CRC error."""
    if not gzipped:
        size = path.stat().st_size
        if size > cap:
            raise Rejected(Reason.TOO_LARGE, f"file is {size:,} B, more than the {cap:,} B its header allows")
        return path.read_bytes()
    out = bytearray()
    with path.open("rb") as f:
        d = zlib.decompressobj(wbits=31)
        pending = b""
        while True:
            if not pending:
                pending = f.read(_BLOCK)
                if not pending:
                    break
            try:
                chunk = d.decompress(pending, _BLOCK)
            except zlib.error as exc:
                raise Rejected(
                    Reason.CORRUPT_DATA,
                    f"gzip stream corrupt (zlib: {exc}) with {len(out):,} B inflated, "
                    f"{f.tell():,} of {path.stat().st_size:,} compressed B read",
                ) from exc
            pending = d.unconsumed_tail
            out += chunk
            if len(out) > cap:
                raise Rejected(
                    Reason.TOO_LARGE,
                    f"gzip inflates past {cap:,} B (the most its header allows); stopped reading",
                )
            if d.eof:
                # A concatenated gzip member (e.g. from `cat a.gz b.gz`) is legal; continue with it.
                rest = d.unused_data + pending
                pending = b""
                if not rest:
                    rest = f.read(_BLOCK)
                if not rest:
                    return bytes(out)
                if rest[:2] != b"\x1f\x8b":
                    if rest.strip(b"\x00"):
                        raise Rejected(
                            Reason.CORRUPT_DATA, f"{len(rest):,}+ B of non-gzip data after the gzip trailer"
                        )
                    return bytes(out)
                d = zlib.decompressobj(wbits=31)
                pending = rest
        tail = d.flush()
        out += tail
    if not d.eof:
        raise Rejected(
            Reason.TRUNCATED,
            f"gzip stream ends without its end-of-stream marker and CRC trailer after {len(out):,} B inflated",
        )
    return bytes(out)
