"""Items' statistics as table columns (`table.py`): the moments the index keeps, and the full records (histograms
too) of the store's `statistics` group.

Invariant: `StatsColumns` writes and `StatsTable` reads the same layout, and a record read back equals the one
written, to the bit (floats are stored as float64, integers in a type that holds them). One row per channel of
an item: first its channels (`kind` 0), then per mask class, ascending, that class's channels (`kind` 1, `cls`
the class); `rows` ends each item's rows, `has` tells an item without statistics (None) from one with none
measured. With histograms, `hist.ends` ends each row's bins in `hist.ordinals` (int16) and `hist.counts`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from .index import STATISTICS, STATS
from .stats import ChannelStats, Histogram, ItemStats
from .table import Column, Strings, encode_strings, fixed_width

if TYPE_CHECKING:
    from ..location import Location, Transport

__all__ = ["Bins", "RecordTable", "StatsColumns", "StatsTable", "read_record_table", "read_records", "rows_of_keys",
           "write_columns", "write_records"]

_FLOATS = ("mean", "m2", "min", "max")
_INTS = ("count", "nan", "inf", "cls")
_BYTES = ("kind", "integral")
_EMPTY = Histogram()
_BATCH = 8192  # items converted to records at a time


class Bins(Protocol):
    """A histogram column as `StatsTable` reads it: its length, and a contiguous slice of it as an array (a numpy
    column, or one read from a file a slice at a time)."""

    def __len__(self) -> int: ...

    def __getitem__(self, at: slice, /) -> npt.NDArray[Any]: ...


class StatsColumns:
    """Builds the columns of many items' statistics, one `add` per item, in order (an item's histograms are held
    as the arrays it has until `columns`)."""

    def __init__(self, prefix: str, *, histograms: bool) -> None:
        self.prefix, self.histograms = prefix, histograms
        # Machine numbers in typed arrays, not a Python number per value in lists: the index's moments are built
        # an item at a time and held until the index is written (docs/benchmarks.md, "Scale: many tiny files").
        self._has = array("B")
        self._rows = array("q")
        self._values: dict[str, array[Any]] = {**{k: array("d") for k in _FLOATS}, **{k: array("q") for k in _INTS},
                                               **{k: array("B") for k in _BYTES}}
        self._ords: list[npt.NDArray[np.int16]] = []
        self._counts: list[npt.NDArray[np.int32] | npt.NDArray[np.int64]] = []
        self._bins: list[int] = []

    def add(self, stats: ItemStats | None) -> None:
        """The next item's statistics (None: it has none)."""
        self._has.append(stats is not None)
        if stats is not None:
            for channel in stats.channels:
                self._row(0, 0, channel)
            for cls, channels in sorted(stats.classes.items()):
                for channel in channels:
                    self._row(1, cls, channel)
        self._rows.append(len(self._values["count"]))

    def _row(self, kind: int, cls: int, c: ChannelStats) -> None:
        v = self._values
        v["kind"].append(kind)
        v["cls"].append(cls)
        v["integral"].append(c.integral)
        for name in ("count", "nan", "inf", *_FLOATS):
            v[name].append(getattr(c, name))
        if self.histograms:
            self._ords.append(c.histogram.ordinals)
            self._counts.append(c.histogram.counts)
            self._bins.append(len(c.histogram.ordinals))

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        """The columns, named `prefix` + ``.`` + their name."""
        p = self.prefix
        # Copies (np.array), not views of the typed arrays: those stay free to grow with a later `add`.
        out: dict[str, npt.NDArray[Any]] = {f"{p}.has": np.array(self._has, dtype=np.uint8),
                                            f"{p}.rows": np.array(self._rows, dtype=np.int64)}
        for names, dtype in ((_FLOATS, np.float64), (_INTS, np.int64), (_BYTES, np.uint8)):
            for name in names:
                out[f"{p}.{name}"] = np.array(self._values[name], dtype=dtype)
        if self.histograms:
            out[f"{p}.hist.ends"] = np.cumsum(np.asarray(self._bins, dtype=np.int64), dtype=np.int64)
            out[f"{p}.hist.ordinals"] = (np.concatenate(self._ords) if self._ords else np.zeros(0, np.int16)
                                         ).astype(np.int16)
            out[f"{p}.hist.counts"] = (np.concatenate(self._counts) if self._counts else np.zeros(0, np.int64)
                                       ).astype(np.int64)
        return out


class StatsTable:
    """The items' statistics `StatsColumns` wrote, read back one item at a time (`table[i]`)."""

    __slots__ = ("has", "rows", "_v", "_hist")

    def __init__(self, columns: Mapping[str, npt.NDArray[Any]], prefix: str) -> None:
        p = prefix
        self.has: npt.NDArray[np.uint8] = columns[f"{p}.has"]
        self.rows: npt.NDArray[np.int64] = columns[f"{p}.rows"]
        self._v = {name: columns[f"{p}.{name}"] for name in (*_FLOATS, *_INTS, *_BYTES)}
        ends = columns.get(f"{p}.hist.ends")
        self._hist: tuple[npt.NDArray[np.int64], Bins, Bins] | None = (
            None if ends is None else (ends, columns[f"{p}.hist.ordinals"], columns[f"{p}.hist.counts"]))
        n = len(self._v["count"])
        if len(self.has) != len(self.rows) or (len(self.rows) and int(self.rows[-1]) != n) or any(
                len(c) != n for c in self._v.values()) or (self._hist is not None and len(self._hist[0]) != n):
            raise ValueError(f"statistics columns {prefix!r} do not fit together")

    def __len__(self) -> int:
        return len(self.has)

    def column(self, name: str) -> npt.NDArray[Any]:
        """One column over every channel row: a moment (`count`, `mean`, `m2`, `min`, `max`, `nan`, `inf`), `kind`
        (1: a mask class's row), `cls` or `integral`."""
        return self._v[name]

    @property
    def histograms(self) -> tuple[npt.NDArray[np.int64], Bins, Bins] | None:
        """(end of each channel row's bins, every bin's ordinal, its count), or None for moments alone."""
        return self._hist

    def __getitem__(self, item: int) -> ItemStats | None:
        return self.many(np.asarray([item]))[0]

    def many(self, items: npt.NDArray[np.integer[Any]]) -> list[ItemStats | None]:
        """The statistics of `items` (positions), with one conversion to Python numbers for all of them."""
        ends = self.rows.astype(np.int64)
        stops = ends[items]
        starts = np.where(items > 0, ends[np.maximum(items - 1, 0)], 0)
        lengths = stops - starts
        # Every channel row of the items, in order, gathered once (`take`), then read as Python numbers.
        at = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        v = {name: c[at].tolist() for name, c in self._v.items()}
        hist = self._histograms(at)
        has = self.has[items].tolist()
        out: list[ItemStats | None] = []
        r = 0
        for present, length in zip(has, lengths.tolist()):
            if not present:
                out.append(None)
                r += length
                continue
            channels: list[ChannelStats] = []
            classes: dict[int, list[ChannelStats]] = {}
            for k in range(r, r + length):
                c = ChannelStats(count=v["count"][k], mean=v["mean"][k], m2=v["m2"][k], min=v["min"][k],
                                 max=v["max"][k], histogram=hist[k], nan=v["nan"][k], inf=v["inf"][k],
                                 integral=bool(v["integral"][k]))
                if v["kind"][k]:
                    classes.setdefault(v["cls"][k], []).append(c)
                else:
                    channels.append(c)
            r += length
            out.append(ItemStats(channels=tuple(channels), classes={k: tuple(cs) for k, cs in classes.items()}))
        return out

    def _histograms(self, rows: npt.NDArray[np.int64]) -> list[Histogram]:
        if self._hist is None:
            return [_EMPTY] * len(rows)
        return [self._histogram(r) for r in rows.tolist()]

    def _histogram(self, row: int) -> Histogram:
        assert self._hist is not None
        ends, ords, counts = self._hist
        start, stop = (int(ends[row - 1]) if row else 0), int(ends[row])
        if start == stop:
            return _EMPTY
        o, n = ords[start:stop], counts[start:stop]
        o.flags.writeable = n.flags.writeable = False  # views of the read-only table: a histogram is immutable
        return Histogram(o, n)


def write_records(store: Location, records: Mapping[str, ItemStats] | Iterable[tuple[str, ItemStats]]) -> None:
    """Write every item's full statistics record (by `IndexItem.key`; a mapping is written in key order) as a new
    table under the group `STATISTICS`, then point the group's `STATS` attr at it, then remove earlier tables."""
    pairs = sorted(records.items()) if isinstance(records, Mapping) else records
    keys: list[str] = []
    columns = StatsColumns("stats", histograms=True)
    for key, stats in pairs:
        keys.append(key)
        columns.add(stats)
    write_columns(store, {**encode_strings("key", keys), **columns.columns()}, len(keys))


def write_columns(store: Location, columns: Mapping[str, Column], records: int) -> None:
    """Write the statistics table of `records` records from its `columns` (`write_records`'), then point the
    group's `STATS` attr at it, then remove earlier tables."""
    from . import nodes
    from .table import remove_tables, write_table

    folder = store / STATISTICS
    name = write_table(folder, columns, rows=records)
    nodes.create_group(folder, {STATS: {"table": name, "items": records}}, atomic=True)
    remove_tables(folder, keep=name)


class RecordTable:
    """The store's `statistics` table as read: each record's key (`IndexItem.key`) and the records' columns, no
    record built (`records` builds them; `rows_of` finds items' rows for a merge straight from the columns)."""

    __slots__ = ("keys", "stats")

    def __init__(self, keys: Strings, stats: StatsTable) -> None:
        if len(keys) != len(stats):
            raise ValueError(f"{len(keys)} keys for {len(stats)} records")
        self.keys, self.stats = keys, stats

    def __len__(self) -> int:
        return len(self.stats)

    def rows_of(self, keys: Sequence[str]) -> npt.NDArray[np.int64]:
        """The row of each of `keys` that has a record (-1: no record, as for an item without statistics)."""
        return rows_of_keys(self.keys, self.stats.has, keys)

    def records(self) -> dict[str, ItemStats]:
        """Every record by key."""
        out: dict[str, ItemStats] = {}
        for lo in range(0, len(self.stats), _BATCH):  # in batches: Python numbers for a batch at a time
            at = np.arange(lo, min(lo + _BATCH, len(self.stats)))
            out |= {k: s for k, s in zip(self.keys.strings(at), self.stats.many(at))
                    if k is not None and s is not None}
        return out


def rows_of_keys(table_keys: Strings, has: npt.NDArray[np.uint8], keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """`RecordTable.rows_of` from a table's key column and `has` column alone: the row of each of `keys` whose key
    is `table_keys`' (the last of equal keys, as a dict of the records keeps it) and that has a record, else -1."""
    if not len(has) or not len(keys):  # an empty table (no item had statistics): nothing to look up
        return np.full(len(keys), -1, dtype=np.int64)
    try:
        wanted = np.array(keys, dtype=np.bytes_)  # ASCII keys (the usual): matched as numpy bytes, sorted once
    except UnicodeEncodeError:
        rows = _rows_by_dict(table_keys, keys)
    else:
        mine = _fixed_width(table_keys)
        order = np.argsort(mine, kind="stable")
        at = np.maximum(np.searchsorted(mine[order], wanted, side="right") - 1, 0)
        rows = np.where(mine[order][at] == wanted, order[at], -1).astype(np.int64)
    out: npt.NDArray[np.int64] = np.where((rows >= 0) & (has[np.maximum(rows, 0)] > 0), rows, -1)
    return out


def _rows_by_dict(table_keys: Strings, keys: Sequence[str]) -> npt.NDArray[np.int64]:
    codes = np.asarray(table_keys.codes, dtype=np.int64)
    present = np.flatnonzero(codes >= 0)
    row_of_code = np.full(len(table_keys.distinct) + 1, -1, dtype=np.int64)  # the last: a key not here
    row_of_code[codes[present]] = present
    number = {k: n for n, k in enumerate(table_keys.distinct)}
    missing = len(number)
    rows: npt.NDArray[np.int64] = row_of_code[np.fromiter((number.get(k, missing) for k in keys), dtype=np.int64,
                                                          count=len(keys))]
    return rows


def _fixed_width(column: Strings) -> npt.NDArray[np.bytes_]:
    """Each row's UTF-8 bytes of a text column as a numpy bytes array (None as b""), built from the column's
    bytes without a Python string per row."""
    distinct = fixed_width(column.chars, column.ends, spare=1)  # the spare row: code -1 (None)
    out: npt.NDArray[np.bytes_] = distinct[np.asarray(column.codes, dtype=np.int64)]
    return out


def read_record_table(transport: Transport) -> RecordTable:
    """The store's statistics table as `write_records` wrote it, its histogram bins read a slice at a time as they
    are used (`table.read_sliced`); FileNotFoundError where the store has none (converted without statistics),
    ValueError/KeyError/TypeError on a damaged table."""
    from .nodes import read_node
    from .table import read_sliced

    pointer = read_node(transport, STATISTICS).get("attributes", {}).get(STATS, {})
    table = pointer.get("table") if isinstance(pointer, Mapping) else None
    if not isinstance(table, str) or "/" in table:
        raise ValueError(f"attr {STATS!r} names no statistics table ({table!r})")
    _, columns = read_sliced(transport, f"{STATISTICS}/{table}", ("stats.hist.ordinals", "stats.hist.counts"))
    return RecordTable(Strings(columns, "key"), StatsTable(columns, "stats"))


def read_records(transport: Transport) -> dict[str, ItemStats]:
    """Every item's full statistics record by key, as `write_records` wrote them; FileNotFoundError where the store
    has none (converted without statistics), ValueError/KeyError/TypeError on a damaged table."""
    return read_record_table(transport).records()
