"""The one read path for stored arrays: regions of zarr v3 arrays, in any process, without zarr-python.

Why a hand-written reader: the benchmark (`make bench`, loaders section) shows zarr-python reading a random
patch of a sharded store several times slower than a direct read (the shard index, then only the touched
chunks, decoded with numcodecs), and tensorstore, which is as fast, cannot be used after a fork. This module
does the direct read for the layouts labzarr writes (`Layout` says which); it is tested against zarr-python,
byte for byte (tests/store/test_reader.py), and any other array is read by zarr-python itself.

Invariants:
- A region is read as zarr-python reads it: same values, shape and dtype. A chunk or shard reads as the fill
  value only where the array's record of stored files (`format/written.py`) says it was never written (and an
  inner chunk of a shard where the shard's index says so); an array without a record (not sealed by labzarr)
  reads an absent file as zarr does, after one `UncheckedStoreWarning` per store.
- Damage is never returned as voxels: a file the record sizes that is missing, shorter or longer, a checksum
  mismatch or an undecodable chunk raises `ChecksumError`, which names the store, the array, the items whose
  voxels lie there and the chunk. zarr-python's path checks the same record before each read.
- Per process: nothing opened before a fork (descriptors, filesystems, zarr handles) is used after it, and a
  pickled `StoreReader` carries only its configuration. No threads or event loops are started here: a batch of
  reads (`StoreReader.read_many`) runs one task per file read (a chunk file, or a shard's touched chunks:
  fetch, decode, place) through the caller's `map`, which may be a thread pool's; the tasks come from an
  iterator that plans the regions, each file's task yielded once the last region touching it is planned, so
  each stored chunk is decoded once however many regions share it. The arrays `_batched.route` admits (a local
  folder's sharded blosc + crc32c arrays) are read instead by compiled kernels holding no GIL, each task of the
  caller's `map` one thread's run over the batch's chunks (`_batched.py` says why, and how damage still raises
  this path's errors).
- A shard's index is fetched once per reader and kept; then each read fetches only the byte ranges of the
  chunks it touches (contiguous ranges merged into one request), never a whole shard. A reader therefore sees a
  shard as it was when first touched; open a new reader to see a rewritten store.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from ._batched import Compiled, Placement, route
from ._batched import read as read_compiled
from .chunks.codecs import ChunkDamage, chunk_decoder
from .chunks.shard import ABSENT, decode_index
from .format.layout import Layout, UnsupportedLayout
from .format.nodes import NodeError, node_key, parse_node
from .format.written import STORED, StoredFiles
from .location import Transport, open_transport, zarr_store_for

if TYPE_CHECKING:
    import zarr

__all__ = ["ArrayReader", "Backend", "ChecksumError", "Mapper", "Selection", "StoreReader", "UncheckedStoreWarning",
           "UnsupportedLayout"]

log = logging.getLogger(__name__)

Selection: TypeAlias = "int | slice | EllipsisType | tuple[int | slice | EllipsisType, ...]"
Backend = Literal["auto", "labzarr", "zarr"]

_NAMED = 5  # items named in a message; more are counted


class ChecksumError(Exception):
    """Stored bytes of an array are damaged or missing: a chunk or shard file failed its checksum, did not decode,
    is shorter or longer than recorded, or is gone although the store recorded it as written.

    `where` is the store, `array` the array path, `items` the items whose voxels lie in the damaged file (one for
    a volume, those of its slots for a stack of 2D images), `chunk` the chunk's grid coordinates (None for a
    whole shard or its index), `shard` the shard's key when the array is sharded.

    It takes its message alone, too: a DataLoader re-raises a worker's exception as `type(message)`, so the
    training loop catches the same class as the main process would (the fields are then None).
    """

    def __init__(self, message: str, *, where: str | None = None, array: str | None = None,
                 items: tuple[str, ...] = (), chunk: tuple[int, ...] | None = None, shard: str | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.where, self.array, self.items = where, array, items
        self.chunk, self.shard, self.detail = chunk, shard, detail

    @classmethod
    def at(cls, where: str, array: str, items: Sequence[str], chunk: tuple[int, ...] | None, shard: str | None,
           detail: str) -> ChecksumError:
        """The error for damage at `chunk` (None: the shard as a whole) of `array`, inside `shard` if sharded."""
        if chunk is not None:
            what = f"chunk {chunk}" + (f" in shard {shard!r}" if shard is not None else "")
        else:
            what = f"shard {shard!r}" if shard is not None else "its metadata"
        named = ", ".join(items[:_NAMED]) + (f" and {len(items) - _NAMED} more" if len(items) > _NAMED else "")
        of_item = "" if not items else f" (item {named})" if len(items) == 1 else f" (items {named})"
        return cls(f"{where}: array {array!r}{of_item}: {what}: {detail}; the stored bytes are damaged: "
                   f"`labzarr verify --repair SPEC` converts the damaged items again",
                   where=where, array=array, items=tuple(items), chunk=chunk, shard=shard, detail=detail)

    @property
    def item(self) -> str | None:
        """The one item the damage is in (None when it spans several, or is not known)."""
        return self.items[0] if len(self.items) == 1 else None

    def __reduce__(self) -> tuple[Any, ...]:
        # Crosses process boundaries whole (a dask worker, a pickled result), fields included.
        return (_rebuild_checksum_error, (str(self), self.where, self.array, self.items, self.chunk, self.shard,
                                          self.detail))


def _rebuild_checksum_error(message: str, where: str | None, array: str | None, items: tuple[str, ...],
                            chunk: tuple[int, ...] | None, shard: str | None, detail: str | None) -> ChecksumError:
    return ChecksumError(message, where=where, array=array, items=items, chunk=chunk, shard=shard, detail=detail)


class UncheckedStoreWarning(UserWarning):
    """An array without labzarr's record of its stored files: a lost file reads as fill value, undetected."""


@dataclass(frozen=True, slots=True)
class _Region:
    """A selection resolved against a shape: the [start, stop) box read, and the result's shape."""

    start: tuple[int, ...]
    stop: tuple[int, ...]
    shape: tuple[int, ...]  # the result's shape: the box less the axes an int picked
    picked: tuple[bool, ...]  # per axis: an int picked it (the axis is dropped)


def _region(selection: Selection, shape: tuple[int, ...]) -> _Region:
    """Resolve `selection` (ints, step-1 slices, at most one Ellipsis) as numpy does; raises IndexError/ValueError."""
    items = selection if isinstance(selection, tuple) else (selection,)
    if any(s is Ellipsis for s in items):
        at = items.index(Ellipsis)
        if Ellipsis in items[at + 1:]:
            raise IndexError("an index can only have a single ellipsis ('...')")
        items = items[:at] + (slice(None),) * (len(shape) - len(items) + 1) + items[at + 1:]
    if len(items) > len(shape):
        raise IndexError(f"too many indices: array is {len(shape)}-dimensional, but {len(items)} were indexed")
    start, stop, out, picked = [], [], [], []
    for axis, n in enumerate(shape):
        s = items[axis] if axis < len(items) else slice(None)
        if isinstance(s, slice):
            lo, hi, step = s.indices(n)
            if step != 1:
                raise ValueError(f"axis {axis}: slice step {s.step}; only step 1 is read")
            hi = max(lo, hi)
            start.append(lo)
            stop.append(hi)
            out.append(hi - lo)
            picked.append(False)
        elif isinstance(s, (bool, np.bool_)):
            raise IndexError(f"axis {axis}: a boolean index; only ints and slices are read")
        elif s is Ellipsis:  # expanded above; a second one was refused there
            raise IndexError("an index can only have a single ellipsis ('...')")
        else:
            i = operator.index(s)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            i += n if i < 0 else 0
            start.append(i)
            stop.append(i + 1)
            picked.append(True)
    return _Region(tuple(start), tuple(stop), tuple(out), tuple(picked))


# One touched chunk along one axis: (chunk index, shard index, local index x local stride, in-chunk slice,
# out slice). A chunk's whole description is the product of one such entry per axis.
_AxisHit = tuple[int, int, int, slice, slice]


_Part = tuple[npt.NDArray[Any], tuple[slice, ...], tuple[slice, ...]]  # (box, where in it, which part of the chunk)
Mapper = Callable[[Callable[[Any], None], Iterable[Any]], Iterable[None]]
"""How a batch runs its reads: the builtin `map`, or a thread pool's that pulls the tasks (an iterator that plans
the next regions as it goes) under a lock: reads, decodes and copies are `pread`, numcodecs and numpy, which
release the GIL, or a compiled kernel's run that holds none (`_batched.py`). A mapper may also list the tasks
first (each is then run in turn)."""


@dataclass(slots=True)
class _Chunk:
    """One stored chunk that a batch of regions touches, with every region part it fills."""

    direct: _Direct
    coords: tuple[int, ...]
    key: str | None  # the shard file's key; None: the chunk is a file of its own
    shard: tuple[int, ...] | None  # the shard's grid position
    span: tuple[int, int]  # (offset, nbytes) in the shard
    parts: list[_Part]
    data: bytes | memoryview | None = None


class _Batch:
    """The stored chunks a set of region reads touches: each fetched once (contiguous chunks of a shard in one
    range) and decoded once, then copied into every region that needs it. Chunks are grouped by the file they
    are stored in (a shard, or a chunk file): a group is one read task."""

    def __init__(self) -> None:
        self._files: dict[tuple[int, tuple[int, ...]], dict[tuple[int, ...], _Chunk]] = {}

    def file(self, direct: _Direct, cell: tuple[int, ...]) -> dict[tuple[int, ...], _Chunk]:
        """The chunks added so far of the file at grid position `cell` of `direct`'s array, by their coordinates
        (the planner adds to it directly: one lookup a file, not one a chunk)."""
        group = self._files.get((id(direct), cell))
        if group is None:
            group = self._files[(id(direct), cell)] = {}
        return group

    def take(self, file: tuple[int, tuple[int, ...]]) -> list[_Chunk] | None:
        """The chunks of `file` ((id of its array's reader, its grid position)) added so far, now handed out."""
        group = self._files.pop(file, None)
        return list(group.values()) if group else None

    def rest(self) -> list[list[_Chunk]]:
        """Every group not handed out yet, now handed out."""
        groups = [list(group.values()) for group in self._files.values() if group]
        self._files.clear()
        return groups


def _tasks(plans: Sequence[tuple[ArrayReader, Selection, _Region, npt.NDArray[Any]]],
           due: Mapping[int, Sequence[tuple[int, tuple[int, ...]]]]) -> Iterator[list[_Chunk]]:
    """The read tasks of a batch, one per file, each as soon as the last region needing that file is planned:
    a pool's threads read the first files while the later regions are planned (each chunk still read once)."""
    batch = _Batch()
    for n, (array, selection, region, dest) in enumerate(plans):
        array._plan(selection, region, dest, batch)
        for file in due.get(n, ()):
            group = batch.take(file)
            if group is not None:
                yield group
    yield from batch.rest()


def _read(chunks: list[_Chunk]) -> None:
    """Fetch the stored bytes of one chunk file, or of the chunks of one shard, then decode and place each (the
    regions' boxes are disjoint: safe from several threads). The Python here runs once a chunk between the
    GIL-free calls (pread, crc32c, blosc, numpy's copies), so it is kept to a few lines."""
    first = chunks[0]
    direct = first.direct
    if first.key is None:
        direct.fetch_file(first)
    else:
        direct.fetch_shard(first.key, chunks)
    decode, shape, dtype = direct.decoder, direct.layout.chunks, direct.layout.stored_dtype
    for chunk in chunks:
        data = chunk.data
        if data is None:
            continue
        try:
            decoded: npt.NDArray[Any] = np.ndarray(shape, dtype, decode(data))
        except ChunkDamage as exc:
            raise direct.corrupt(chunk.coords, chunk.key, str(exc), chunk.shard) from exc
        for box, target, inner in chunk.parts:
            box[target] = decoded[inner]


def _read_python(plans: Sequence[tuple[ArrayReader, Selection, _Region, npt.NDArray[Any]]], mapper: Mapper) -> None:
    """The regions of `plans` read by the Python path: one task per file, through `mapper`."""
    last: dict[tuple[int, tuple[int, ...]], int] = {}  # each file's last request: its chunks are then all known
    for n, (array, _, region, _) in enumerate(plans):
        if array._direct is not None:
            last.update((file, n) for file in array._direct.files(region))
    due: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    for file, n in last.items():
        due.setdefault(n, []).append(file)
    for _ in mapper(_read, _tasks(plans, due)):
        pass  # consumed for the errors: a read or decode that raised re-raises here, in the caller's thread


class _Direct:
    """The labzarr read path for one array: shard indexes, byte ranges, numcodecs, numpy.

    With the array's record of stored files (`written.StoredFiles`), a file the record sizes must be there at
    that size; only a file recorded as never written reads as fill value. Without one (an array labzarr did not
    seal), an absent file reads as fill value, as zarr reads it.
    """

    __slots__ = ("transport", "path", "layout", "stored", "slots", "decoder", "batched", "_prefix", "_indexes",
                 "_item", "_strides")

    def __init__(self, transport: Transport, path: str, layout: Layout, slots: Mapping[int, str] | None = None) -> None:
        self.transport, self.path, self.layout = transport, path, layout
        self.slots = slots  # a stack's item IDs by slot (axis 0), to name the items of a damaged file
        self._prefix = f"{path}/" if path else ""
        self._indexes: dict[tuple[int, ...], list[list[int]] | None] = {}
        item = layout.attributes.get("item_id")
        self._item = None if item is None else str(item)
        per = layout.chunks_per_shard
        self._strides = tuple(math.prod(per[a + 1:]) for a in range(len(per)))
        self.decoder = chunk_decoder(layout.codecs, math.prod(layout.chunks) * layout.stored_dtype.itemsize)
        self.stored = self._record()
        why = route(self)
        if why is not None:
            log.debug("%s: array %r: batches read by the Python path: %s", transport.where, path, why)
        self.batched = None if why is not None else Compiled(self)

    def _record(self) -> StoredFiles | None:
        value = self.layout.attributes.get(STORED)
        if value is None:
            # Once per store (the message names the store only): every array of an old store lacks it.
            warnings.warn(f"{self.transport.where}: arrays without a record of their stored files (written before "
                          "labzarr's store format 3, or by another tool): a lost chunk file reads as the fill value, "
                          "undetected; convert the delivery again to have it checked",
                          UncheckedStoreWarning, stacklevel=5)
            return None
        try:
            record = StoredFiles.decode(value)
        except ValueError as exc:
            raise self.corrupt(None, None, f"its record of stored files is unreadable: {exc}") from exc
        lay = self.layout
        grid = tuple(-(-n // g) for n, g in zip(lay.shape, lay.grid))
        if record.grid != grid:
            raise self.corrupt(None, None, f"its record of stored files has a grid of {list(record.grid)}, the "
                                           f"array {list(grid)}")
        return record

    def read(self, region: _Region) -> npt.NDArray[Any]:
        out = np.empty(region.shape, dtype=self.layout.dtype)
        batch = _Batch()
        self.plan(region, out, batch)
        for group in batch.rest():
            _read(group)
        return out

    def files(self, region: _Region) -> Iterable[tuple[int, tuple[int, ...]]]:
        """The files (as `_Batch` groups them) that `region` may touch: every grid cell its box meets."""
        ranges = [range(lo // g, (hi - 1) // g + 1) for lo, hi, g in zip(region.start, region.stop, self.layout.grid)]
        return ((id(self), cell) for cell in itertools.product(*ranges))

    def plan(self, region: _Region, out: npt.NDArray[Any], batch: _Batch) -> None:
        """Put `region`'s voxels into `out` (of the region's shape, any strides): fill values now, stored chunks
        added to `batch`, which fetches and decodes each chunk once for every region sharing it. Reads shard
        indexes (cached); raises ChecksumError for a damaged one."""
        lay = self.layout
        if out.size == 0:
            return
        box = out[tuple(None if one else slice(None) for one in region.picked)]  # a view: int axes kept as 1
        axes = [self._axis_hits(a, lo, hi) for a, (lo, hi) in enumerate(zip(region.start, region.stop))]
        # Each field of every touched chunk, as products of one field's values per axis: built in C, in step.
        fields = [itertools.product(*([h[f] for h in hits] for hits in axes)) for f in range(5)]
        if not lay.sharded:
            for coords, _, _, inner, target in zip(*fields):
                if self.stored is not None and self.stored.size(coords) == 0:
                    box[target] = lay.fill_value
                    continue
                group = batch.file(self, coords)
                chunk = group.get(coords)
                if chunk is None:
                    chunk = group[coords] = _Chunk(self, coords, None, None, (0, 0), [])
                chunk.parts.append((box, target, inner))
            return
        # A region meets few shards: each one's key, index and group of chunks looked up once.
        shards: dict[tuple[int, ...], tuple[str, list[list[int]] | None, dict[tuple[int, ...], _Chunk]]] = {}
        for coords, shard, local, inner, target in zip(*fields):
            known = shards.get(shard)
            if known is None:
                key = self._prefix + lay.key(shard)
                known = shards[shard] = (key, self._index(key, shard), batch.file(self, shard))
            key, index, group = known
            offset, nbytes = (ABSENT, 0) if index is None else index[sum(local)]
            if offset == ABSENT:
                box[target] = lay.fill_value
                continue
            chunk = group.get(coords)
            if chunk is None:
                chunk = group[coords] = _Chunk(self, coords, key, shard, (offset, nbytes), [])
            chunk.parts.append((box, target, inner))

    def _axis_hits(self, axis: int, lo: int, hi: int) -> list[_AxisHit]:
        c = self.layout.chunks[axis]
        per = self.layout.chunks_per_shard[axis] if self.layout.sharded else 1
        stride = self._strides[axis] if self.layout.sharded else 0
        hits = []
        for i in range(lo // c, (hi - 1) // c + 1):
            a, b = max(lo, i * c), min(hi, (i + 1) * c)
            hits.append((i, i // per, (i % per) * stride, slice(a - i * c, b - i * c), slice(a - lo, b - lo)))
        return hits

    def fetch_file(self, chunk: _Chunk) -> None:
        """The stored bytes of an unsharded chunk into `chunk.data`; a chunk file never written (no record) is
        filled in its regions instead."""
        coords = chunk.coords
        recorded = None if self.stored is None else self.stored.size(coords)
        try:
            data = self.transport.read(self._prefix + self.layout.key(coords))
        except FileNotFoundError:
            if recorded is None:
                for box, target, _ in chunk.parts:
                    box[target] = self.layout.fill_value
                return
            raise self.corrupt(coords, None, f"the file {self.layout.key(coords)!r} is missing, where the store "
                                             f"recorded {recorded:,} B written") from None
        if recorded is not None and len(data) != recorded:
            raise self.corrupt(coords, None, f"the file holds {len(data):,} B, the store recorded {recorded:,} B")
        chunk.data = data

    def fetch_shard(self, key: str, chunks: list[_Chunk]) -> None:
        """The stored bytes of `chunks`, all in the shard keyed `key`, into each one's `data`: chunks contiguous in
        the shard are read as one range."""
        chunks.sort(key=lambda c: c.span[0])
        runs: list[list[int]] = []  # [start, length, first, last] over `chunks`
        for n, chunk in enumerate(chunks):
            offset, nbytes = chunk.span
            if runs and runs[-1][0] + runs[-1][1] == offset:
                runs[-1][1] += nbytes
                runs[-1][3] = n
            else:
                runs.append([offset, nbytes, n, n])
        shard = chunks[0].shard
        try:
            blobs = self.transport.read_ranges(key, [(r[0], r[1]) for r in runs])
        except (EOFError, FileNotFoundError) as exc:  # the index points past the shard's end, or the shard went
            raise self.corrupt(chunks[0].coords, key, f"cannot read it: {exc}", shard) from exc
        for (start, length, first, last), blob in zip(runs, blobs):
            if len(blob) != length:
                raise self.corrupt(chunks[first].coords, key,
                                   f"{len(blob):,} B read where the shard index says {length:,} B", shard)
            view = memoryview(blob)
            for chunk in chunks[first:last + 1]:
                chunk.data = view[chunk.span[0] - start:chunk.span[0] - start + chunk.span[1]]

    def _index(self, key: str, shard: tuple[int, ...]) -> list[list[int]] | None:
        """The (offset, nbytes) of each inner chunk of `shard` (C order), None for a shard never written; cached.

        With a record, the index is read at the offset the recorded size puts it at, so a truncated shard is a
        short read here rather than an index read from the middle of the file."""
        if shard in self._indexes:
            return self._indexes[shard]
        lay = self.layout
        size = lay.index_nbytes
        recorded = None if self.stored is None else self.stored.size(shard)
        if recorded == 0:
            self._indexes[shard] = None
            return None
        if recorded is not None and recorded < size:
            raise self.corrupt(None, key, f"the store recorded {recorded:,} B, less than its {size:,} B index",
                               shard)
        if lay.index_location == "start":
            where: tuple[int, int] = (0, size)
        else:
            where = (-size, 0) if recorded is None else (recorded - size, size)
        try:
            (data,) = self.transport.read_ranges(key, [where])
        except FileNotFoundError:
            if recorded is None:
                self._indexes[shard] = None
                return None
            raise self.corrupt(None, key, f"the file is missing, where the store recorded {recorded:,} B written",
                               shard) from None
        except EOFError as exc:
            raise self.corrupt(None, key, f"shorter than recorded: {exc}", shard) from exc
        if len(data) != size:
            raise self.corrupt(None, key, f"{len(data):,} B where the index is {size:,} B", shard)
        try:
            index = decode_index(data, crc=lay.index_crc32c)
        except ChunkDamage as exc:
            raise self.corrupt(None, key, f"its index: {exc}", shard) from exc
        if recorded is not None and any(o != ABSENT and o + n > recorded for o, n in index):
            raise self.corrupt(None, key, f"its index points past the {recorded:,} B the store recorded", shard)
        self._indexes[shard] = index
        return index

    def corrupt(self, chunk: tuple[int, ...] | None, shard: str | None, detail: str,
                shard_at: tuple[int, ...] | None = None) -> ChecksumError:
        """The error for damage at `chunk` (None: the whole file) in the shard keyed `shard` (at grid position
        `shard_at`), naming the items whose voxels lie there."""
        return ChecksumError.at(self.transport.where, self.path, self._items(chunk, shard_at), chunk, shard, detail)

    def _items(self, chunk: tuple[int, ...] | None, shard_at: tuple[int, ...] | None) -> tuple[str, ...]:
        if self._item is not None:
            return (self._item,)
        if chunk is not None:
            return _slot_items(self.slots, chunk[0], self.layout.chunks[0])
        if shard_at is not None:
            return _slot_items(self.slots, shard_at[0], self.layout.grid[0])
        return ()


def _slot_items(slots: Mapping[int, str] | None, cell: int, per_cell: int) -> tuple[str, ...]:
    """The items of a stack whose slots lie in grid cell `cell` of `per_cell` slots along axis 0."""
    if not slots:
        return ()
    return tuple(slots[s] for s in range(cell * per_cell, (cell + 1) * per_cell) if s in slots)


class _Presence:
    """For an array zarr-python reads: the storage files a region touches, checked against the array's record."""

    def __init__(self, transport: Transport, array: zarr.Array[Any], record: StoredFiles,
                 slots: Mapping[int, str] | None) -> None:
        self.transport, self.record, self.slots = transport, record, slots
        self.path = array.path.strip("/")
        self.unit = tuple(array.shards or array.chunks)
        self.key = array.metadata.encode_chunk_key
        item = array.attrs.get("item_id")
        self.items: tuple[str, ...] = () if item is None else (str(item),)

    def touched(self, region: _Region) -> None:
        ranges = [range(lo // u, (hi - 1) // u + 1) for lo, hi, u in zip(region.start, region.stop, self.unit)]
        if any(len(r) == 0 for r in ranges):
            return
        for coords in itertools.product(*ranges):
            recorded = self.record.size(coords)
            if not recorded:
                continue
            key = f"{self.path}/{self.key(coords)}" if self.path else self.key(coords)
            try:
                size = self.transport.size(key)
            except FileNotFoundError:
                raise self.error(coords, f"the file {self.key(coords)!r} is missing, where the store recorded "
                                         f"{recorded:,} B written") from None
            if size != recorded:
                raise self.error(coords, f"the file holds {size:,} B, the store recorded {recorded:,} B")

    def error(self, coords: tuple[int, ...] | None, detail: str) -> ChecksumError:
        items = self.items
        if not items and coords is not None:
            items = _slot_items(self.slots, coords[0], self.unit[0])
        shard = None if coords is None else self.key(coords)
        return ChecksumError.at(self.transport.where, self.path, items, None, shard, detail)


class ArrayReader:
    """One stored array, read by labzarr's own path (`ArrayReader.open`) or by zarr-python (`from_zarr`).

    `read(selection)` (also `reader[selection]`) returns what numpy basic indexing with the same ints and step-1
    slices returns from the whole array: ints drop their axis, slices are clamped, missing trailing entries mean
    whole axes.
    """

    __slots__ = ("_direct", "_zarr", "_check")

    def __init__(self, direct: _Direct | None, array: zarr.Array[Any] | None,
                 check: _Presence | None = None) -> None:
        self._direct, self._zarr, self._check = direct, array, check

    @classmethod
    def open(cls, transport: Transport, path: str, *, slots: Mapping[int, str] | None = None) -> ArrayReader:
        """labzarr's reader of the array at `path` (`slots`: a stack's item IDs by slot, for messages); raises
        FileNotFoundError (no `zarr.json`), UnsupportedLayout, ChecksumError (a damaged record of stored files)."""
        path = path.strip("/")
        key = node_key(path)
        try:
            doc = parse_node(transport.read(key), key)
        except NodeError as exc:
            raise UnsupportedLayout(str(exc)) from exc
        return cls(_Direct(transport, path, Layout.parse(doc), slots), None)

    @classmethod
    def from_zarr(cls, array: zarr.Array[Any], *, transport: Transport | None = None,
                  slots: Mapping[int, str] | None = None) -> ArrayReader:
        """A reader that serves `array` through zarr-python (the fallback). With `transport` (the same store's),
        an array with a record of its stored files has each file a read touches checked present at its recorded
        size first, and zarr's decoding errors raised as ChecksumError: zarr alone reads a lost file as fill."""
        value = array.attrs.get(STORED)
        check = None
        if transport is not None and value is not None:
            check = _Presence(transport, array, StoredFiles.decode(value), slots)
        return cls(None, array, check)

    @property
    def path_used(self) -> Literal["labzarr", "zarr"]:
        """Which path reads this array."""
        return "labzarr" if self._direct is not None else "zarr"

    @property
    def layout(self) -> Layout | None:
        """The layout labzarr's path reads (None under zarr-python)."""
        return None if self._direct is None else self._direct.layout

    @property
    def shape(self) -> tuple[int, ...]:
        return self._direct.layout.shape if self._direct is not None else tuple(self._zarr_array.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._direct.layout.dtype if self._direct is not None else np.dtype(self._zarr_array.dtype)

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self._direct.layout.attributes if self._direct is not None else dict(self._zarr_array.attrs)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of one chunk (the inner chunk of a shard)."""
        return self._direct.layout.chunks if self._direct is not None else tuple(self._zarr_array.chunks)

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shape of one shard, None when the array is not sharded."""
        if self._direct is not None:
            return self._direct.layout.grid if self._direct.layout.sharded else None
        shards = self._zarr_array.shards
        return None if shards is None else tuple(shards)

    @property
    def _zarr_array(self) -> zarr.Array[Any]:
        assert self._zarr is not None
        return self._zarr

    def read(self, selection: Selection = ()) -> npt.NDArray[Any]:
        """The region `selection` picks (see the class docstring); raises ChecksumError on damaged bytes."""
        region = _region(selection, self.shape)
        if self._direct is not None:
            return self._direct.read(region)
        sel = tuple(lo if one else slice(lo, hi) for lo, hi, one in zip(region.start, region.stop, region.picked))
        if self._check is None:
            return np.asarray(self._zarr_array[sel]).reshape(region.shape)
        self._check.touched(region)
        try:
            return np.asarray(self._zarr_array[sel]).reshape(region.shape)
        except Exception as exc:  # zarr's codecs raise their own types; with a record every one of them is damage
            raise self._check.error(None, f"zarr cannot read it: {type(exc).__name__}: {exc}") from exc

    def __getitem__(self, selection: Selection) -> npt.NDArray[Any]:
        return self.read(selection)

    def _prepare(self, selection: Selection, out: npt.NDArray[Any] | None) -> tuple[_Region, npt.NDArray[Any]]:
        """The region `selection` picks, and `out` (or a new array) to read it into."""
        region = _region(selection, self.shape)
        if out is None:
            out = np.empty(region.shape, dtype=self.dtype)
        elif out.shape != region.shape or out.dtype != self.dtype:
            raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; the region read is {region.shape} "
                             f"of {self.dtype}")
        return region, out

    def _plan(self, selection: Selection, region: _Region, out: npt.NDArray[Any], batch: _Batch) -> None:
        """Add `region`'s stored chunks to `batch` (fill values written now); zarr-python's path reads it now."""
        if self._direct is not None:
            self._direct.plan(region, out, batch)
        else:
            out[...] = self.read(selection)

    def __getstate__(self) -> dict[str, Any]:
        # Only labzarr's path pickles (its transport drops its handles); zarr-python's is reopened by a StoreReader.
        if self._direct is None:
            raise TypeError("an ArrayReader on zarr-python does not pickle; pickle its StoreReader")
        return {"transport": self._direct.transport, "path": self._direct.path, "layout": self._direct.layout,
                "slots": self._direct.slots}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._direct = _Direct(state["transport"], state["path"], state["layout"], state["slots"])
        self._zarr, self._check = None, None


class StoreReader:
    """Arrays of one store, read in whichever process holds this object (see the module invariants).

    `backend`: "labzarr" reads every array with labzarr's own path (ValueError for a layout it does not
    handle), "zarr" reads every array with zarr-python, "auto" uses labzarr's path where it can and zarr-python
    elsewhere (logged at debug). At most `max_open` arrays are kept open, least recently used dropped first.
    `slots`: the item IDs of each stack array by slot (from the store's index), so an error in a stack names
    the items whose images lie in the damaged file.
    """

    def __init__(self, store: Path | str, *, storage_options: Mapping[str, Any] | None = None,
                 backend: Backend = "auto", max_open: int = 64,
                 slots: Mapping[str, Mapping[int, str]] | None = None) -> None:
        if backend not in ("auto", "labzarr", "zarr"):
            raise ValueError(f"backend {backend!r}: one of 'auto', 'labzarr', 'zarr'")
        if max_open < 1:
            raise ValueError(f"max_open {max_open}: at least 1")
        self._store, self._options = store, dict(storage_options or {})
        self._backend: Backend = backend
        self._max_open = max_open
        self._slots = slots or {}
        self._forget()

    def _forget(self) -> None:
        self._pid = os.getpid()
        self._transport: Transport | None = None
        self._zarr_store: Any = None
        self._open: OrderedDict[str, ArrayReader] = OrderedDict()

    def array(self, name: str) -> ArrayReader:
        """The open array `name` (a path in the store), opened on first use in this process."""
        if self._pid != os.getpid():  # a new process: the parent's handles are not ours
            self._forget()
        source = self._open.get(name)
        if source is not None:
            self._open.move_to_end(name)
            return source
        source = self._load(name)
        self._open[name] = source
        if len(self._open) > self._max_open:
            self._open.popitem(last=False)
        return source

    def _load(self, name: str) -> ArrayReader:
        if self._transport is None:
            self._transport = open_transport(self._store, self._options)
        if self._backend != "zarr":
            try:
                return ArrayReader.open(self._transport, name, slots=self._slots.get(name.strip("/")))
            except (UnsupportedLayout, FileNotFoundError) as exc:
                if self._backend == "labzarr":
                    if isinstance(exc, FileNotFoundError):
                        raise FileNotFoundError(f"{self._transport.where}: no array {name!r} ({exc})") from exc
                    raise ValueError(f"{self._transport.where}: array {name!r}: {exc}; the labzarr reader does not "
                                     f"handle this layout (backend='auto' reads it with zarr-python)") from exc
                log.debug("%s: array %r read with zarr-python: %s", self._transport.where, name, exc)
        import zarr  # imported here only: a process reading labzarr's layouts (a DataLoader worker) does without it

        if self._zarr_store is None:
            self._zarr_store = zarr_store_for(self._store, self._options)
        array = zarr.open_array(self._zarr_store, path=name, mode="r")
        return ArrayReader.from_zarr(array, transport=self._transport, slots=self._slots.get(name.strip("/")))

    def read(self, name: str, selection: Selection = ()) -> npt.NDArray[Any]:
        """The region `selection` of array `name` (rules of `ArrayReader.read`)."""
        return self.array(name).read(selection)

    def read_many(self, requests: Sequence[tuple[str, Selection]], *,
                  out: Sequence[npt.NDArray[Any] | None] | None = None, mapper: Mapper = map
                  ) -> list[npt.NDArray[Any]]:
        """`read` for each (name, selection), in order, each stored chunk fetched and decoded once however many
        of the regions share it. `out`: per request, an array of the region's shape and dtype (any strides, e.g.
        a view of a batch) to read into, or None for a new one. `mapper` runs the read tasks from an iterator
        that plans the regions as it goes (the builtin `map`, or a thread pool's, which the caller owns: this
        module starts no threads)."""
        if out is not None and len(out) != len(requests):
            raise ValueError(f"{len(out)} out arrays for {len(requests)} requests")
        plans = []
        placements = []
        for n, (name, selection) in enumerate(requests):
            array = self.array(name)
            region, dest = array._prepare(selection, None if out is None else out[n])
            plans.append((array, selection, region, dest))
            # A read-only `out` is left to the Python path, whose assignment refuses it (the kernels write through
            # its address).
            if array._direct is not None and array._direct.batched is not None and dest.flags.writeable:
                placements.append(Placement(n, array._direct, array._direct.batched, region, dest))
        declined = read_compiled(placements, mapper) if placements else False
        compiled = {p.n for p in placements}
        # The Python path reads the arrays the compiled one does not take; and, when the compiled one declined a
        # chunk, the whole batch again, as it would have alone: it raises the error it always raised, naming the
        # same chunk (a short read names the first chunk of the range it was in, which depends on the batch).
        rest = plans if declined else [plan for n, plan in enumerate(plans) if n not in compiled]
        if rest:
            _read_python(rest, mapper)
        return [dest for *_, dest in plans]

    def path_used(self, name: str) -> Literal["labzarr", "zarr"]:
        """Which path serves array `name` in this process: the labzarr reader or zarr-python."""
        return self.array(name).path_used

    def open_arrays(self) -> int:
        """How many arrays this process holds open (at most `max_open`)."""
        return len(self._open) if self._pid == os.getpid() else 0

    def close(self) -> None:
        """Close the files this process holds open for the store (a later read opens them again)."""
        if self._transport is not None and self._pid == os.getpid():
            self._transport.close()
        self._forget()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self._store, "storage_options": self._options, "backend": self._backend,
                "max_open": self._max_open, "slots": self._slots}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._store, self._options = state["store"], state["storage_options"]
        self._backend, self._max_open, self._slots = state["backend"], state["max_open"], state["slots"]
        self._forget()
