"""A batch of region reads done by compiled code that holds no GIL: every stored chunk's pread, crc32c check,
blosc decode and copy into the batch, for the arrays `route` admits; the rest of the read path is `read.py`'s.

Why hand-written: a batch's Python path (`read.py`'s `_read`) runs a few lines of Python per chunk between the
calls that release the GIL (pread, blosc, numpy's copies), and the crc32c package keeps the GIL on purpose (a
chunk's checksum costs less than handing the GIL over). On one thread that Python is cheap; on two, the threads
queue for the GIL once a chunk each, and a second thread cost more CPU a sample than it saved in time (`make
bench`, loaders section, batched-reads group; docs/benchmarks.md has the figures before and after, and what
loading numba costs a process). Here Python plans a
batch region by region (shard indexes, open files: what may raise today's errors), then one compiled call lists
the chunks the regions touch, each once, and each read thread makes one GIL-free call that takes chunks off a
shared counter until none is left: pread (libc), crc32c (SSE4.2's crc32 instruction), `blosc_decompress_ctx`
(c-blosc's thread-safe entry, from the same library numcodecs decodes with: the same decoder as the Python
path), and the copy of each part a region needs. The kernels are numba's (`_batched_kernel.py`), compiled once
and cached on disk beside it.

Invariants:
- Bytes are the Python path's exactly; tests/store/test_batched_kernel.py checks them against it and zarr-python
  across dtypes, edge regions, shard layouts and fill values.
- A chunk the kernel cannot place (short read, crc32c mismatch, a blosc header or decode that is not the
  chunk's) is not an error here: the batch is read again, whole, by the Python path, which raises the error it
  always raised, naming the same chunk (or reads what the kernel declined). Damage is never returned as voxels.
- `route` is the one place that says which arrays take this path: a store in a local folder (its transport
  hands out file descriptors), sharded, the default chain (blosc, then crc32c), native byte order, elements of
  at most 8 bytes, at most `MAX_NDIM` axes, on an x86-64 CPU with SSE4.2, with c-blosc's entry found in
  numcodecs' library. Anything else (a zip, a URL, another chain or layout) is read by `read.py` as before.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
import platform
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .location.transport import Descriptors
    from .read import _Direct, _Region

__all__ = ["Compiled", "Placement", "route"]

log = logging.getLogger(__name__)

_MAX_NDIM = 8  # `_batched_kernel.MAX_NDIM`, known here without importing numba
_CHAIN = ("blosc", "crc32c")


def route(direct: _Direct) -> str | None:
    """Why `direct`'s array is read by the Python path (None: by the compiled one). Decided once per array."""
    lay = direct.layout
    if direct.transport.descriptors() is None:
        return "its store is not a local folder"
    if tuple(lay.codecs) != _CHAIN:
        return f"its codecs are {list(lay.codecs)}, not {list(_CHAIN)}"
    if not lay.sharded:
        return "it is not sharded"
    if lay.stored_dtype != lay.dtype or not lay.dtype.isnative or lay.dtype.itemsize > 8 or lay.dtype.hasobject:
        return f"its stored elements are {lay.stored_dtype}"
    if len(lay.shape) > _MAX_NDIM:
        return f"it has {len(lay.shape)} axes"
    return _machine()


@functools.cache
def _machine() -> str | None:
    """Why this process cannot run the kernels (None: it can). Asked once per process."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the CPU is {platform.machine()}, not x86-64 (the crc32c kernel uses SSE4.2)"
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        flags = ""
    if "sse4_2" not in flags.split():
        return "the CPU has no SSE4.2 (the crc32c kernel's instruction)"
    if _entries() is None:
        return "numcodecs' blosc library does not export blosc_decompress_ctx"
    return None


@functools.cache
def _entries() -> tuple[int, int] | None:
    """The addresses of libc's `pread` and c-blosc's `blosc_decompress_ctx` (numcodecs' copy, already loaded)."""
    import numcodecs.blosc

    try:
        blosc = ctypes.CDLL(numcodecs.blosc.__file__)
        decompress = ctypes.cast(blosc.blosc_decompress_ctx, ctypes.c_void_p).value
        pread = ctypes.cast(ctypes.CDLL(None).pread, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    if not decompress or not pread:
        return None
    return pread, decompress


@functools.cache
def _kernel() -> tuple[ModuleType, npt.NDArray[np.uint32]]:
    """The kernels' module (importing numba), and the crc32c kernel's tables for this process."""
    from . import _batched_kernel

    return _batched_kernel, _batched_kernel.shifts()


class Compiled:
    """The compiled path's state for one array (per process, as its `_Direct`, which holds it: it holds no
    reference back, so dropping the reader frees both at once): each shard's index as an array the kernel reads,
    the fill value's bytes, and the array's row of the kernel's `arrays` table."""

    __slots__ = ("tables", "fill", "fill_at", "geometry")

    def __init__(self, direct: _Direct) -> None:
        self.tables: dict[tuple[int, ...], tuple[str, int, npt.NDArray[np.int64] | None]] = {}
        lay = direct.layout
        self.fill = np.array([lay.fill_value], dtype=lay.dtype).view(np.uint8)
        self.fill_at = self.fill.__array_interface__["data"][0]
        nd = len(lay.shape)
        per = lay.chunks_per_shard
        geometry = [nd, lay.dtype.itemsize, int(np.prod(lay.chunks)) * lay.dtype.itemsize, self.fill_at]
        for values in (lay.shape, lay.chunks, per):
            geometry += [*values, *([1] * (_MAX_NDIM - nd))]
        self.geometry = geometry

    def shard(self, direct: _Direct, shard: tuple[int, ...]) -> tuple[str, int]:
        """`shard`'s key, and the address of its index as (offset, nbytes) int64 pairs (0: never written); the
        index is read and checked through `_Direct._index` (which raises today's errors for a damaged one) the
        first time, then kept."""
        found = self.tables.get(shard)
        if found is None:
            key = direct._prefix + direct.layout.key(shard)
            index = direct._index(key, shard)
            table = None if index is None else np.array(index, dtype=np.uint64).view(np.int64)
            address = 0 if table is None else int(table.__array_interface__["data"][0])
            found = self.tables[shard] = (key, address, table)  # the table kept alive with its address
        return found[0], found[1]


@dataclass(slots=True)
class Placement:
    """A region the compiled path reads: its array, box and destination (`plans` of `read_many`, index `n`)."""

    n: int
    direct: _Direct
    compiled: Compiled
    region: _Region
    dest: npt.NDArray[Any]


def read(placements: Sequence[Placement], mapper: Callable[[Callable[[Any], None], Any], Any]) -> bool:
    """Read every placement's region into its destination; returns whether the kernel declined a chunk (the
    batch must then be read again by the Python path). `mapper` runs the kernel's share-out: each task it is
    handed runs the kernel until the batch's chunks are all taken."""
    rows: list[list[int]] = []
    arrays: dict[int, int] = {}
    geometry: list[list[int]] = []
    shards: list[tuple[int, int]] = []
    taken: dict[str, tuple[Descriptors, int]] = {}  # each file's descriptor, taken once for the batch
    try:
        for p in placements:
            dest, region = p.dest, p.region
            if dest.size == 0:
                continue
            a = arrays.get(id(p.compiled))
            if a is None:
                a = arrays[id(p.compiled)] = len(geometry)
                geometry.append(p.compiled.geometry)
            direct = p.direct
            grid = direct.layout.grid
            kept = iter(dest.strides)  # an axis an int picked is not in `dest`: one voxel, any stride
            strides = [0 if one else next(kept) for one in region.picked]
            pad = [0] * (_MAX_NDIM - len(strides))
            first = [lo // g for lo, g in zip(region.start, grid)]
            last = [(hi - 1) // g for hi, g in zip(region.stop, grid)]
            rows.append([a, dest.__array_interface__["data"][0], len(shards), *region.start, *pad, *region.stop,
                         *pad, *strides, *pad, *first, *pad, *(h - f + 1 for f, h in zip(first, last)), *pad])
            for shard in itertools.product(*(range(f, h + 1) for f, h in zip(first, last))):
                key, index = p.compiled.shard(direct, shard)
                fd = -1
                if index:
                    held = taken.get(key)
                    if held is None:
                        descriptors = direct.transport.descriptors()
                        assert descriptors is not None  # `route` admitted only transports that have them
                        held = taken[key] = (descriptors, descriptors.take(key))
                    fd = held[1]
                shards.append((fd, index))
        if not rows:
            return False
        return _run(rows, geometry, shards, mapper)
    finally:
        for descriptors, fd in taken.values():
            descriptors.give(fd)


def _run(rows: list[list[int]], geometry: list[list[int]], shards: list[tuple[int, int]],
         mapper: Callable[[Callable[[Any], None], Any], Any]) -> bool:
    kernel, tables = _kernel()
    entries = _entries()
    assert entries is not None  # `route` admitted nothing without them
    pread, decompress = entries
    arrays = np.array(geometry, dtype=np.int64)
    regions = np.array(rows, dtype=np.int64)
    chunks, parts = kernel.plan(arrays, regions, np.array(shards, dtype=np.int64).reshape(-1, 2))
    status = np.zeros(len(chunks), dtype=np.int64)
    counter = np.zeros(1, dtype=np.int64)

    def tokens() -> Iterator[None]:
        # Each token: one thread's run of the kernel, until every chunk is taken. A pool pulling tokens stops once
        # they are; a mapper that lists its tasks first gets one a chunk, the runs after the first finding none.
        for _ in range(len(chunks)):
            if counter[0] >= len(chunks):
                return
            yield None

    def run(_: None) -> None:
        kernel.work(arrays, regions, chunks, parts, status, counter, pread, decompress, tables)

    for _ in mapper(run, tokens()):
        pass
    return bool(status.any())
