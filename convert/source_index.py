"""The earlier manifest's index by source, compact: what a rerun numbers its rows by (`manifest.Numbering`).

Invariant: `SourceIndex` maps each source to the index of its first row in the order `add`ed, as a dict filled with
`setdefault` would, and holds no Python object per source: the sources as UTF-8 in one buffer with their end
offsets, the indexes in an array, and once filled an 8-byte digest per source sorted for a binary search; a digest
matched is confirmed on the source's own bytes.

Why: a rerun over a million files read the committed manifest into a dict of a million strings before numbering
its first row (docs/benchmarks.md, "Scale: many tiny files").
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator, Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["SourceIndex"]


class SourceIndex(Mapping[str, int]):
    """Sources and their indexes, `add`ed one at a time, then looked up (`get`, `[]`); a source added again keeps
    its first index."""

    def __init__(self) -> None:
        self._chars = bytearray()
        self._ends = array("q")
        self._indexes = array("q")
        self._digests = array("Q")
        self._order: npt.NDArray[np.int64] | None = None  # positions by digest, then position (made on first lookup)
        self._sorted: npt.NDArray[np.uint64] | None = None
        self._count = -1  # distinct sources, counted on first `len`

    def add(self, source: str, index: int) -> None:
        """Record `source`'s `index` (a source added before keeps the index it had)."""
        raw = _utf8(source)
        self._chars += raw
        self._ends.append(len(self._chars))
        self._indexes.append(index)
        self._digests.append(_digest(raw))
        self._order = self._sorted = None
        self._count = -1

    def _source(self, at: int) -> bytes:
        return bytes(self._chars[self._ends[at - 1] if at else 0 : self._ends[at]])

    def _first(self, raw: bytes) -> int:
        """The position of the first source added equal to `raw`, or -1."""
        if self._order is None or self._sorted is None:
            digests = np.frombuffer(self._digests, dtype=np.uint64) if len(self._digests) else \
                np.zeros(0, dtype=np.uint64)
            self._order = np.argsort(digests, kind="stable").astype(np.int64)  # equal digests in the order added
            self._sorted = digests[self._order]
        key = np.uint64(_digest(raw))
        lo = int(np.searchsorted(self._sorted, key, side="left"))
        hi = int(np.searchsorted(self._sorted, key, side="right"))
        for at in self._order[lo:hi].tolist():
            if self._source(at) == raw:
                return int(at)
        return -1

    def __getitem__(self, source: str) -> int:
        at = self._first(_utf8(source))
        if at < 0:
            raise KeyError(source)
        return self._indexes[at]

    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and self._first(_utf8(source)) >= 0

    def __iter__(self) -> Iterator[str]:
        """The distinct sources, in the order first added."""
        for at in range(len(self._ends)):
            raw = self._source(at)
            if self._first(raw) == at:
                yield raw.decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        if self._count < 0:
            self._count = sum(1 for _ in self)
        return self._count

    def values_max(self) -> int:
        """The largest index added (-1 when none)."""
        return max(self._indexes, default=-1)


def _utf8(text: str) -> bytes:
    # Sources the walk could not decode carry surrogates (os.fsdecode); surrogatepass keeps them distinct.
    return text.encode("utf-8", "surrogatepass")


def _digest(raw: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")
