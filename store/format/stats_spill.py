"""Items' full statistics records, spilled to local files as they arrive, for the store's `statistics` table.

Invariant: `table_columns(keys)` gives, for the records of `keys`, the columns `StatsColumns` builds from the
same records, to the bit (so `write_spilled` writes the bytes `write_records` writes), and `record_table()`
reads the spill as a `RecordTable` that `table_stats` merges exactly as it merges the written table. In memory
the spill holds each record's key and where its channel rows end; every number and histogram bin waits in the
files, and is read back a batch of records at a time.

Why: a conversion's driver held every item's record (a histogram per channel: a few KB per small image) until
it wrote the table, and then the table's columns and their packed bytes besides (docs/benchmarks.md, "scale").
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .stats import ChannelStats, ItemStats
from .stats_table import RecordTable, StatsTable, rows_of_keys
from .table import Chunked, Column, Strings, encode_strings, flat_positions

if TYPE_CHECKING:
    from ..location import Location

__all__ = ["StatsSpill", "write_spilled"]

_ROWS: dict[str, type[np.generic]] = {"mean": np.float64, "m2": np.float64, "min": np.float64, "max": np.float64,
                                      "count": np.int64, "nan": np.int64, "inf": np.int64, "cls": np.int64,
                                      "kind": np.uint8, "integral": np.uint8, "bins": np.int64}
_BINS: dict[str, type[np.generic]] = {"ordinals": np.int16, "counts": np.int64}
_FLUSH = 512  # records buffered before they are appended to the files
_BATCH_ROWS = 512  # channel rows whose bins are gathered at a time when reading back (a few MB of temporaries)
_TAKE_ROWS = 1 << 16  # channel rows whose numbers are gathered at a time (half a MB a column)


class StatsSpill:
    """Full statistics records by `IndexItem.key`, appended (`add`) as results arrive, in any order; a key added
    again replaces its earlier record (as in a dict). Files in a private folder under `folder` (default: the
    system's temporary folder), removed on `close`."""

    def __init__(self, folder: Path | None = None) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="labzarr-stats-", dir=folder))
        # The keys as UTF-8 in one buffer (and where each ends), not a string per record kept from when it came.
        self._keys, self._key_ends = bytearray(), array("q")
        self._ends = array("q")  # per record: the end of its channel rows
        self._rows = 0
        self._pending: dict[str, list[Any]] = {name: [] for name in _ROWS}
        self._bins: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in _BINS}
        self._buffered = 0

    def __enter__(self) -> StatsSpill:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Remove the spill's files."""
        shutil.rmtree(self._dir, ignore_errors=True)

    def __len__(self) -> int:
        return len(self._key_ends)

    def add(self, key: str, stats: ItemStats) -> None:
        """Spill the record of the item `key`: its channels, then per mask class, ascending, that class's."""
        for channel in stats.channels:
            self._row(0, 0, channel)
        for cls, channels in sorted(stats.classes.items()):
            for channel in channels:
                self._row(1, cls, channel)
        self._keys += key.encode()
        self._key_ends.append(len(self._keys))
        self._ends.append(self._rows)
        self._buffered += 1
        if self._buffered >= _FLUSH:
            self._flush()

    def _row(self, kind: int, cls: int, c: ChannelStats) -> None:
        p = self._pending
        for name, value in (("kind", kind), ("cls", cls), ("integral", c.integral), ("count", c.count),
                            ("nan", c.nan), ("inf", c.inf), ("mean", c.mean), ("m2", c.m2), ("min", c.min),
                            ("max", c.max), ("bins", len(c.histogram.ordinals))):
            p[name].append(value)
        self._bins["ordinals"].append(c.histogram.ordinals)
        self._bins["counts"].append(c.histogram.counts)
        self._rows += 1

    def _flush(self) -> None:
        # The same conversions as `StatsColumns.columns`: Python numbers to the column's dtype, in one call.
        for name, values in self._pending.items():
            with (self._dir / name).open("ab") as f:
                np.asarray(values, dtype=_ROWS[name]).tofile(f)
            values.clear()
        for name, parts in self._bins.items():
            if parts:
                with (self._dir / name).open("ab") as f:
                    np.concatenate(parts).astype(_BINS[name]).tofile(f)
            parts.clear()
        self._buffered = 0

    def _column(self, name: str) -> npt.NDArray[Any]:
        self._flush()
        path = self._dir / name
        dtype = {**_ROWS, **_BINS}[name]
        return np.fromfile(path, dtype=dtype) if path.exists() else np.zeros(0, dtype=dtype)

    def _rows_of_records(self) -> npt.NDArray[np.int64]:
        return np.frombuffer(self._ends, dtype=np.int64) if len(self._ends) else np.zeros(0, dtype=np.int64)

    def record_table(self) -> RecordTable:
        """The spilled records as a `RecordTable` in the order they came (a key added twice: its last record
        counts, as `RecordTable.rows_of` finds it): their numbers read into memory, their bins read from the
        files a slice at a time as they are merged."""
        self._flush()
        bins = self._column("bins")
        columns: dict[str, Any] = {f"stats.{name}": self._column(name) for name in _ROWS if name != "bins"}
        columns |= {"stats.has": np.ones(len(self), dtype=np.uint8), "stats.rows": self._rows_of_records(),
                    "stats.hist.ends": np.cumsum(bins, dtype=np.int64),
                    **{f"stats.hist.{name}": _FileBins(self._dir / name, dtype) for name, dtype in _BINS.items()}}
        return RecordTable(self._keys_column(), StatsTable(columns, "stats"))

    def _keys_column(self) -> Strings:
        """The keys as a text column (`encode_strings` of them), made from their bytes where they are distinct
        (the usual: a key is added once), without a Python string per key."""
        ends = np.frombuffer(self._key_ends, dtype=np.int64) if len(self) else np.zeros(0, dtype=np.int64)
        if _distinct(self._keys, ends):
            return Strings(_distinct_keys(bytes(self._keys), ends.copy()), "key")
        return Strings(encode_strings("key", self._key_list()), "key")

    def _key_list(self) -> Iterator[str]:
        view, start = memoryview(self._keys), 0
        for end in self._key_ends:
            yield str(view[start:end], "utf-8")
            start = end

    def table_columns(self, keys: Sequence[str]) -> dict[str, Column]:
        """The columns of the statistics table of the records of `keys` (each spilled), in that order: what
        `StatsColumns` and `encode_strings` make of them, every column but the key's and the row bounds as a
        `Chunked` column read from the files a batch of rows at a time (never a whole column in memory)."""
        self._flush()
        record_ends = self._rows_of_records()
        # The records' rows: found from the keys alone (every spilled record has statistics).
        records = rows_of_keys(self._keys_column(), np.ones(len(self), dtype=np.uint8), keys)
        if bool(np.any(records < 0)):
            missing = [k for k, r in zip(keys, records.tolist()) if r < 0][:3]
            raise KeyError(f"no statistics spilled for {missing}")
        at, lengths = flat_positions(record_ends, records)
        out: dict[str, Column] = {**_key_strings(keys),
                                  "stats.has": np.ones(len(keys), dtype=np.uint8),
                                  "stats.rows": np.cumsum(lengths, dtype=np.int64)}
        for name, dtype in _ROWS.items():
            if name != "bins":
                out[f"stats.{name}"] = Chunked(dtype, len(at), _taken(self._dir / name, dtype, at))
        ends = np.cumsum(self._column("bins"), dtype=np.int64)
        spans = np.diff(ends, prepend=0)[at]
        out["stats.hist.ends"] = np.cumsum(spans, dtype=np.int64)
        total = int(spans.sum())
        for name, dtype in _BINS.items():
            out[f"stats.hist.{name}"] = Chunked(dtype, total, _gather(self._dir / name, dtype, ends, at))
        return out


def _distinct(chars: bytearray, ends: npt.NDArray[np.int64]) -> bool:
    """Whether the keys in `chars` (ending at `ends`) are pairwise distinct, compared by a 16-byte digest each
    (equal keys have equal digests; distinct digests prove distinct keys, and equal digests are taken as a
    repeat, which `encode_strings` then settles exactly)."""
    if len(ends) < 2:
        return True
    view, start = memoryview(chars), 0
    digests = bytearray()
    for end in ends.tolist():
        digests += hashlib.blake2b(view[start:end], digest_size=16).digest()
        start = end
    return len(np.unique(np.frombuffer(bytes(digests), dtype="S16"))) == len(ends)


def _key_strings(keys: Sequence[str]) -> dict[str, npt.NDArray[Any]]:
    """`encode_strings("key", keys)` for keys in ascending order (the table's): each distinct from the one before
    it is a new value, so no dict of the keys is needed."""
    if any(a >= b for a, b in zip(keys, keys[1:])):
        return encode_strings("key", keys)
    blobs = [k.encode() for k in keys]
    ends = np.cumsum([len(b) for b in blobs], dtype=np.int64) if blobs else np.zeros(0, np.int64)
    return _distinct_keys(b"".join(blobs), ends)


def _distinct_keys(chars: bytes, ends: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[Any]]:
    """The key column's arrays (as `encode_strings` makes them) of pairwise distinct keys, in order: each its own
    value, so the codes count up."""
    return {"key.codes": np.arange(len(ends), dtype=np.int64), "key.chars": np.frombuffer(chars, dtype=np.uint8),
            "key.ends": ends}


class _FileBins:
    """A histogram column of the spill read from its file a contiguous slice at a time (what `StatsTable` and
    `table_stats` ask of it), so the bins are never in memory all at once."""

    __slots__ = ("path", "dtype", "length")

    def __init__(self, path: Path, dtype: type[np.generic]) -> None:
        self.path, self.dtype = path, np.dtype(dtype)
        self.length = path.stat().st_size // self.dtype.itemsize if path.exists() else 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, at: slice, /) -> npt.NDArray[Any]:
        start, stop, step = at.indices(self.length)
        if step != 1:
            raise ValueError("a spilled histogram column is read in contiguous slices")
        if stop <= start:
            return np.zeros(0, dtype=self.dtype)
        return np.fromfile(self.path, dtype=self.dtype, count=stop - start, offset=start * self.dtype.itemsize)


def _gather(path: Path, dtype: type[np.generic], ends: npt.NDArray[np.int64],
            rows: npt.NDArray[np.int64]) -> Callable[[], Iterator[npt.NDArray[Any]]]:
    """The bins of channel rows `rows` (of the spill, in that order), a batch of rows at a time, from `path`."""
    def pieces() -> Iterator[npt.NDArray[Any]]:
        if not path.exists() or not len(rows):
            return
        # A map of the file per batch, dropped after it: the pages read are not kept mapped (resident) meanwhile.
        for lo in range(0, len(rows), _BATCH_ROWS):
            at, _ = flat_positions(ends, rows[lo:lo + _BATCH_ROWS])
            mapped = np.memmap(path, dtype=dtype, mode="r")
            piece = np.array(mapped[at])
            del mapped
            yield piece
    return pieces


def _taken(path: Path, dtype: type[np.generic], at: npt.NDArray[np.int64]) -> Callable[[], Iterator[npt.NDArray[Any]]]:
    """The values of channel rows `at` (in that order) of the spill's column file `path`, `_TAKE_ROWS` at a time."""
    def pieces() -> Iterator[npt.NDArray[Any]]:
        if not len(at):
            return
        for lo in range(0, len(at), _TAKE_ROWS):
            mapped = np.memmap(path, dtype=dtype, mode="r")
            piece = np.array(mapped[at[lo:lo + _TAKE_ROWS]])
            del mapped
            yield piece
    return pieces


def write_spilled(store: Location, spill: StatsSpill, keys: Sequence[str]) -> None:
    """`write_records` of the spilled records of `keys` (in key order, as `write_records` orders a mapping): the
    same table, to the byte, with no record built and one chunk of it in memory at a time."""
    from .stats_table import write_columns

    ordered = sorted(keys)
    write_columns(store, spill.table_columns(ordered), len(ordered))
