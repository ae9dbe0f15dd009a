"""The one read path for stored arrays: regions of zarr v3 arrays, in any process, without zarr-python.

Why a hand-written reader: the benchmark (`make bench`, loaders section) shows zarr-python reading a random
patch of a sharded store several times slower than a direct read (the shard index, then only the touched
chunks, decoded with numcodecs), and tensorstore, which is as fast, cannot be used after a fork. This module
does the direct read for the layouts labzarr writes (`Layout` says which); it is tested against zarr-python,
byte for byte (tests/store/test_reader.py), and any other array is read by zarr-python itself.

Invariants:
- A region is read as zarr-python reads it: same values, shape and dtype; an absent chunk or shard (and an
  absent inner chunk of a shard) reads as the fill value.
- Damage is never returned as voxels: a checksum mismatch, an undecodable chunk or a truncated object raises
  `ChecksumError`, which names the store, the array, the item and the chunk.
- Per process: nothing opened before a fork (descriptors, filesystems, zarr handles) is used after it, and a
  pickled `StoreReader` carries only its configuration. No threads or event loops are started here.
- A shard's index is fetched once per reader and kept; then each read fetches only the byte ranges of the
  chunks it touches (contiguous ranges merged into one request), never a whole shard. A reader therefore sees a
  shard as it was when first touched; open a new reader to see a rewritten store.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import operator
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import Any, Literal, TypeAlias

import crc32c
import numcodecs
import numcodecs.blosc
import numcodecs.zstd
import numpy as np
import numpy.typing as npt
import zarr

from ._layout import Layout, UnsupportedLayout
from .location import Transport, open_transport, zarr_store_for

__all__ = ["ArrayReader", "Backend", "ChecksumError", "Selection", "StoreReader", "UnsupportedLayout"]

log = logging.getLogger(__name__)

Selection: TypeAlias = "int | slice | EllipsisType | tuple[int | slice | EllipsisType, ...]"
Backend = Literal["auto", "labzarr", "zarr"]

_ABSENT = 2**64 - 1  # a shard index entry (offset and nbytes) for an inner chunk that was never written
_GZIP = numcodecs.GZip()


class ChecksumError(Exception):
    """Stored bytes failed their checksum or did not decode: the store is damaged at `chunk` (grid coordinates,
    None for a shard index) of `array`, inside the object `shard` when the array is sharded."""

    def __init__(self, where: str, array: str, item: str | None, chunk: tuple[int, ...] | None, shard: str | None,
                 detail: str) -> None:
        what = f"chunk {chunk}" if chunk is not None else "shard index"
        inside = f" in shard {shard!r}" if shard is not None else ""
        of_item = f" (item {item})" if item is not None else ""
        super().__init__(f"{where}: array {array!r}{of_item}: {what}{inside}: {detail}; the stored bytes are "
                         f"damaged: `labzarr verify --repair SPEC` converts the damaged items again")
        self.where, self.array, self.item = where, array, item
        self.chunk, self.shard, self.detail = chunk, shard, detail

    def __reduce__(self) -> tuple[type[ChecksumError], tuple[Any, ...]]:
        # Crosses process boundaries (a DataLoader worker re-raises it in the parent).
        return (ChecksumError, (self.where, self.array, self.item, self.chunk, self.shard, self.detail))


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


class _Direct:
    """The labzarr read path for one array: shard indexes, byte ranges, numcodecs, numpy."""

    __slots__ = ("transport", "path", "layout", "_prefix", "_indexes", "_item", "_strides", "_chunk_nbytes")

    def __init__(self, transport: Transport, path: str, layout: Layout) -> None:
        self.transport, self.path, self.layout = transport, path, layout
        self._prefix = f"{path}/" if path else ""
        self._indexes: dict[tuple[int, ...], list[list[int]] | None] = {}
        item = layout.attributes.get("item_id")
        self._item = None if item is None else str(item)
        per = layout.chunks_per_shard
        self._strides = tuple(math.prod(per[a + 1:]) for a in range(len(per)))
        self._chunk_nbytes = math.prod(layout.chunks) * layout.stored_dtype.itemsize

    def read(self, region: _Region) -> npt.NDArray[Any]:
        lay = self.layout
        out = np.empty(region.shape, dtype=lay.dtype)
        if out.size == 0:
            return out
        box = out.reshape(tuple(b - a for a, b in zip(region.start, region.stop)))  # a view: int axes kept as 1
        axes = [self._axis_hits(a, lo, hi) for a, (lo, hi) in enumerate(zip(region.start, region.stop))]
        if lay.sharded:
            by_shard: dict[tuple[int, ...], list[tuple[_AxisHit, ...]]] = {}
            for hits in itertools.product(*axes):
                by_shard.setdefault(tuple(h[1] for h in hits), []).append(hits)
            for shard, chunk_hits in by_shard.items():
                self._read_shard(shard, chunk_hits, box)
        else:
            for hits in itertools.product(*axes):
                self._read_chunk(hits, box)
        return out

    def _axis_hits(self, axis: int, lo: int, hi: int) -> list[_AxisHit]:
        c = self.layout.chunks[axis]
        per = self.layout.chunks_per_shard[axis] if self.layout.sharded else 1
        stride = self._strides[axis] if self.layout.sharded else 0
        hits = []
        for i in range(lo // c, (hi - 1) // c + 1):
            a, b = max(lo, i * c), min(hi, (i + 1) * c)
            hits.append((i, i // per, (i % per) * stride, slice(a - i * c, b - i * c), slice(a - lo, b - lo)))
        return hits

    def _read_chunk(self, hits: tuple[_AxisHit, ...], box: npt.NDArray[Any]) -> None:
        coords = tuple(h[0] for h in hits)
        target = tuple(h[4] for h in hits)
        try:
            data = self.transport.read(self._prefix + self.layout.key(coords))
        except FileNotFoundError:
            box[target] = self.layout.fill_value
            return
        box[target] = self._decode(data, coords, None)[tuple(h[3] for h in hits)]

    def _read_shard(self, shard: tuple[int, ...], chunk_hits: list[tuple[_AxisHit, ...]],
                    box: npt.NDArray[Any]) -> None:
        key = self._prefix + self.layout.key(shard)
        index = self._index(key, shard)
        wanted = []  # (offset, nbytes, hits) of each present chunk
        for hits in chunk_hits:
            offset, nbytes = index[sum(h[2] for h in hits)] if index is not None else (_ABSENT, _ABSENT)
            if offset == _ABSENT:
                box[tuple(h[4] for h in hits)] = self.layout.fill_value
            else:
                wanted.append((offset, nbytes, hits))
        if not wanted:
            return
        wanted.sort(key=operator.itemgetter(0))
        runs: list[list[int]] = []  # [start, length, first, last] over `wanted`: chunks contiguous in the shard
        for n, (offset, nbytes, _) in enumerate(wanted):
            if runs and runs[-1][0] + runs[-1][1] == offset:
                runs[-1][1] += nbytes
                runs[-1][3] = n
            else:
                runs.append([offset, nbytes, n, n])
        try:
            blobs = self.transport.read_ranges(key, [(r[0], r[1]) for r in runs])
        except (EOFError, FileNotFoundError) as exc:  # the index points past the shard's end, or the shard went
            raise self._corrupt(tuple(h[0] for h in wanted[0][2]), key, f"cannot read it: {exc}") from exc
        for (start, length, first, last), blob in zip(runs, blobs):
            if len(blob) != length:
                raise self._corrupt(tuple(h[0] for h in wanted[first][2]), key,
                                    f"{len(blob):,} B read where the shard index says {length:,} B")
            view = memoryview(blob)
            for offset, nbytes, hits in wanted[first:last + 1]:
                chunk = self._decode(view[offset - start:offset - start + nbytes], tuple(h[0] for h in hits), key)
                box[tuple(h[4] for h in hits)] = chunk[tuple(h[3] for h in hits)]

    def _index(self, key: str, shard: tuple[int, ...]) -> list[list[int]] | None:
        """The (offset, nbytes) of each inner chunk of `shard` (C order), None for an absent shard; cached."""
        if shard in self._indexes:
            return self._indexes[shard]
        lay = self.layout
        size = lay.index_nbytes
        try:
            (data,) = self.transport.read_ranges(key, [(-size, 0) if lay.index_location == "end" else (0, size)])
        except FileNotFoundError:
            self._indexes[shard] = None
            return None
        except EOFError as exc:
            raise self._corrupt(None, key, f"shorter than its {size:,} B index: {exc}") from exc
        if len(data) != size:
            raise self._corrupt(None, key, f"{len(data):,} B where the index is {size:,} B")
        body = size - 4 if lay.index_crc32c else size
        if lay.index_crc32c and crc32c.crc32c(memoryview(data)[:body]) != int.from_bytes(data[body:], "little"):
            raise self._corrupt(None, key, "crc32c mismatch")
        index: list[list[int]] = np.frombuffer(data, dtype="<u8", count=body // 8).reshape(-1, 2).tolist()
        self._indexes[shard] = index
        return index

    def _decode(self, data: bytes | memoryview, coords: tuple[int, ...], shard: str | None) -> npt.NDArray[Any]:
        """One stored chunk as an array of the chunk shape; raises ChecksumError, never returns damaged values."""
        buf: Any = data
        for name in reversed(self.layout.codecs):
            if name == "crc32c":
                view = memoryview(buf)
                if len(view) < 4:
                    raise self._corrupt(coords, shard, f"{len(view)} B, too short for its crc32c")
                if crc32c.crc32c(view[:-4]) != int.from_bytes(view[-4:], "little"):
                    raise self._corrupt(coords, shard, "crc32c mismatch")
                buf = view[:-4]
                continue
            try:
                if name == "blosc":
                    buf = numcodecs.blosc.decompress(buf)
                elif name == "zstd":
                    buf = numcodecs.zstd.decompress(buf)
                else:
                    buf = _GZIP.decode(buf)
            except Exception as exc:  # each decoder has its own error types; all mean the bytes are not a chunk
                raise self._corrupt(coords, shard, f"{name} cannot decode it: {type(exc).__name__}: {exc}") from exc
        if len(buf) != self._chunk_nbytes:
            raise self._corrupt(coords, shard, f"decodes to {len(buf):,} B, expected {self._chunk_nbytes:,} B")
        return np.frombuffer(buf, dtype=self.layout.stored_dtype).reshape(self.layout.chunks)

    def _corrupt(self, chunk: tuple[int, ...] | None, shard: str | None, detail: str) -> ChecksumError:
        return ChecksumError(self.transport.where, self.path, self._item, chunk, shard, detail)


class ArrayReader:
    """One stored array, read by labzarr's own path (`ArrayReader.open`) or by zarr-python (`from_zarr`).

    `read(selection)` (also `reader[selection]`) returns what numpy basic indexing with the same ints and step-1
    slices returns from the whole array: ints drop their axis, slices are clamped, missing trailing entries mean
    whole axes.
    """

    __slots__ = ("_direct", "_zarr")

    def __init__(self, direct: _Direct | None, array: zarr.Array[Any] | None) -> None:
        self._direct, self._zarr = direct, array

    @classmethod
    def open(cls, transport: Transport, path: str) -> ArrayReader:
        """labzarr's reader of the array at `path`; raises FileNotFoundError (no `zarr.json`), UnsupportedLayout."""
        path = path.strip("/")
        key = f"{path}/zarr.json" if path else "zarr.json"
        try:
            doc = json.loads(transport.read(key))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UnsupportedLayout(f"{key} is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise UnsupportedLayout(f"{key} is not a JSON object")
        return cls(_Direct(transport, path, Layout.parse(doc)), None)

    @classmethod
    def from_zarr(cls, array: zarr.Array[Any]) -> ArrayReader:
        """A reader that serves `array` through zarr-python (the fallback)."""
        return cls(None, array)

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
        return np.asarray(self._zarr_array[sel]).reshape(region.shape)

    def __getitem__(self, selection: Selection) -> npt.NDArray[Any]:
        return self.read(selection)

    def __getstate__(self) -> dict[str, Any]:
        # Only labzarr's path pickles (its transport drops its handles); zarr-python's is reopened by a StoreReader.
        if self._direct is None:
            raise TypeError("an ArrayReader on zarr-python does not pickle; pickle its StoreReader")
        return {"transport": self._direct.transport, "path": self._direct.path, "layout": self._direct.layout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._direct, self._zarr = _Direct(state["transport"], state["path"], state["layout"]), None


class StoreReader:
    """Arrays of one store, read in whichever process holds this object (see the module invariants).

    `backend`: "labzarr" reads every array with labzarr's own path (ValueError for a layout it does not
    handle), "zarr" reads every array with zarr-python, "auto" uses labzarr's path where it can and zarr-python
    elsewhere (logged at debug). At most `max_open` arrays are kept open, least recently used dropped first.
    """

    def __init__(self, store: Path | str, *, storage_options: Mapping[str, Any] | None = None,
                 backend: Backend = "auto", max_open: int = 64) -> None:
        if backend not in ("auto", "labzarr", "zarr"):
            raise ValueError(f"backend {backend!r}: one of 'auto', 'labzarr', 'zarr'")
        if max_open < 1:
            raise ValueError(f"max_open {max_open}: at least 1")
        self._store, self._options = store, dict(storage_options or {})
        self._backend: Backend = backend
        self._max_open = max_open
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
        if self._backend != "zarr":
            if self._transport is None:
                self._transport = open_transport(self._store, self._options)
            try:
                return ArrayReader.open(self._transport, name)
            except (UnsupportedLayout, FileNotFoundError) as exc:
                if self._backend == "labzarr":
                    if isinstance(exc, FileNotFoundError):
                        raise FileNotFoundError(f"{self._transport.where}: no array {name!r} ({exc})") from exc
                    raise ValueError(f"{self._transport.where}: array {name!r}: {exc}; the labzarr reader does not "
                                     f"handle this layout (backend='auto' reads it with zarr-python)") from exc
                log.debug("%s: array %r read with zarr-python: %s", self._transport.where, name, exc)
        if self._zarr_store is None:
            self._zarr_store = zarr_store_for(self._store, self._options)
        array = zarr.open_array(self._zarr_store, path=name, mode="r")
        return ArrayReader.from_zarr(array)

    def read(self, name: str, selection: Selection = ()) -> npt.NDArray[Any]:
        """The region `selection` of array `name` (rules of `ArrayReader.read`)."""
        return self.array(name).read(selection)

    def read_many(self, requests: Sequence[tuple[str, Selection]]) -> list[npt.NDArray[Any]]:
        """`read` for each (name, selection), in order."""
        return [self.array(name).read(selection) for name, selection in requests]

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
                "max_open": self._max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._store, self._options = state["store"], state["storage_options"]
        self._backend, self._max_open = state["backend"], state["max_open"]
        self._forget()
