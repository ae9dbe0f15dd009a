"""The earlier manifest's index by source, compact: what a rerun numbers its rows by (`manifest.Numbering`).

Invariant: `SourceIndex` maps each source to the index of its first row in the order `add`ed, as a dict filled with
`setdefault` would, and holds no Python object per source: the sources as UTF-8 in one buffer with their end
offsets, the indexes in an array, and once filled an 8-byte digest per source sorted for a binary search; a digest
matched is confirmed on the source's own bytes (`PackedKeys`, which `run/probe_table.py` keeps its rels in too).

Why: a rerun over a million files read the committed manifest into a dict of a million strings before numbering
its first row (docs/benchmarks.md, "Scale: many tiny files").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["PackedKeys", "SourceIndex", "utf8"]


class PackedKeys:
    """Byte strings `add`ed one at a time, each at the next position, found again by value (`find`): the strings in
    one buffer with their end offsets and an 8-byte digest each; once looked up, the digests sorted for a binary
    search, a match confirmed on the bytes. What `SourceIndex` and `run/probe_table.ProbeTable` keep their keys in."""

    def __init__(self) -> None:
        self._chars = bytearray()
        self._ends = array("q")
        self._digests = array("q")
        self._order: npt.NDArray[np.int64] | None = None  # positions by digest, then position (made on first lookup)
        self._sorted: npt.NDArray[np.int64] | None = None
        self._repeat = bytearray()  # per position, 1 where an earlier position holds the same key (with `_order`)
        self._last = -1  # the position last found: a lookup tries the one after it first

    def add(self, raw: bytes) -> None:
        """Put `raw` at the next position."""
        self._chars += raw
        self._ends.append(len(self._chars))
        self._digests.append(_digest(raw))
        self._order = self._sorted = None
        self._last = -1

    def __len__(self) -> int:
        return len(self._ends)

    def key(self, at: int) -> bytes:
        """The key at position `at`."""
        return bytes(self._chars[self._ends[at - 1] if at else 0 : self._ends[at]])

    def find(self, raw: bytes) -> int:
        """The first position holding `raw`, or -1. Keys are mostly looked up in the order they were added, so the
        position after the last found is tried first: it answers when it holds `raw` and no earlier one does."""
        if self._order is None or self._sorted is None:
            self._index()
        guess = self._last + 1
        if guess < len(self._ends) and not self._repeat[guess] and self.key(guess) == raw:
            self._last = guess
            return guess
        assert self._order is not None and self._sorted is not None
        digest = _digest(raw)
        lo = int(np.searchsorted(self._sorted, digest, side="left"))
        hi = int(np.searchsorted(self._sorted, digest, side="right"))
        for at in self._order[lo:hi].tolist():
            if self.key(at) == raw:
                self._last = int(at)
                return int(at)
        return -1

    def _index(self) -> None:
        """Sort the digests (`_order`, `_sorted`) and mark each position whose key an earlier one holds."""
        digests = np.frombuffer(self._digests, dtype=np.int64) if len(self._digests) else np.zeros(0, np.int64)
        self._order = np.argsort(digests, kind="stable").astype(np.int64)  # equal digests in the order added
        self._sorted = digests[self._order]
        self._repeat = bytearray(len(digests))
        equal = np.flatnonzero(self._sorted[1:] == self._sorted[:-1])  # runs of equal digests: few, and short
        for at in np.unique(np.r_[equal, equal + 1]).tolist():
            mine = int(self._order[at])
            raw = self.key(mine)
            j = at - 1
            while j >= 0 and self._sorted[j] == self._sorted[at]:
                if self.key(int(self._order[j])) == raw:
                    self._repeat[mine] = 1
                    break
                j -= 1


class SourceIndex(Mapping[str, int]):
    """Sources and their indexes, `add`ed one at a time, then looked up (`get`, `[]`); a source added again keeps
    its first index."""

    def __init__(self) -> None:
        self._keys = PackedKeys()
        self._indexes = array("q")
        self._count = -1  # distinct sources, counted on first `len`

    def add(self, source: str, index: int) -> None:
        """Record `source`'s `index` (a source added before keeps the index it had)."""
        self._keys.add(utf8(source))
        self._indexes.append(index)
        self._count = -1

    def __getitem__(self, source: str) -> int:
        at = self._keys.find(utf8(source))
        if at < 0:
            raise KeyError(source)
        return self._indexes[at]

    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and self._keys.find(utf8(source)) >= 0

    def __iter__(self) -> Iterator[str]:
        """The distinct sources, in the order first added."""
        for at in range(len(self._keys)):
            raw = self._keys.key(at)
            if self._keys.find(raw) == at:
                yield raw.decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        if self._count < 0:
            self._count = sum(1 for _ in self)
        return self._count

    def values_max(self) -> int:
        """The largest index added (-1 when none)."""
        return max(self._indexes, default=-1)


def utf8(text: str) -> bytes:
    """`text` as the UTF-8 a key is kept in."""
    # Names the walk could not decode carry surrogates (os.fsdecode); surrogatepass keeps them distinct, and their
    # bytes sort as the names do (`run/row_spill.py` orders the manifest by them).
    return text.encode("utf-8", "surrogatepass")


def _digest(raw: bytes) -> int:
    # This process's hash: the digests are never stored, and equal digests are confirmed on the bytes.
    return hash(raw)
