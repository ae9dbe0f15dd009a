"""Every probed file's `Probe`, by rel, on disk from the moment its batch comes back until the plan reads it.

Invariant: a `ProbeTable` is the `dict[str, Probe]` the probe step filled before (`table[p.rel] = p` for each probe
as it arrives): the same keys, each giving an equal `Probe`. In memory it holds, per probe, its rel's UTF-8 bytes,
where they end and their hash; each batch of probes waits pickled whole in an unnamed temporary file. A lookup
finds the rel's position (first the one after the last found: the plan asks in the walk's order, which is the
order within a batch; else by a binary search of the sorted hashes, confirmed on the bytes) and unpickles the batch
holding it, keeping that one batch until another is asked for.

Why: the driver held a Python object per probe (its rel, digest, magic bytes, plane) from the probe's return to the
plan, and the plan then built its own records from them: both at once, per file, at the run's first peak
(docs/benchmarks.md, "Scale: many tiny files").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..probe import Probe
from .row_spill import PickleFile

__all__ = ["ProbeTable"]


class ProbeTable(Mapping[str, Probe]):
    """Probes `add`ed a batch at a time as they arrive (one per rel), looked up by rel; the file in `folder` (None:
    the system's temporary folder) goes on `close` (a context manager) or when the table is collected."""

    def __init__(self, folder: Path | None = None) -> None:
        self._batches = PickleFile(list, folder)
        self._batch_ends = array("q")  # probes in the batches up to and including each
        self._rels, self._rel_ends = bytearray(), array("q")
        self._hashes = array("q")  # hash() of each rel: this process's, never stored
        self._order: npt.NDArray[np.int64] | None = None  # positions by hash (made on a lookup that needs it)
        self._sorted: npt.NDArray[np.int64] | None = None
        self._last = -1  # the position last found
        self._probes: list[Probe] = []  # the probes of one batch: the positions [_lo, _hi)
        self._lo = self._hi = 0

    def __enter__(self) -> ProbeTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._batches.close()
        self._probes, self._lo, self._hi = [], 0, 0

    def add(self, probes: Iterable[Probe]) -> None:
        """Keep a batch of `probes`, whose rels no batch added before has (a file is probed once)."""
        batch = list(probes)
        if not batch:
            return
        for probe in batch:
            self._rels += _utf8(probe.rel)
            self._rel_ends.append(len(self._rels))
            self._hashes.append(hash(probe.rel))
        self._batches.append(batch)
        self._batch_ends.append(len(self._rel_ends))
        self._order = self._sorted = None

    def _rel(self, at: int) -> bytes:
        return bytes(self._rels[self._rel_ends[at - 1] if at else 0 : self._rel_ends[at]])

    def _position(self, rel: str) -> int:
        """Where `rel` was added, or -1."""
        raw = _utf8(rel)
        guess = self._last + 1
        if guess < len(self._rel_ends) and self._rel(guess) == raw:
            return guess
        if self._order is None or self._sorted is None:
            hashes = np.frombuffer(self._hashes, dtype=np.int64) if len(self._hashes) else np.zeros(0, np.int64)
            self._order = np.argsort(hashes, kind="stable").astype(np.int64)  # equal hashes in the order added
            self._sorted = hashes[self._order]
        key = hash(rel)
        lo = int(np.searchsorted(self._sorted, key, side="left"))
        hi = int(np.searchsorted(self._sorted, key, side="right"))
        for at in self._order[lo:hi].tolist():
            if self._rel(at) == raw:
                return int(at)
        return -1

    def __getitem__(self, rel: str) -> Probe:
        at = self._position(rel) if isinstance(rel, str) else -1
        if at < 0:
            raise KeyError(rel)
        self._last = at
        if not self._lo <= at < self._hi:
            batch = int(np.searchsorted(np.frombuffer(self._batch_ends, dtype=np.int64), at, side="right"))
            self._probes = []  # the batch held goes before the next is read
            self._probes = self._batches.load(batch)
            self._lo, self._hi = self._batch_ends[batch - 1] if batch else 0, self._batch_ends[batch]
        return self._probes[at - self._lo]

    def __contains__(self, rel: object) -> bool:
        return isinstance(rel, str) and self._position(rel) >= 0

    def __iter__(self) -> Iterator[str]:
        """The rels, in the order added."""
        for at in range(len(self._rel_ends)):
            yield self._rel(at).decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._rel_ends)

    def __repr__(self) -> str:
        return f"<ProbeTable: {len(self)} probes>"


def _utf8(text: str) -> bytes:
    # Names the walk could not decode carry surrogates (os.fsdecode); surrogatepass keeps them distinct.
    return text.encode("utf-8", "surrogatepass")
