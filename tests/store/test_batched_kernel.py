"""The compiled batched read (store/_batched.py) against the Python path and zarr-python: dtypes, edge regions,
shard layouts, fill values, destinations of any strides; which arrays it takes; damage raising the Python path's
errors; its crc32c against the crc32c package."""

from __future__ import annotations

import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest

from labzarr.store._batched import route
from labzarr.store.read import ChecksumError, StoreReader

from .test_reader import DTYPES, NAME, Case, flip, kind, selections, shard_entry, write, zip_store

CASES = [
    *(pytest.param(kind("volume", dtype=dtype, written="part" if n % 2 else "all"), id=f"volume-{dtype}")
      for n, dtype in enumerate(DTYPES)),
    pytest.param(kind("role2d", dtype="uint16", codec="blosc-zstd"), id="role2d-blosc-zstd"),
    pytest.param(kind("stack", dtype="uint8"), id="stack"),
    pytest.param(kind("locations", dtype="float64", written="part"), id="locations"),
    pytest.param(kind("volume", index_location="start", written="part"), id="index-at-start"),
    pytest.param(kind("volume", keys=("default", ".")), id="default-keys-dot"),
    pytest.param(kind("volume", written="part", fill=-5), id="missing-shards-fill"),
    pytest.param(kind("volume", written="part", fill=float("nan"), dtype="float32"), id="missing-nan-fill"),
    pytest.param(kind("role2d", written="part", fill=True, dtype="bool"), id="missing-bool-fill"),
    pytest.param(kind("volume", empty_chunks=False, written="zeros"), id="empty-chunks-not-written"),
    pytest.param(Case((1, 70, 45, 33), (1, 16, 8, 32), (1, 32, 24, 32)), id="uneven-chunks-and-shards"),
    pytest.param(Case((1, 1, 1, 1), (1, 8, 8, 8), (1, 16, 16, 16)), id="one-voxel"),
]


def python_path(reader: StoreReader, name: str = NAME) -> StoreReader:
    """`reader` with its array's compiled path turned off: every batch read by the Python path."""
    array = reader.array(name)
    assert array._direct is not None
    array._direct.batched = None
    return reader


def same(got: list[np.ndarray], want: list[np.ndarray], sels: list[Any]) -> None:
    for g, w, sel in zip(got, want, sels):
        assert (g.shape, g.dtype) == (w.shape, w.dtype), sel
        assert g.tobytes() == w.tobytes(), sel


@pytest.mark.parametrize("case", CASES)
def test_compiled_batches_equal_the_python_path_and_zarr(tmp_path: Path, case: Case) -> None:
    z = write(tmp_path / "s.zarr", case)
    sels = selections(case, seed=3, n=12) + selections(case, seed=5, n=12)
    requests = [(NAME, sel) for sel in sels]
    reader = StoreReader(tmp_path / "s.zarr", backend="labzarr")
    compiled = reader.array(NAME)._direct
    assert compiled is not None and compiled.batched is not None  # the compiled path reads it
    want = [np.asarray(z[sel]) for sel in sels]
    python = python_path(StoreReader(tmp_path / "s.zarr", backend="labzarr")).read_many(requests)
    same(python, want, sels)
    same(reader.read_many(requests), want, sels)
    with ThreadPoolExecutor(3) as pool:  # several threads on one batch, each taking chunks off the counter
        same(reader.read_many(requests, mapper=pool.map), want, sels)
    # Destinations of any strides: every region read into a view of a larger array, reversed along the last axis
    # where it has one.
    outs = []
    for w in want:
        big = np.full(tuple(n + 2 for n in w.shape), 7, dtype=w.dtype)
        outs.append(big[tuple(slice(1, 1 + n) for n in w.shape)][..., ::-1] if w.ndim else big[()][...])
    got = reader.read_many([(NAME, sel) for sel in sels], out=outs)
    assert all(g is o for g, o in zip(got, outs))
    same([np.ascontiguousarray(o) for o in outs], want, sels)


def test_a_batch_of_several_arrays_shares_chunks_once(tmp_path: Path) -> None:
    """Regions of two arrays and regions sharing chunks, in one batch: each as read alone."""
    root = tmp_path / "s.zarr"
    za = write(root, kind("volume", dtype="int16"), name="a")
    zb = write(root, kind("volume", dtype="float32", written="part", fill=2.5), name="b")
    requests: list[tuple[str, Any]] = []
    for name in ("a", "b"):
        requests += [(name, (slice(None), slice(3, 30), slice(0, 20), slice(4, 19))),
                     (name, (1, slice(10, 37), 5, slice(None))), (name, (slice(None), slice(3, 30)))]
    want = [np.asarray({"a": za, "b": zb}[name][sel]) for name, sel in requests]
    with ThreadPoolExecutor(2) as pool:
        same(StoreReader(root).read_many(requests, mapper=pool.map), want, requests)


@pytest.mark.parametrize("case, zipped, why", [
    pytest.param(kind("volume"), True, "its store is not a local folder", id="zip"),
    pytest.param(kind("volume", sharded=False), False, "it is not sharded", id="unsharded"),
    pytest.param(kind("volume", codec="zstd"), False, "its codecs are ['zstd', 'crc32c']", id="zstd"),
    pytest.param(kind("volume", crc=False), False, "its codecs are ['blosc'], not", id="no-crc32c"),
    pytest.param(kind("volume", dtype="int32", endian="big"), False, "its stored elements are >i4", id="big-endian"),
])
def test_the_route_names_why_an_array_is_read_by_the_python_path(tmp_path: Path, case: Case, zipped: bool,
                                                                   why: str) -> None:
    z = write(tmp_path / "s.zarr", case)
    reader = StoreReader(zip_store(tmp_path / "s.zarr", tmp_path / "s.zip") if zipped else tmp_path / "s.zarr")
    direct = reader.array(NAME)._direct
    assert direct is not None and direct.batched is None
    assert route(direct) is not None and route(direct).startswith(why)
    sel = (slice(None), slice(5, 30), slice(2, 20), slice(0, 21))
    same(reader.read_many([(NAME, sel)]), [np.asarray(z[sel])], [sel])


def test_a_read_only_destination_is_refused_as_before(tmp_path: Path) -> None:
    write(tmp_path / "s.zarr", kind("volume"))
    sel = (0, slice(0, 4), slice(0, 4), slice(0, 4))
    out = np.zeros((4, 4, 4), np.int16)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        StoreReader(tmp_path / "s.zarr").read_many([(NAME, sel)], out=[out])
    assert not out.any()


def damage(root: Path, target: str) -> None:
    """Damage chunk (0, 1, 0, 1) of the first shard of `kind("volume")`-like arrays of 8³ chunks, 16³ shards."""
    per = 2 * 2 * 2
    shard = root / NAME / "c/0/0/0/0"
    offset, nbytes = shard_entry(shard, per, 1 * 4 + 0 * 2 + 1)
    if target == "crc":
        flip(shard, offset + nbytes // 2)
    elif target == "long":  # the index (its crc32c made to match) gives the chunk more bytes than a frame has
        blob = bytearray(shard.read_bytes())
        at = len(blob) - (16 * per + 4) + 16 * (1 * 4 + 0 * 2 + 1) + 8
        blob[at:at + 8] = (nbytes + 5000).to_bytes(8, "little")
        blob[-4:] = crc32c.crc32c(bytes(blob[-(16 * per + 4):-4])).to_bytes(4, "little")
        shard.write_bytes(bytes(blob))
    elif target == "short":  # the shard cut inside the chunk, its index kept at the end: a short read
        blob = shard.read_bytes()
        shard.write_bytes(blob[:offset + nbytes // 2] + blob[-(16 * per + 4):])
    else:  # blosc's header says another size, the crc32c made to match: the checksum passes, the size does not
        blob = bytearray(shard.read_bytes())
        blob[offset + 4:offset + 8] = (8 * 8 * 8 * 2 * 2).to_bytes(4, "little")
        body = bytes(blob[offset:offset + nbytes - 4])
        blob[offset + nbytes - 4:offset + nbytes] = crc32c.crc32c(body).to_bytes(4, "little")
        shard.write_bytes(bytes(blob))


@pytest.mark.parametrize("target, expect", [
    pytest.param("crc", r"chunk \(0, 1, 0, 1\) in shard '.*c/0/0/0/0'.*crc32c mismatch", id="crc32c"),
    pytest.param("short", r"chunk \(0, [01], 0, [01]\) in shard .*cannot read it", id="short-read"),
    pytest.param("long", r"chunk \(0, [01], 0, [01]\) in shard .*cannot read it", id="longer-than-a-frame"),
    pytest.param("header", r"chunk \(0, 1, 0, 1\) in shard .*blosc cannot decode it", id="header"),
])
def test_damage_in_a_batch_raises_the_python_paths_error(tmp_path: Path, target: str, expect: str) -> None:
    root = tmp_path / "s.zarr"
    write(root, Case((2, 37, 29, 21), (1, 8, 8, 8), (1, 16, 16, 16)))
    damage(root, target)
    good = (slice(None), slice(0, 8), slice(0, 8), slice(0, 8))
    bad = (slice(None), slice(4, 16), slice(0, 8), slice(8, 16))
    requests = [(NAME, good), (NAME, bad), (NAME, (0, slice(20, 37)))]
    messages = []
    for reader in (StoreReader(root), python_path(StoreReader(root))):
        assert (reader.array(NAME)._direct.batched is not None) == (not messages)
        with pytest.raises(ChecksumError, match=expect) as info:
            reader.read_many(requests)
        messages.append(str(info.value))
        with ThreadPoolExecutor(2) as pool, pytest.raises(ChecksumError, match=expect):
            reader.read_many(requests, mapper=pool.map)
        reader.read_many([(NAME, good)])  # a chunk beside the damaged one still reads
    assert messages[0] == messages[1]


STRIPES = 3 * 2048  # `_batched_kernel.STRIPE`'s blocks: lengths around them run both the joined and the plain loop


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 1000, STRIPES - 1, STRIPES, STRIPES + 1,
                               2 * STRIPES + 13, 33554, 65536 + 3])
def test_the_kernels_crc32c_is_the_packages(n: int) -> None:
    from labzarr.store import _batched_kernel

    assert _batched_kernel.STRIPE * 3 == STRIPES
    tables = _batched_kernel.shifts()
    data = np.random.default_rng(n).integers(0, 256, n + 3, dtype=np.uint8)
    for start in (0, 1, 3):  # unaligned starts too
        view = data[start:start + n]
        assert _batched_kernel._crc32c(tables, view.ctypes.data, n) == crc32c.crc32c(view.tobytes())


def test_a_zip_of_the_same_store_reads_the_same_batches(tmp_path: Path) -> None:
    case = kind("volume", written="part")
    z = write(tmp_path / "s.zarr", case)
    sels = selections(case, seed=9)
    zipped = StoreReader(zip_store(tmp_path / "s.zarr", tmp_path / "s.zip", zipfile.ZIP_DEFLATED))
    same(zipped.read_many([(NAME, s) for s in sels]), [np.asarray(z[s]) for s in sels], sels)
