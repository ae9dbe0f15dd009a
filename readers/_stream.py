"""Sequential reads of a file's content, gunzipped on the fly, with the whole-stream checks kept.

nibabel reads gzip lazily, so a truncated stream, a bad CRC or a missing
trailer surfaces late or never. Here the content is inflated in order into the
caller's buffers (bounded memory: nothing is kept but zlib's window and one
input block), and `finish()` inflates whatever is left and checks the
end-of-stream marker, every member's CRC and size trailer, and that nothing
but zero padding follows. A caller trusts no voxel until `finish()` returned.

Inflating uses ISA-L (python-isal), a drop-in for zlib's `decompressobj` that
inflates faster than zlib (bench/convert.py's gunzip rows measure both).
"""

from __future__ import annotations

from io import BufferedReader
from pathlib import Path
from types import TracebackType
from typing import cast

from isal import isal_zlib

from .reasons import Reason, Rejected

__all__ = ["ContentStream", "read_stream"]

_BLOCK = 1 << 20  # compressed bytes read per file read
_GZIP_MAGIC = b"\x1f\x8b"
# python-isal's stub declares `error` as an instance of Exception; at run time it is the class.
_IsalError = cast(type[Exception], isal_zlib.error)


class ContentStream:
    """A file's content (un-gzipped when `gzipped`), read in order; rejects past `cap` bytes of content.

    Use as a context manager; `readinto` fills a buffer, `skip` discards, `finish`
    validates the rest of the stream and returns the content's total size.
    """

    def __init__(self, path: Path, *, gzipped: bool, cap: int) -> None:
        self._path, self._gzipped, self._cap = path, gzipped, cap
        self._size = path.stat().st_size
        if not gzipped and self._size > cap:
            raise Rejected(Reason.TOO_LARGE, f"file is {self._size:,} B, more than the {cap:,} B its header allows")
        self._f: BufferedReader = path.open("rb")
        self._d = isal_zlib.decompressobj(wbits=31)
        self._pending = b""  # compressed bytes not yet handed to the inflater
        self._input_ended = False  # the file has no more compressed bytes
        self._done = False  # the last gzip member ended (or, plain, the file ended)
        self.position = 0  # content bytes delivered so far

    def __enter__(self) -> ContentStream:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Release the file."""
        self._f.close()

    def readinto(self, buf: memoryview) -> int:
        """Fill `buf` from the content; fewer bytes only where the content ends. Raises `Rejected`."""
        want = len(buf)
        got = 0
        if not self._gzipped:
            while got < want:
                n = self._f.readinto(buf[got:])
                if not n:
                    break
                got += n
            self.position += got
            return got
        while got < want and not self._done:
            piece = self._inflate(want - got)
            buf[got : got + len(piece)] = piece
            got += len(piece)
        return got

    def skip(self, n: int) -> int:
        """Discard the next `n` content bytes; returns how many there were."""
        left = n
        scratch = memoryview(bytearray(min(n, _BLOCK * 4)))
        while left:
            got = self.readinto(scratch[: min(left, len(scratch))])
            if not got:
                break
            left -= got
        return n - left

    def finish(self) -> int:
        """Read the rest of the content, check the gzip trailer(s) and what follows; return the content size."""
        if not self._gzipped:
            self.position = self._size
            return self._size
        while not self._done:
            self._inflate(_BLOCK * 4)
        return self.position

    def _inflate(self, limit: int) -> bytes:
        """Up to `limit` content bytes, counted in `position` (b"" only once the last member ended)."""
        while True:
            if not self._pending and not self._input_ended:
                self._pending = self._f.read(_BLOCK)
                self._input_ended = not self._pending
            try:
                # ISA-L may hold inflated bytes back after taking all input: an empty call drains them.
                out = self._d.decompress(self._pending, limit)
            except _IsalError as exc:
                raise Rejected(
                    Reason.CORRUPT_DATA,
                    f"gzip stream corrupt (zlib: {exc}) with {self.position:,} B inflated, "
                    f"{self._f.tell():,} of {self._size:,} compressed B read",
                ) from exc
            self._pending = self._d.unconsumed_tail
            self.position += len(out)
            if self.position > self._cap:
                raise Rejected(
                    Reason.TOO_LARGE,
                    f"gzip inflates past {self._cap:,} B (the most its header allows); stopped reading",
                )
            if self._d.eof:
                self._next_member()
            if out or self._done:
                return out
            if self._input_ended and not self._pending:
                raise Rejected(
                    Reason.TRUNCATED,
                    f"gzip stream ends without its end-of-stream marker and CRC trailer after "
                    f"{self.position:,} B inflated",
                )

    def _next_member(self) -> None:
        # A concatenated gzip member (e.g. from `cat a.gz b.gz`) is legal; continue with it.
        rest = self._d.unused_data + self._pending
        self._pending = b""
        if not rest:
            rest = self._f.read(_BLOCK)
        if not rest:
            self._done = True
            return
        if rest[:2] != _GZIP_MAGIC:
            if rest.strip(b"\x00"):
                raise Rejected(Reason.CORRUPT_DATA, f"{len(rest):,}+ B of non-gzip data after the gzip trailer")
            self._done = True
            return
        self._d = isal_zlib.decompressobj(wbits=31)
        self._pending = rest


def read_stream(path: Path, *, gzipped: bool, cap: int) -> bytes:
    """Return the whole (un-gzipped) content of `path`, validated; reject past `cap` bytes."""
    with ContentStream(path, gzipped=gzipped, cap=cap) as s:
        out = bytearray()
        block = memoryview(bytearray(_BLOCK * 4))
        while n := s.readinto(block):
            out += block[:n]
        s.finish()
    return bytes(out)
