"""One shard file of a sharded zarr v3 volume array, encoded chunk by chunk: zarr-python's bytes, in bounded memory.

Why not zarr-python: its sharding codec holds a whole shard while writing it (the voxels, every encoded
chunk, then their concatenation), so a writer's memory would grow with the shard shape; here a handful
of inner chunks are in flight at a time, whatever the shard holds.

Invariant: a shard is written as zarr-python writes a whole shard of the same voxels (tests/convert/test_writer.py
compares the files byte for byte): every inner chunk that intersects the array, encoded at the full chunk shape
(edge chunks padded with the fill value) by the array's own codec chain, stored back to back in Morton order;
then the index, (offset, nbytes) as little-endian uint64 per inner chunk in C order (2^64-1 for a chunk wholly
outside the array), and the index's crc32c. `ShardCodec.of` accepts only chains it encodes exactly so (what
`codecs.zarr_codecs` makes); for any other the caller lets zarr-python write. `decode_index` reads the index
back, for the reader.

A shard file appears whole: it is written through its location's `write_stream` (a folder: a `.partial` file
beside its final name, renamed, what zarr's LocalStore does and what the next run sweeps after a kill; a URL:
the encoded chunks gathered and PUT once, which is atomic there).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import crc32c
import numpy as np
import numpy.typing as npt

from .codecs import ChunkDamage, Encode, encoder

if TYPE_CHECKING:
    import zarr

    from ..content import ChunkDigests
    from ..location import Location

__all__ = ["ABSENT", "CRC", "INDEX_ENTRY", "CopyInto", "Gather", "ShardCodec", "decode_index", "index_nbytes"]

ABSENT = 2**64 - 1  # the index entry (offset and nbytes) of an inner chunk that is not stored
INDEX_ENTRY = 16  # (offset, nbytes) as two little-endian uint64 per inner chunk
CRC = 4
_IN_FLIGHT_BYTES = 16 << 20  # voxels of the inner chunks being encoded at once (each also has its encoded copy)
_MIN_WINDOW = 4  # jobs in flight at least (memory allowing), whatever the thread count
_R = TypeVar("_R")
_JOB_CHUNKS, _JOB_BYTES = 8, 1 << 20  # inner chunks handed to an encoding thread at once: at most these
Gather = Callable[[npt.NDArray[Any]], npt.NDArray[Any]]  # a region of the voxels, copied compact (or as it is)
CopyInto = Callable[[npt.NDArray[Any], npt.NDArray[Any]], npt.NDArray[Any]]  # (view, C-ordered out) -> out


@dataclass(frozen=True, slots=True)
class ShardCodec:
    """How one sharded array's shards are laid out and encoded (from its zarr metadata)."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill: np.generic
    chunks: tuple[int, ...]  # the inner chunk
    shards: tuple[int, ...]
    steps: tuple[Encode, ...]  # bytes-to-bytes encoders in order, after the little-endian bytes
    keys: Callable[[tuple[int, ...]], str]  # a shard's key below the array, from its grid coordinates

    @classmethod
    def of(cls, array: zarr.Array[Any]) -> ShardCodec | None:
        """The codec of `array`'s shards, or None when it is not sharded or has a chain this module does not write."""
        if array.shards is None:
            return None
        outer: object = array.metadata.to_dict()["codecs"]
        conf = _conf(outer[0], "sharding_indexed") if isinstance(outer, Sequence) and len(outer) == 1 else None
        if conf is None or conf.get("index_location", "end") != "end":
            return None
        index_codecs = list(conf.get("index_codecs", ()))
        if [c.get("name") if isinstance(c, Mapping) else c for c in index_codecs] != ["bytes", "crc32c"] \
                or _conf(index_codecs[0], "bytes", endian=True) is None:
            return None
        inner = list(conf.get("codecs", ()))
        if not inner or _conf(inner[0], "bytes", endian=array.dtype.itemsize > 1) is None:
            return None
        steps: list[Encode] = []
        for c in inner[1:]:
            step = encoder(c)
            if step is None:
                return None
            steps.append(step)
        meta = array.metadata
        return cls(shape=tuple(int(n) for n in array.shape), dtype=np.dtype(array.dtype),
                   fill=cast(np.generic, np.asarray(array.fill_value, dtype=array.dtype)[()]),
                   chunks=tuple(int(c) for c in array.chunks), shards=tuple(int(s) for s in array.shards),
                   steps=tuple(steps), keys=meta.encode_chunk_key)

    def write(self, folder: Location, coords: Sequence[int], data: npt.NDArray[Any], *, pool: ThreadPoolExecutor,
              threads: int, gather: Gather, copy: CopyInto) -> ChunkDigests:
        """Write shard `coords` of the array at `folder` from `data` (its voxels, trimmed to the array's end; any
        strides), and return the chunks' digests. The chunks go to `pool` (of `threads`) a job at a time: a job's
        region is first handed to `gather` (which copies it compact in memory order, long runs out of the strided
        slab, or returns it as it is for a `copy` that reads the slab itself), then each of its chunks C-ordered
        out of what `gather` returned by `copy(view, out)` (into `out`, a C-contiguous buffer of the view's
        shape), hashed and encoded; the shard is written in order. Raises OSError (or the URL store's
        errors)."""
        per = tuple(s // c for s, c in zip(self.shards, self.chunks))
        first = tuple(int(k) * p for k, p in zip(coords, per))  # the shard's first chunk, in array chunk indices
        grid = tuple(-(-n // c) for n, c in zip(self.shape, self.chunks))
        stored = [local for local in _morton(per) if all(f + i < g for f, i, g in zip(first, local, grid))]
        nbytes = self.dtype.itemsize * math.prod(self.chunks)
        # Chunks go to the pool a few at a time: one future, one wake-up and one write per job rather than per
        # chunk, which left this thread (submitting, collecting, writing) the bottleneck of small chunks.
        per_job = max(1, min(_JOB_CHUNKS, _JOB_BYTES // max(1, nbytes)))
        jobs = [stored[i : i + per_job] for i in range(0, len(stored), per_job)]
        # Jobs in flight: enough that every thread has a next one, and at least _MIN_WINDOW, so a pool of one thread
        # is not left idle while this thread waits for its one job (a worker's share of 2 cores is one thread).
        window = max(2, min(max(_MIN_WINDOW, 2 * threads), _IN_FLIGHT_BYTES // max(1, nbytes * per_job)))
        index = np.full((*per, 2), ABSENT, dtype="<u8")
        digests: ChunkDigests = {}
        pending: deque[tuple[list[tuple[int, ...]], Future[list[tuple[bytes, bytes]]]]] = deque()

        with (folder / self.keys(tuple(int(k) for k in coords))).write_stream() as write:
            out = _ShardFile(write)
            # One job has nothing to overlap with: it is encoded here, and a small volume (a shard of up to
            # _JOB_CHUNKS chunks, most small series) starts and stops no encoding thread.
            submit = pool.submit if len(jobs) > 1 else _here
            for job in jobs:
                pending.append((job, submit(self._encode_job, data, job, gather, copy)))
                if len(pending) >= window:
                    self._put(out, index, digests, first, *pending.popleft())
            while pending:
                self._put(out, index, digests, first, *pending.popleft())
            raw = index.tobytes()
            out.append(raw + crc32c.crc32c(raw).to_bytes(4, "little"))
        return digests

    def _put(self, out: _ShardFile, index: npt.NDArray[np.uint64], digests: ChunkDigests, first: tuple[int, ...],
             job: list[tuple[int, ...]], done: Future[list[tuple[bytes, bytes]]]) -> None:
        encoded = done.result()
        at = out.size
        for local, (digest, chunk) in zip(job, encoded, strict=True):
            index[local] = (at, len(chunk))
            at += len(chunk)
            digests[tuple(f + i for f, i in zip(first, local))] = digest
        out.append(b"".join(chunk for _, chunk in encoded))

    def _encode_job(self, data: npt.NDArray[Any], job: list[tuple[int, ...]], gather: Gather,
                    copy: CopyInto) -> list[tuple[bytes, bytes]]:
        """Each chunk of `job` (local positions in the shard whose voxels are `data`), in order: (digest, encoded).
        Chunks that tile a box (a Morton run of a whole shard does) are gathered as that one box: longer runs
        out of the slab than chunk by chunk, and the transposition then reads from cache."""
        lo, hi = [min(axis) for axis in zip(*job)], [max(axis) + 1 for axis in zip(*job)]
        tiles = math.prod(h - low for h, low in zip(hi, lo)) == len(job)
        boxes = [(lo, job)] if tiles else [(list(p), [p]) for p in job]
        buffer = np.empty(self.chunks, dtype=self.dtype)  # every whole chunk of the job is copied here in turn
        out: list[tuple[bytes, bytes]] = []
        for start, chunks in boxes:
            stop = [max(axis) + 1 for axis in zip(*chunks)]
            box = gather(data[tuple(slice(s * c, e * c) for s, e, c in zip(start, stop, self.chunks))])
            for local in chunks:
                view = box[tuple(slice((i - s) * c, (i - s + 1) * c) for i, s, c in zip(local, start, self.chunks))]
                target = buffer if view.shape == self.chunks else np.empty(view.shape, dtype=self.dtype)
                out.append(self._encode(copy(view, target)))
        return out

    def _encode(self, block: npt.NDArray[Any]) -> tuple[bytes, bytes]:
        """(sha256 of the chunk's voxels as the array holds them, trimmed: `block`, C-ordered; its encoded bytes)."""
        digest = hashlib.sha256(block.data).digest()
        if block.shape != self.chunks:  # an edge chunk: encoded at full size, as zarr pads it
            full = np.full(self.chunks, self.fill, dtype=self.dtype)
            full[tuple(slice(0, n) for n in block.shape)] = block
            block = full
        encoded: bytes | npt.NDArray[Any] = block.astype(self.dtype.newbyteorder("<"), copy=False).reshape(-1).view("B")
        for step in self.steps:
            encoded = step(encoded)
        return digest, bytes(encoded)


def _here(fn: Callable[..., _R], /, *args: Any) -> Future[_R]:
    """`fn(*args)` run in this thread, as a finished future (its exception, if it raised, kept for `result`)."""
    done: Future[_R] = Future()
    try:
        done.set_result(fn(*args))
    except Exception as exc:  # raised again by `result`, where a pool's future would raise it
        done.set_exception(exc)
    return done


def index_nbytes(chunks_per_shard: Sequence[int], *, crc: bool) -> int:
    """The encoded size of a shard index of `chunks_per_shard` inner chunks per axis."""
    return INDEX_ENTRY * math.prod(chunks_per_shard) + (CRC if crc else 0)


def decode_index(data: bytes, *, crc: bool) -> list[list[int]]:
    """The (offset, nbytes) of each inner chunk (C order; `ABSENT` twice for one never stored) from a shard's
    encoded index; raises ChunkDamage when its crc32c fails."""
    body = len(data) - CRC if crc else len(data)
    if crc and crc32c.crc32c(memoryview(data)[:body]) != int.from_bytes(data[body:], "little"):
        raise ChunkDamage("crc32c mismatch")
    out: list[list[int]] = np.frombuffer(data, dtype="<u8", count=body // 8).reshape(-1, 2).tolist()
    return out


class _ShardFile:
    """A shard's bytes as they are written (through its location's `write_stream`), and how many so far: each
    chunk's offset in the shard index."""

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self.write, self.size = write, 0

    def append(self, data: bytes) -> None:
        self.write(data)
        self.size += len(data)


def _conf(codec: object, name: str, *, endian: bool = False) -> Mapping[str, Any] | None:
    """`codec`'s configuration when it is the codec `name` (with little-endian bytes when `endian`), else None."""
    if not isinstance(codec, Mapping) or codec.get("name") != name:
        return None
    conf = codec.get("configuration") or {}
    if endian and conf.get("endian") != "little":
        return None
    return conf


def _morton(per: Sequence[int]) -> list[tuple[int, ...]]:
    """Every position in a grid of `per`, in zarr's Morton order: bits interleaved axis by axis, each axis
    contributing only the bits its own extent needs."""
    bits = [(n - 1).bit_length() for n in per]

    def code(pos: tuple[int, ...]) -> int:
        z, at = 0, 0
        for bit in range(max(bits, default=0)):
            for axis, width in enumerate(bits):
                if bit < width:
                    z |= ((pos[axis] >> bit) & 1) << at
                    at += 1
        return z

    return sorted(itertools.product(*(range(n) for n in per)), key=code)
