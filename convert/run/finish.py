"""After the conversion: from the rows on disk to the manifest, the store's index and summary.json's sums.

The rows wait in a `RowSpill` (converted ones as they arrived, then the unchanged, then those the plan decided); every
step here reads them back one at a time, in the order it needs: `duplicate_content` over the decoded ones, then the
manifest order, in which each final row is numbered, written to the manifest, added to the index's columns and to
the summary's sums, and kept for `RunResult.rows` in a `RowFile`. What stays in memory per row is the spill's key
and the index's columns (docs/benchmarks.md, "Scale: many tiny files").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from labzarr.readers import Reason
from labzarr.store import Location
from labzarr.store.format.items import IndexColumns, IndexItems

from ..manifest import Numbering, Row
from ..manifest_file import ManifestFile
from ..write.arrays import index_entries, remove_array
from .row_spill import RowFile, RowSpill
from .tally import Tally

__all__ = ["Decoded", "Volumes", "Written", "write_rows"]


class Decoded:
    """The spill's rows with `duplicate_content` decided: the second ok row with the same bytes (by source order;
    with `[splits]`, of the same item: `duplicate_key`) is rejected, and its array (not a stack slot: those are
    emptied with the stack) removed from `store`. `decoded`: how many of the spill's first rows were decoded (the
    rest the plan decided); `converted`: how many of those this run converted."""

    def __init__(self, spilled: RowSpill, store: Location, *, decoded: int, converted: int) -> None:
        self.spilled, self.count, self.converted = spilled, decoded, converted
        self.first = {at: spilled.row(first).source for at, first in spilled.duplicates().items()}
        for at in sorted(self.first):
            row = spilled.row(at)
            if row.slot is None:
                remove_array(store, row.group or row.array)

    def row(self, at: int) -> Row:
        """The spill's row `at`, with its `duplicate_content` verdict."""
        return self._verdict(at, self.spilled.row(at))

    def _verdict(self, at: int, row: Row) -> Row:
        first = self.first.get(at)
        return row if first is None else row.rejected(Reason.DUPLICATE_CONTENT, f"same sha256 as {first}")

    def decoded(self) -> Iterator[Row]:
        """The decoded rows (converted, then unchanged), read one at a time."""
        return (self.row(at) for at in range(self.count))

    def volumes(self) -> Volumes:
        """What the run needs of its volumes (`Volumes`), in one pass over the decoded rows (two where a rejection
        not of a stack's image shares its file with another row)."""
        kept: set[str] = set()
        written: set[str] = set()
        rejected: list[Row] = []
        for at in range(self.count):
            raw = self.spilled.row(at)
            row = self._verdict(at, raw)
            if at < self.converted and raw.status == "ok" and raw.array and raw.slot is None:
                written.add(raw.array)
            if row.status == "ok" and row.slot is None:
                kept.add(row.group or row.array)
            if row.status == "rejected" and not row.group and row.slot is None and not self.spilled.planar(at):
                rejected.append(row)
        # A file is a stack's image whichever of its rows says so.
        sources = {r.source for r in rejected}
        planar = {r.source for at, r in enumerate(self.decoded())
                  if r.source in sources and (r.slot is not None or self.spilled.planar(at))} if sources else set()
        return Volumes(kept=kept, written=written, outcomes=[r for r in rejected if r.source not in planar])

    def in_manifest_order(self) -> Iterator[Row]:
        """Every row, in manifest order."""
        return (self.row(int(at)) for at in self.spilled.manifest_order())


@dataclass(frozen=True, slots=True)
class Volumes:
    """What the decoded rows say of the store's arrays: those to keep (`remove_stale`: the ok unstacked items'),
    those this run wrote (ok before `duplicate_content`: created with no labels), and the rejections
    `write_outcomes` records (not those of a stack's images, whose shard records hold them, nor a sample's)."""

    kept: set[str]
    written: set[str]
    outcomes: list[Row]


@dataclass(slots=True)
class Written:
    """What the pass over the final rows gathered: the index's columns, the keys of the items with statistics,
    the summary's sums, each unstacked ok volume's labels to set, and the rows for `RunResult`."""

    rows: RowFile
    index: IndexItems | None  # None once taken (`take_index`)
    stats_keys: list[str] | None  # None once taken (`take_stats_keys`)
    tally: Tally
    labels: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    next_index: int = 0

    def take_index(self) -> IndexItems:
        """The index's columns, handed over once: this record no longer keeps them alive."""
        index, self.index = self.index, None
        if index is None:
            raise RuntimeError("the index was taken already")
        return index

    def take_stats_keys(self) -> list[str]:
        """The keys of the items with statistics, handed over once (as `take_index`)."""
        keys, self.stats_keys = self.stats_keys, None
        if keys is None:
            raise RuntimeError("the statistics keys were taken already")
        return keys


def write_rows(rows: Iterable[Row], manifest: ManifestFile, numbering: Numbering, *, written: set[str],
               folder: Path | None) -> Written:
    """Write each of `rows` (final, in manifest order) to `manifest` numbered by `numbering`, and gather the rest
    (`Written`) from it. `written`: the volumes this run wrote (`Decoded.written`): created with no labels, so only
    those with labels are labelled; `folder`: where the kept rows' file goes (None: the temporary folder)."""
    columns = IndexColumns()
    keys: list[str] = []
    tally = Tally()
    kept = RowFile(folder)
    todo: list[tuple[str, dict[str, str]]] = []
    for row in rows:
        manifest.write(numbering.number(row), row)
        for item in index_entries((row,)):
            columns.add(item)
            if item.stats is not None:
                keys.append(item.key)
        tally.add(row)
        if row.status == "ok" and row.array and row.slot is None and (row.labels or row.array not in written):
            todo.append((row.array, dict(row.labels)))
        kept.append(row)
    index = IndexItems.read(*columns.columns(spend=True))  # the builders go as the columns are made
    return Written(rows=kept, index=index, stats_keys=keys, tally=tally, labels=todo, next_index=numbering.next)
