"""Every probed file's `Probe`, by rel, on disk from the moment its batch comes back until the plan reads it.

Invariant: a `ProbeTable` is the `dict[str, Probe]` the probe step filled before (`table[p.rel] = p` for each probe
as it arrives): the same keys, each giving an equal `Probe`. In memory it holds, per probe, its rel in a
`SourceIndex` (UTF-8 bytes and a digest) and where its pickle ends in an unnamed temporary file; a lookup
unpickles a fresh `Probe`.

Why: the driver held a Python object per probe (its rel, digest, magic bytes, plane) from the probe's return to the
plan, and the plan then built its own records from them: both at once, per file, at the run's first peak
(docs/benchmarks.md, "Scale: many tiny files").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ..probe import Probe
from ..source_index import SourceIndex
from .row_spill import PickleFile

__all__ = ["ProbeTable"]


class ProbeTable(Mapping[str, Probe]):
    """Probes `add`ed as they arrive (one per rel), looked up by rel; the file in `folder` (None: the system's
    temporary folder) goes on `close` (a context manager) or when the table is collected."""

    def __init__(self, folder: Path | None = None) -> None:
        self._file = PickleFile(Probe, folder)
        self._at = SourceIndex()  # rel -> position in the file

    def __enter__(self) -> ProbeTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def add(self, probes: Iterable[Probe]) -> None:
        """Keep each of `probes`; a file is probed once (a rel added again would keep its first probe)."""
        for probe in probes:
            self._at.add(probe.rel, len(self._file))
            self._file.append(probe)

    def __getitem__(self, rel: str) -> Probe:
        return self._file.load(self._at[rel])

    def __contains__(self, rel: object) -> bool:
        return rel in self._at

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._file)

    def __repr__(self) -> str:
        return f"<ProbeTable: {len(self)} probes>"
