"""Tables in a store: named one-dimensional numpy columns, packed in one zarr array of bytes.

Invariant: a table is written whole into a group named by a digest of its content and never changed; the
document that names it (the root's index attr, the `statistics` group) is rewritten after it, atomically, so a
reader sees the old table or the new one, never a mix. A table is one uint8 array (zstd, crc32c; a chunk file
per 64 MiB) holding every column's bytes, its attribute `TABLE` the row count and each column's dtype, offset
and length: one object to fetch from a URL store, a few files on disk whatever the column count. It is read
back through the store's one read path (`store.read`: crc32c checked, the record of stored files checked), so a
table in a folder, a zip or at a URL reads alike, and the columns are views of the decoded bytes; `verify` knows
the array by `TABLE` for derived data (checked chunk by chunk, no item attributes).

Integer columns are stored in the smallest signed type that holds their values (readers take any). Text columns
are dictionary-encoded (`Strings`: a code per row, -1 for None, and the distinct values as UTF-8
bytes with their end offsets); lists per row are `Ragged` (the end offset of each row's values, and the values).
Only the distinct values a caller asks for are decoded, so a column of a million IDs costs its bytes, not a
million Python strings, until it is used.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..location import Location, Transport
    from ..read import ArrayReader

__all__ = ["TABLE", "Chunked", "Column", "Ragged", "RaggedColumn", "Strings", "TableSlices", "TextColumn",
           "encode_strings", "fixed_width", "flat_positions", "read_sliced", "read_table", "remove_tables",
           "write_table"]

TABLE = "labzarr_table"  # the attribute of a table's array: its rows and its directory of columns
_CODECS = ("zstd", 3)  # compressor and level: decoding speed matters more than size
_CHUNK = 1 << 26  # bytes per chunk file
_ALIGN = 8  # every column starts at a multiple of this, so each is an aligned view of the decoded bytes

Array = npt.NDArray[Any]


class Chunked:
    """A column too large to hold whole: its length, dtype and values read back in pieces, in order.

    `pieces` is called once per pass over the column (the writer makes a few: bounds, digest, bytes), each call
    reading the values afresh from wherever they wait (a spill file), so no pass holds more than a piece."""

    __slots__ = ("dtype", "length", "pieces")

    def __init__(self, dtype: npt.DTypeLike, length: int, pieces: Callable[[], Iterator[Array]]) -> None:
        self.dtype, self.length, self.pieces = np.dtype(dtype), length, pieces

    def __len__(self) -> int:
        return self.length


Column = Array | Chunked
"""A table column as `write_table` takes it: a 1-D array, or a `Chunked` one read in pieces."""


def write_table(parent: Location, columns: Mapping[str, Column], *, rows: int,
                attrs: Mapping[str, Any] | None = None) -> str:
    """Write `columns` (each 1-D; a `Chunked` one is read in pieces), with `attrs` in its `TABLE` attribute, as a
    table in the group `parent`; returns its name there. The name is a digest of the content: the same table is
    written once (a rerun that changes nothing writes nothing), and stores written apart from the same rows hold
    the same names. Memory: one chunk of the packed table at a time (`_CHUNK`), never the whole of it."""
    from ..chunks.codecs import chunk_encoder, zarr_codecs
    from . import nodes
    from .written import STORED, StoredFiles

    layout = _Layout(columns)
    table = {**(attrs or {}), "rows": rows, "columns": layout.directory}
    digest = hashlib.sha256(json.dumps(table, sort_keys=True).encode())
    for piece in layout.bytes():
        digest.update(piece)
    name = digest.hexdigest()[:16]
    folder = parent / name
    if _whole(folder):
        return name
    if not (parent / nodes.ZARR_JSON).exists():  # the group of tables: a node of its own, as zarr v3 wants
        nodes.create_group(parent, {})
    folder.remove_tree()  # what a run killed while writing this table left
    size = layout.size
    chunk = max(1, min(size, _CHUNK))
    array = nodes.create_array(folder, shape=(size,), dtype=np.dtype(np.uint8), chunks=(chunk,), shards=None,
                               codecs=zarr_codecs(_CODECS[0], level=_CODECS[1], checksum=True),
                               dimension_names=None, attributes={TABLE: table}, config={"write_empty_chunks": True})
    if size:
        # Whole chunks, one at a time, each encoded alone by the store's own encoder (the bytes zarr writes: a
        # test compares the files) and streamed to its file: no copy of a chunk beyond its buffer and its encoding.
        encode = chunk_encoder(array.metadata.to_dict()["codecs"])
        key = array.metadata.encode_chunk_key
        buffer = np.zeros(chunk, dtype=np.uint8)
        filled = written = 0
        for piece in layout.bytes():
            view = np.frombuffer(piece, dtype=np.uint8)
            while view.size:
                take = min(view.size, chunk - filled)
                buffer[filled:filled + take] = view[:take]
                filled, view = filled + take, view[take:]
                if filled == chunk:
                    _write_chunk(folder / key((written // chunk,)), encode(buffer))
                    written, filled = written + chunk, 0
        if filled:
            buffer[filled:] = 0  # the last chunk is encoded at full size, padded with the fill value, as zarr does
            _write_chunk(folder / key((written // chunk,)), encode(buffer))
    # The record of stored files last: a table's node that has it is whole (`_whole`).
    nodes.update_attributes(folder, array, {STORED: StoredFiles.of_array(array, folder.sizes()).encode()})
    return name


def _write_chunk(file: Location, pieces: Iterable[bytes]) -> None:
    with file.write_stream() as write:
        for piece in pieces:
            write(piece)


class _Layout:
    """Where each column's bytes lie in the packed table: name -> [dtype, offset in bytes, length], columns by
    name, each at an offset aligned for any dtype (`directory`), and the packed bytes read back in pieces."""

    def __init__(self, columns: Mapping[str, Column]) -> None:
        self.columns = dict(sorted(columns.items()))
        self.dtypes: dict[str, np.dtype[Any]] = {}
        self.directory: dict[str, list[Any]] = {}
        at = 0
        for name, data in self.columns.items():
            if isinstance(data, np.ndarray) and data.ndim != 1:
                raise ValueError(f"table column {name!r} has {data.ndim} dimensions; columns are 1-D")
            dtype = _narrowed(data)
            self.dtypes[name] = dtype
            self.directory[name] = [dtype.str, at, len(data)]
            at += len(data) * dtype.itemsize
            at += -at % _ALIGN
        self.size = at

    def bytes(self) -> Iterator[memoryview]:
        """The packed table's bytes, a column piece (or its padding) at a time."""
        for name, data in self.columns.items():
            dtype = self.dtypes[name]
            written = 0
            for piece in _pieces(data):
                values = np.ascontiguousarray(piece, dtype=dtype)
                written += values.nbytes
                yield values.data.cast("B")
            if written % _ALIGN:
                yield memoryview(bytes(-written % _ALIGN))


def _pieces(column: Column) -> Iterator[Array]:
    return column.pieces() if isinstance(column, Chunked) else iter((np.ascontiguousarray(column),))


def _whole(folder: Location) -> bool:
    from .nodes import NodeError, read_node_at
    from .written import STORED

    try:
        return STORED in read_node_at(folder).get("attributes", {})
    except (OSError, NodeError):
        return False


def _narrowed(column: Column) -> np.dtype[Any]:
    """The dtype a column is stored in: a signed integer column in the smallest signed type that holds its
    values (a reader holds every column of an index in memory, and most -- codes, offsets, slots, shapes -- need
    a fraction of 64 bits); any other as it is."""
    dtype = column.dtype
    bounds = [(int(p.min()), int(p.max())) for p in _pieces(column) if p.size] if dtype.kind == "i" else []
    if not bounds:
        return dtype
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    for narrow in (np.int8, np.int16, np.int32):
        info = np.iinfo(narrow)
        if info.min <= lo and hi <= info.max:
            return np.dtype(narrow)
    return dtype


def read_table(transport: Transport, path: str) -> tuple[dict[str, Any], dict[str, Array]]:
    """(the table's `TABLE` attrs, every column) of the table at `path`; raises FileNotFoundError, ValueError
    (not a table, a damaged one: `store.read.ChecksumError` is one)."""
    from ..read import ArrayReader, ChecksumError

    reader = ArrayReader.open(transport, path)
    attrs = reader.attrs.get(TABLE)
    if not isinstance(attrs, Mapping) or not isinstance(attrs.get("columns"), Mapping):
        raise ValueError(f"{path}: not a table (no {TABLE!r} attribute listing its columns)")
    try:
        packed = reader.read()
    except ChecksumError as exc:  # the table is derived data: the message says what, the caller what to do
        raise ValueError(f"{path}: {exc.detail}") from exc
    if packed.dtype != np.uint8 or packed.ndim != 1:
        raise ValueError(f"{path}: a table is one array of bytes, not {packed.dtype} of {packed.ndim} dimensions")
    columns: dict[str, Array] = {}
    for name, (dtype, offset, length) in attrs["columns"].items():
        kind = np.dtype(dtype)
        if offset % _ALIGN or offset + length * kind.itemsize > len(packed):
            raise ValueError(f"{path}: column {name!r} lies outside the table's {len(packed):,} bytes")
        columns[str(name)] = packed[offset:offset + length * kind.itemsize].view(kind)
    return dict(attrs), columns


def read_sliced(transport: Transport, path: str, sliced: Collection[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`read_table`, but the columns named in `sliced` are `TableSlices`, read a slice at a time as they are
    used: a table's large columns (a statistics table's histogram bins) are never in memory whole, and the
    others are read a chunk at a time (the last two chunks decoded are kept)."""
    from ..read import ArrayReader

    reader = ArrayReader.open(transport, path)
    attrs = reader.attrs.get(TABLE)
    if not isinstance(attrs, Mapping) or not isinstance(attrs.get("columns"), Mapping):
        raise ValueError(f"{path}: not a table (no {TABLE!r} attribute listing its columns)")
    if reader.dtype != np.uint8 or reader.ndim != 1:
        raise ValueError(f"{path}: a table is one array of bytes, not {reader.dtype} of {reader.ndim} dimensions")
    packed = _Chunks(reader, path)
    columns: dict[str, Any] = {}
    for name, (dtype, offset, length) in attrs["columns"].items():
        kind = np.dtype(dtype)
        if offset % _ALIGN or offset + length * kind.itemsize > packed.size:
            raise ValueError(f"{path}: column {name!r} lies outside the table's {packed.size:,} bytes")
        column = TableSlices(packed, offset, length, kind)
        columns[str(name)] = column if name in sliced else column[0:length]
    return dict(attrs), columns


class _Chunks:
    """A table's packed bytes, read a chunk at a time through the read path; the last two chunks decoded kept
    (a merge reads two columns, a bin's ordinals and its counts, turn about)."""

    __slots__ = ("reader", "path", "size", "chunk", "_decoded")

    def __init__(self, reader: ArrayReader, path: str) -> None:
        self.reader, self.path = reader, path
        self.size, self.chunk = int(reader.shape[0]), max(1, int(reader.chunks[0]))
        self._decoded: dict[int, npt.NDArray[np.uint8]] = {}

    def read(self, lo: int, hi: int) -> npt.NDArray[np.uint8]:
        """Bytes [lo, hi) of the table."""
        out = np.empty(max(0, hi - lo), dtype=np.uint8)
        for k in range(lo // self.chunk, -(-hi // self.chunk)):
            first = k * self.chunk
            a, b = max(lo, first), min(hi, first + self.chunk)
            out[a - lo:b - lo] = self._chunk(k)[a - first:b - first]
        return out

    def _chunk(self, k: int) -> npt.NDArray[np.uint8]:
        from ..read import ChecksumError

        data = self._decoded.pop(k, None)
        if data is None:
            if len(self._decoded) >= 2:
                self._decoded.pop(next(iter(self._decoded)))
            try:
                data = self.reader.read((slice(k * self.chunk, min(self.size, (k + 1) * self.chunk)),))
            except ChecksumError as exc:  # the table is derived data: the message says what, the caller what to do
                raise ValueError(f"{self.path}: {exc.detail}") from exc
        self._decoded[k] = data  # the most recent last
        return data


class TableSlices:
    """One column of a table read by `read_sliced`: its length, and a contiguous slice of it as an array (read
    when asked for)."""

    __slots__ = ("_packed", "_offset", "_length", "dtype")

    def __init__(self, packed: _Chunks, offset: int, length: int, dtype: np.dtype[Any]) -> None:
        self._packed, self._offset, self._length, self.dtype = packed, offset, length, dtype

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, at: slice, /) -> Array:
        start, stop, step = at.indices(self._length)
        if step != 1:
            raise ValueError("a table column is read in contiguous slices")
        size = self.dtype.itemsize
        return self._packed.read(self._offset + start * size, self._offset + max(start, stop) * size).view(self.dtype)


def remove_tables(folder: Location, *, keep: str) -> None:
    """Remove every table under `folder` but `keep` (a child's name): earlier tables, once no document names
    them."""
    if not folder.is_dir():
        return
    children: list[Location] = [*folder.iterdir()]
    for child in children:
        if child.name != keep and child.is_dir():
            child.remove_tree()


_BLOCK_BYTES = 1 << 18  # value bytes placed per step in `fixed_width`: its index temporaries stay about 2 MB each


def fixed_width(chars: bytes | bytearray | npt.NDArray[np.uint8], ends: Iterable[int] | npt.NDArray[np.int64], *,
                spare: int = 0) -> npt.NDArray[np.bytes_]:
    """The values in `chars` (value i ends at `ends[i]`) as the rows of one fixed-width bytes array, then `spare`
    empty rows: numpy's `S` compares bytewise, UTF-8 bytes sort as their strings do, and a shorter value is padded
    with NULs, as `S` pads it. Every byte is placed at its row and column for a block of whole rows at a time, not by
    a Python loop over the rows, and without a Python object per value."""
    stops = np.asarray(ends, dtype=np.int64)
    starts = np.r_[0, stops[:-1]].astype(np.int64)
    lengths = stops - starts
    width = max(1, int(lengths.max(initial=0)))
    out = np.zeros(len(stops) + spare, dtype=f"S{width}")
    if not len(stops) or not int(stops[-1]):
        return out
    flat = out.view(np.uint8)  # row i's bytes at [i * width, (i + 1) * width)
    source = chars if isinstance(chars, np.ndarray) else np.frombuffer(chars, dtype=np.uint8)
    lo = 0
    while lo < len(stops):
        # Whole rows, as many as hold about _BLOCK_BYTES value bytes (one row at least).
        hi = max(lo + 1, int(np.searchsorted(stops, starts[lo] + _BLOCK_BYTES, side="right")))
        rows = np.arange(lo, hi, dtype=np.int64)
        # Each byte's place in `flat`: its offset in `chars`, shifted by its row's (row * width - row start).
        shift = np.repeat(rows * width - starts[lo:hi], lengths[lo:hi])
        first, last = int(starts[lo]), int(stops[hi - 1])
        flat[np.arange(first, last, dtype=np.int64) + shift] = source[first:last]
        lo = hi
    return out


def encode_strings(prefix: str, values: Iterable[str | None]) -> dict[str, Array]:
    """The columns of a text column (`Strings`), named `prefix` + ``.codes``, ``.chars``, ``.ends``."""
    column = TextColumn()
    for value in values:
        column.add(value)
    return column.columns(prefix)


class TextColumn:
    """A text column (`Strings`) being built a row at a time, starting with `none` Nones: its codes and distinct
    values, not its rows' strings."""

    __slots__ = ("codes", "distinct")

    def __init__(self, none: int = 0) -> None:
        self.codes = array("q", [-1]) * none
        self.distinct: dict[str, int] = {}

    def add(self, value: str | None) -> None:
        self.codes.append(-1 if value is None else self.distinct.setdefault(value, len(self.distinct)))

    def columns(self, prefix: str) -> dict[str, Array]:
        """The column's arrays, named `prefix` + ``.codes``, ``.chars``, ``.ends``."""
        # The values' UTF-8 in one encoding of their concatenation, not a bytes object per value: a column of
        # distinct IDs has one value a row.
        text = "".join(self.distinct)
        raw = text.encode()
        count = len(self.distinct)
        lengths = np.fromiter(map(len, self.distinct) if len(raw) == len(text) else
                              (len(v.encode()) for v in self.distinct), dtype=np.int64, count=count)
        return {f"{prefix}.codes": np.array(self.codes, dtype=np.int64),
                f"{prefix}.chars": np.frombuffer(raw, dtype=np.uint8),
                f"{prefix}.ends": np.cumsum(lengths, dtype=np.int64)}


class RaggedColumn:
    """A list-per-row column (`Ragged`) being built a row at a time; `kind` is the `array` typecode its values
    are held in, `dtype` the column's."""

    __slots__ = ("ends", "values", "dtype")

    def __init__(self, kind: str, dtype: type[np.generic]) -> None:
        self.ends, self.values, self.dtype = array("q"), array(kind), dtype

    def add(self, values: Iterable[Any]) -> None:
        self.values.extend(values)
        self.ends.append(len(self.values))

    def columns(self, prefix: str) -> dict[str, Array]:
        """The column's arrays, named `prefix` + ``.ends``, ``.values``."""
        return {f"{prefix}.ends": np.array(self.ends, dtype=np.int64),
                f"{prefix}.values": np.array(self.values, dtype=self.dtype)}


class Strings:
    """A dictionary-encoded text column: `codes[row]` is the row's value's number (-1: None) among `distinct`."""

    __slots__ = ("codes", "_chars", "_ends", "_distinct")

    def __init__(self, columns: Mapping[str, Array], prefix: str) -> None:
        self.codes: npt.NDArray[np.integer[Any]] = columns[f"{prefix}.codes"]
        self._chars: npt.NDArray[np.uint8] = columns[f"{prefix}.chars"]  # a view of the table: not copied
        self._ends: Array = columns[f"{prefix}.ends"]
        self._distinct: list[str] | None = None
        if len(self.codes) and int(self.codes.max(initial=-1)) >= len(self._ends):
            raise ValueError(f"text column {prefix!r}: a code beyond its {len(self._ends)} values")

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def chars(self) -> npt.NDArray[np.uint8]:
        """Every distinct value's UTF-8 bytes, one after another."""
        return self._chars

    @property
    def ends(self) -> Array:
        """The end offset in `chars` of each distinct value."""
        return self._ends

    def value(self, code: int) -> str | None:
        """The text of value number `code` (None for -1)."""
        if code < 0:
            return None
        if self._distinct is not None:
            return self._distinct[code]
        start = int(self._ends[code - 1]) if code else 0
        return self._chars[start:int(self._ends[code])].tobytes().decode()

    def __getitem__(self, row: int) -> str | None:
        return self.value(int(self.codes[row]))

    @property
    def distinct(self) -> list[str]:
        """Every distinct value, by code (decoded once, on first use)."""
        if self._distinct is None:
            chars = self._chars.tobytes()
            starts = [0, *self._ends[:-1].tolist()]
            self._distinct = [chars[s:e].decode() for s, e in zip(starts, self._ends.tolist())]
        return self._distinct

    def code_of(self, value: str) -> int:
        """The code of `value` (-2 when the column never holds it: no row matches)."""
        try:
            return self.distinct.index(value)
        except ValueError:
            return -2

    def strings(self, rows: npt.NDArray[np.int64] | None = None) -> list[str | None]:
        """The value of each of `rows` (default every row)."""
        codes = self.codes if rows is None else self.codes[rows]
        if len(self._ends) * 4 < len(codes) or self._distinct is not None:
            table: list[str | None] = [*self.distinct, None]  # code -1 picks the None at the end
            return [table[c] for c in codes.tolist()]
        return [self.value(c) for c in codes.tolist()]


class Ragged:
    """A list of values per row: row `i`'s are ``values[ends[i - 1]:ends[i]]``."""

    __slots__ = ("ends", "values")

    def __init__(self, columns: Mapping[str, Array], prefix: str) -> None:
        self.ends: npt.NDArray[np.int64] = columns[f"{prefix}.ends"]
        self.values: Array = columns[f"{prefix}.values"]
        if len(self.ends) and (int(self.ends[-1]) != len(self.values) or bool(np.any(np.diff(self.ends) < 0))):
            raise ValueError(f"list column {prefix!r}: its offsets do not fit its {len(self.values)} values")

    def __len__(self) -> int:
        return len(self.ends)

    def bounds(self, row: int) -> tuple[int, int]:
        """[start, stop) of row `row`'s values."""
        return (int(self.ends[row - 1]) if row else 0), int(self.ends[row])

    def __getitem__(self, row: int) -> Array:
        start, stop = self.bounds(row)
        return self.values[start:stop]

    def positions(self, rows: npt.NDArray[np.integer[Any]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(where in `values` each of `rows`' values lies, row after row; how many each row has)."""
        return flat_positions(self.ends, rows)

    def take(self, rows: npt.NDArray[np.integer[Any]], values: Array | None = None) -> list[list[Any]]:
        """The values of each of `rows` (or of `values`, a column of the same layout), as Python lists, gathered
        in one pass."""
        at, lengths = self.positions(rows)
        flat = (self.values if values is None else values)[at].tolist()
        bounds = np.cumsum(lengths).tolist()
        return [flat[a:b] for a, b in zip([0, *bounds[:-1]], bounds)]

    def lengths(self) -> npt.NDArray[np.int64]:
        """How many values each row has."""
        ends = self.ends.astype(np.int64)
        out: npt.NDArray[np.int64] = ends.copy()
        out[1:] -= ends[:-1]
        return out


def flat_positions(ends: Array, rows: npt.NDArray[np.integer[Any]]) -> tuple[npt.NDArray[np.int64],
                                                                             npt.NDArray[np.int64]]:
    """For a list per row whose row `i` ends at `ends[i]`: (the positions of `rows`' values, row after row; how
    many each row has), gathered without a Python loop."""
    e = np.asarray(ends, dtype=np.int64)
    r = np.asarray(rows, dtype=np.int64)
    stops = e[r]
    starts = np.where(r > 0, e[np.maximum(r - 1, 0)], 0)
    lengths = stops - starts
    at = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    return at.astype(np.int64), lengths
