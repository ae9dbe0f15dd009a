"""Every probed file's `Probe`, by rel, on disk from the moment its batch comes back until the plan reads it.

Invariant: a `ProbeTable` is the `dict[str, Probe]` the probe step filled before (`table[p.rel] = p` for each probe
as it arrives): the same keys, each giving an equal `Probe`. In memory it holds, per probe, its rel's UTF-8 bytes,
where they end and their hash (`source_index.PackedKeys`); each batch of probes waits pickled whole in an unnamed
temporary file. A lookup finds the rel's position (first the one after the last found: the plan asks in the walk's
order, which is the order within a batch; else by a binary search of the sorted hashes, confirmed on the bytes) and
unpickles the batch
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

from ..probe import Probe, ProbedBatch
from ..source_index import PackedKeys, utf8
from .row_spill import PickleFile

__all__ = ["ProbeTable"]


class ProbeTable(Mapping[str, Probe]):
    """Probes `add`ed a batch at a time as they arrive (one per rel), looked up by rel; the file in `folder` (None:
    the system's temporary folder) goes on `close` (a context manager) or when the table is collected."""

    def __init__(self, folder: Path | None = None) -> None:
        self._batches = PickleFile(list, folder)
        self._batch_ends = array("q")  # probes in the batches up to and including each
        self._rels = PackedKeys()
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
        self.add_batch(ProbedBatch.of(list(probes)))

    def add_batch(self, batch: ProbedBatch) -> None:
        """Keep a batch as it came from where it was probed (`probe.ProbedBatch`): its pickle as it is, unpickled
        when the plan first asks for one of its rels; as `add(batch.probes())`."""
        if not batch.rels:
            return
        for rel in batch.rels:
            self._rels.add(utf8(rel))
        self._batches.append_pickled(batch.pickled)
        self._batch_ends.append(len(self._rels))

    def __getitem__(self, rel: str) -> Probe:
        at = self._rels.find(utf8(rel)) if isinstance(rel, str) else -1
        if at < 0:
            raise KeyError(rel)
        if not self._lo <= at < self._hi:
            batch = int(np.searchsorted(np.frombuffer(self._batch_ends, dtype=np.int64), at, side="right"))
            self._probes = []  # the batch held goes before the next is read
            self._probes = self._batches.load(batch)
            self._lo, self._hi = self._batch_ends[batch - 1] if batch else 0, self._batch_ends[batch]
        return self._probes[at - self._lo]

    def __contains__(self, rel: object) -> bool:
        return isinstance(rel, str) and self._rels.find(utf8(rel)) >= 0

    def __iter__(self) -> Iterator[str]:
        """The rels, in the order added."""
        for at in range(len(self._rels)):
            yield self._rels.key(at).decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._rels)

    def __repr__(self) -> str:
        return f"<ProbeTable: {len(self)} probes>"

