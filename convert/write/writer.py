"""Writing a volume's slabs into its zarr array, chunk-aligned, hashing each chunk as it goes.

Invariant: every write covers whole chunks (edge chunks to the array's end),
and in a sharded array whole shards, so no chunk or shard is ever read back;
the array is written in a staging folder,
with every chunk file present (all-fill ones too), and claims `complete` and
moves to its final path only in `finish()`, after the source's last slab (and
so its whole-stream checks). `close()` without `finish()` removes the staged
folder. A failure to write the store is `StoreWriteError`, never the item's fault.
On a URL store the array is written at its final path instead (`convert/write/__init__.py`).

Memory: a sharded array's shards are encoded here, chunk by chunk, straight
from the slab (`_shard.py`), since zarr-python holds a whole shard (voxels and
encoded bytes) while it writes one; a worker then holds the slab and a few
chunks, whatever the shard shape. Only an unsharded array (or a codec chain
`_shard.py` does not write) goes through zarr-python, in blocks of whole write
units of about `_BLOCK_BYTES`.

Speed: a slab arrives as a reoriented view of the source's buffer (x fastest
in memory, the store wants C order, z fastest). numpy copies such a view
element by element across the cache; copying tile by tile -- each tile first
made compact in its own memory order, then transposed while it sits in cache --
is faster, so the transposition costs little next to the codec
(`make bench`, convert section, the "C-order copy" group). The shard writer
goes one step further: a job's chunks (a 2x2x2 Morton run) are gathered as one
box in memory order (`gather_copy`: runs twice as long out of the slab), then
each is C-ordered from cache into one reused buffer (`copy_into`), no chunk
allocated (the group "the same slab's 32^3 chunks made C-contiguous";
`python bench/convert.py --copy` runs both groups alone). For an item large
enough to load numba (`transpose.wanted`), each chunk is instead transposed
straight out of the slab in one pass, square tiles in vector registers
(`transpose.py`, the same group's "compiled" row); the bytes are the same.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from labzarr.readers import Slab, VolumeHeader
from labzarr.store import Location
from labzarr.store.chunks.shard import ShardCodec
from labzarr.store.content import ChunkDigests, block_digests, combine_digests
from labzarr.store.format import nodes
from labzarr.store.format.ngff import Pyramid

from .arrays import Staged, StoreWriteError, begin_array, discard, install
from .image import begin_image, install_image
from .transpose import transposed, wanted

__all__ = ["AXES", "DEFAULT_THREADS", "PartWriter", "store_io", "VolumeWriter", "c_order_copy", "c_order_into",
           "copy_into", "create_volume_array", "gather_copy", "open_volume_array", "seal_volume", "slab_copy_into"]

_TILE = 64  # voxels per tile edge for the transposing copy: 64^3 x 8 B fits in L2
_BLOCK_BYTES = 16 << 20  # voxels handed to zarr per call: enough chunks to keep its codec threads busy
# Threads encoding one shard's chunks when the caller names none: every core (as zarr's codecs use), at most 8.
# A conversion names its share instead (`TaskSettings.threads`): workers x threads <= cores.
DEFAULT_THREADS = min(8, os.cpu_count() or 1)
_PREFLUSH_BYTES = 4 << 20  # a shard of this many voxel bytes is flushed as soon as it is written (`_preflush`)
AXES = ("c", "x", "y", "z")


@contextmanager
def store_io(store: Location, what: str) -> Iterator[None]:
    """An OSError while writing the store (disk full, read-only; for a URL store any failed request) is the
    store's problem, not the item's."""
    try:
        yield
    except store.transport_errors() as exc:
        raise StoreWriteError(str(store), f"{what}: {exc}") from exc


def c_order_copy(view: npt.NDArray[Any], dtype: np.dtype[Any] | None = None) -> npt.NDArray[Any]:
    """A C-contiguous copy of any strided `view` (optionally cast to `dtype`), tile by tile: each tile copied in
    its memory order (long runs), then into C order from cache.

    Flipped axes (negative strides, as reorientation leaves them) are read forwards and written backwards
    instead: numpy's memory-order copy of a view with negative strides is much slower than of the same view
    flipped back (bench/convert.py, the C-order copy groups)."""
    return c_order_into(view, np.empty(view.shape, dtype=dtype or view.dtype))


def c_order_into(view: npt.NDArray[Any], out: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`c_order_copy` into `out`, a C-contiguous array of `view`'s shape (cast to its dtype); returns `out`."""
    if view.flags.c_contiguous:
        out[...] = view
        return out
    flipped = _flipped(view)
    source, target = (np.flip(view, flipped), np.flip(out, flipped)) if flipped else (view, out)
    if all(n <= _TILE for n in view.shape):  # one tile
        target[...] = source.copy(order="K")
        return out
    for starts in itertools.product(*(range(0, n, _TILE) for n in view.shape)):
        sel = tuple(slice(s, s + _TILE) for s in starts)
        target[sel] = source[sel].copy(order="K")
    return out


def gather_copy(view: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A compact copy of `view` laid out in `view`'s own memory order and indexed as `view` (flipped axes read
    forwards): the first half of `c_order_copy` for a region the shard writer then C-orders chunk by chunk
    (`copy_into`), from cache."""
    flipped = _flipped(view)
    if not flipped:
        return view.copy(order="K")
    return np.flip(np.flip(view, flipped).copy(order="K"), flipped)


def copy_into(view: npt.NDArray[Any], out: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`view` copied (cast to `out`'s dtype) into `out`, a C-contiguous array of its shape; flipped axes read
    forwards. Returns `out`. Fast where `view` is compact and in cache (`gather_copy`'s)."""
    flipped = _flipped(view)
    if flipped:
        np.flip(out, flipped)[...] = np.flip(view, flipped)
    else:
        out[...] = view
    return out


def slab_copy_into(view: npt.NDArray[Any], out: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`copy_into` for a `view` of the slab itself, not gathered first: by the compiled tile transposition
    (`transpose.py`) where it fits, else `c_order_into`. Returns `out`."""
    return out if transposed(view, out) else c_order_into(view, out)


def _as_is(view: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The shard writer's `gather` when chunks are copied straight out of the slab (`slab_copy_into`)."""
    return view


def _flipped(view: npt.NDArray[Any]) -> tuple[int, ...]:
    return tuple(axis for axis, stride in enumerate(view.strides) if stride < 0)


def create_volume_array(folder: Location, header: VolumeHeader, *, chunks: Sequence[int], shards: Sequence[int] | None,
                        codecs: Sequence[Any], attrs: Mapping[str, Any]) -> zarr.Array[Any]:
    """Create the (empty) zarr array a volume of `header` is written into, at `folder`."""
    return nodes.create_array(
        folder,
        shape=header.shape,
        dtype=header.dtype,
        chunks=chunks,
        shards=shards,
        codecs=codecs,
        dimension_names=AXES[: len(header.shape)] if len(header.shape) == 4 else None,
        attributes=attrs,
        config={"write_empty_chunks": True},  # every chunk has a file: a missing one is damage
    )


def open_volume_array(folder: Location) -> zarr.Array[Any]:
    """Open a volume array `create_volume_array` made, for writing (the config is per handle, not stored)."""
    arr = zarr.open_array(folder.zarr(), mode="r+", config={"write_empty_chunks": True})
    assert isinstance(arr, zarr.Array)
    return arr


def seal_volume(store: Location, name: str, folder: Location, array: zarr.Array[Any], digests: ChunkDigests, *,
                attrs: Mapping[str, Any] | None, complete: str, run_id: str, pyramid: Pyramid | None = None,
                defer: list[Staged] | None = None) -> str:
    """Record `content_sha256` (from every chunk's digest) and `attrs`, then `complete`, and move the staged
    array at `folder` to `name`; returns the content hash. With `pyramid`, `name` is the level-0 array of an
    image group `begin_image` staged: its levels and `ome` attributes are written first and the whole group is
    moved. With `defer`, the sealed folder is left there for `publish` instead of moved. Raises `StoreWriteError`,
    `Superseded`."""
    content = combine_digests(array.shape, array.dtype, array.chunks, digests)
    sealed = {**(attrs or {}), "content_sha256": content}
    with store_io(store, f"cannot write {name}"):
        if pyramid is None:
            install(store, name, folder, array, complete=complete, run_id=run_id, attrs=sealed, defer=defer)
        else:
            install_image(store, name, folder, array, complete=complete, run_id=run_id, pyramid=pyramid, attrs=sealed,
                          defer=defer)
    return content


class _SlabWriter:
    """Writes slabs into the array at `folder`: shard by shard when sharded, else through zarr in blocks of whole
    chunks; hashes each chunk in worker threads. A shard's chunks are copied out of the slab by the compiled tile
    transposition when `compiled` (None: when `transpose.wanted` for the volume's size), else by numpy
    (`gather_copy`, `copy_into`); the bytes are the same."""

    def __init__(self, store: Location, name: str, header: VolumeHeader, array: zarr.Array[Any],
                 folder: Location, *, threads: int = DEFAULT_THREADS, compiled: bool | None = None) -> None:
        self.store, self.name, self.header, self.array, self.folder = store, name, header, array, folder
        self.threads = max(1, threads)
        self.chunks = tuple(int(c) for c in array.chunks)
        # What one write covers whole: a shard when sharded (zarr rewrites a shard file on a partial write).
        self.unit = tuple(int(s) for s in array.shards) if array.shards is not None else self.chunks
        self._shard = ShardCodec.of(array)
        use = wanted(math.prod(header.shape)) if compiled is None else compiled
        self._copy = (_as_is, slab_copy_into) if use else (gather_copy, copy_into)
        self._digests: ChunkDigests = {}
        self._pool = ThreadPoolExecutor(max_workers=self.threads if self._shard else 1,
                                        thread_name_prefix="labzarr-write")
        self._pending: Future[ChunkDigests] | None = None
        self._flush: ThreadPoolExecutor | None = None  # pre-flushes large shards (`_preflush`), started at the first

    def write(self, slab: Slab) -> None:
        """Write one slab aligned to the write unit (whole shards, or whole chunks when unsharded)."""
        if self._shard is not None:
            self._write_shards(slab, self._shard)
            return
        axis = self._block_axis(slab)
        start, stop = slab.region[axis].start, slab.region[axis].stop
        step = self._rows_per_block(slab, axis) * self.unit[axis]
        for lo in range(start, stop, step):
            hi = min(stop, lo + step)
            sel = [slice(None)] * slab.data.ndim
            sel[axis] = slice(lo - start, hi - start)
            block = c_order_copy(slab.data[tuple(sel)], self.header.dtype)
            region = list(slab.region)
            region[axis] = slice(lo, hi)
            origin = [r.start for r in region]
            self._collect()
            # hashlib and numpy's copy release the GIL: hash this block while zarr encodes it
            self._pending = self._pool.submit(block_digests, block, origin, self.chunks)
            with store_io(self.store, f"cannot write {self.name}"):
                self.array[tuple(region)] = block

    def _write_shards(self, slab: Slab, codec: ShardCodec) -> None:
        """Write every shard of `slab`, each whole: the slab covers whole shards (edge shards to the array's end)."""
        region, shape = slab.region, self.array.shape
        if any(r.start % u or (r.stop % u and r.stop != n) for r, u, n in zip(region, self.unit, shape)):
            raise ValueError(f"{self.name}: slab {region} does not cover whole shards of {self.unit}")
        for coords in itertools.product(*(range(r.start // u, -(-r.stop // u)) for r, u in zip(region, self.unit))):
            sel = tuple(slice(k * u - r.start, min((k + 1) * u, r.stop) - r.start)
                        for k, u, r in zip(coords, self.unit, region))
            shard = slab.data[sel]
            with store_io(self.store, f"cannot write {self.name}"):
                self._digests.update(codec.write(self.folder, coords, shard, pool=self._pool, threads=self.threads,
                                                 gather=self._copy[0], copy=self._copy[1]))
            if shard.nbytes >= _PREFLUSH_BYTES:
                self._preflush(codec.keys(tuple(int(k) for k in coords)))

    def _preflush(self, key: str) -> None:
        """Start writing a written shard file to disk now, in the background, while the next shards are encoded:
        the install's fsync of every file (`arrays.install`, the durability it promises) then finds little left to
        write instead of the whole volume, on the critical path after the last slab. Only a hint: an error here
        is left for that fsync to raise."""
        if self._flush is None:
            self._flush = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labzarr-flush")
        self._flush.submit(self.folder.fsync_tree, (key,))

    def _stop_threads(self) -> None:
        """Stop encoding; the flushes started run to their end (a few shards at most)."""
        self._pool.shutdown(cancel_futures=True)
        if self._flush is not None:
            self._flush.shutdown()

    def digests(self) -> ChunkDigests:
        """Each written chunk's digest by chunk index (after waiting for the hashing thread)."""
        self._collect()
        return dict(self._digests)

    def _collect(self) -> None:
        if self._pending is not None:
            self._digests.update(self._pending.result())
            self._pending = None

    def _block_axis(self, slab: Slab) -> int:
        """The first spatial axis the slab spans fully (any but the stream axis), else the stream axis."""
        for axis in range(1, slab.data.ndim):
            if axis != self.header.stream_axis and slab.data.shape[axis] > self.unit[axis]:
                return axis
        return self.header.stream_axis or 1

    def _rows_per_block(self, slab: Slab, axis: int) -> int:
        row = self.header.dtype.itemsize * slab.data.size // max(1, slab.data.shape[axis]) * self.unit[axis]
        return max(1, _BLOCK_BYTES // max(1, int(row)))


class VolumeWriter(_SlabWriter):
    """One array written from slabs and installed by this writer: `finish` records the content hash and `complete`.

    With `pyramid`, `name` is the level-0 array of an image group (`volumes/<item>/0`), and the whole group is
    staged, given its levels and `ome` attributes, and installed (`image.py`); without, the array alone.
    """

    def __init__(self, store: Location, name: str, header: VolumeHeader, *, chunks: Sequence[int],
                 codecs: Sequence[Any], attrs: Mapping[str, Any], run_id: str = "",
                 shards: Sequence[int] | None = None, pyramid: Pyramid | None = None,
                 threads: int = DEFAULT_THREADS, compiled: bool | None = None) -> None:
        with store_io(store, f"cannot create {name}"):
            folder = begin_array(store, name) if pyramid is None else begin_image(store, name)
            array = create_volume_array(folder, header, chunks=chunks, shards=shards, codecs=codecs, attrs=attrs)
        super().__init__(store, name, header, array, folder, threads=threads, compiled=compiled)
        self.run_id, self.pyramid = run_id, pyramid
        self._staged = folder if pyramid is None else folder.parent  # what `close` removes unless installed
        self._installed = False

    def finish(self, *, attrs: Mapping[str, Any] | None = None, complete: str,
               defer: list[Staged] | None = None) -> str:
        """Record `content_sha256` (and `attrs`), then `complete`, and move the array into place (with `defer`,
        leave it sealed there for `publish`); returns the hash."""
        self._collect()
        self._pool.shutdown()
        if self._flush is not None:  # the install's fsync would wait for the same writes
            self._flush.shutdown()
        content = seal_volume(self.store, self.name, self.folder, self.array, self._digests, attrs=attrs,
                              complete=complete, run_id=self.run_id, pyramid=self.pyramid, defer=defer)
        self._installed = True
        return content

    def close(self) -> None:
        """Stop the writing threads and, unless `finish` installed the array, remove the staged folder."""
        self._stop_threads()
        if not self._installed:
            discard(self._staged)


class PartWriter(_SlabWriter):
    """Writes some slabs of a split volume into the array the driver staged at `folder` (see `run/part_task.py`).

    It neither seals nor removes the array: the driver does, once every part has handed in its `digests()`.
    """

    def __init__(self, store: Location, name: str, header: VolumeHeader, folder: Location, *,
                 threads: int = DEFAULT_THREADS) -> None:
        with store_io(store, f"cannot open {name}"):
            array = open_volume_array(folder)
        super().__init__(store, name, header, array, folder, threads=threads)

    def close(self) -> None:
        """Stop the writing threads."""
        self._stop_threads()
