"""The chunk planner (pure) and the slab writer: chunk-aligned writes, the content hash, the memory bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.convert.plan.chunks import plan_chunks, plan_shards, slab_bytes
from labzarr.convert.spec import StoreSpec
from labzarr.convert.write.arrays import codecs
from labzarr.convert.write.writer import VolumeWriter, c_order_copy, copy_into, gather_copy
from labzarr.readers import Limits, NiftiReader, read_head
from labzarr.store import Folder
from labzarr.store.content import array_content_sha256

from ..readers.test_slabs import AFFINES, _canonical, _write

MiB = 1 << 20


@pytest.mark.parametrize(("shape", "voxel_bytes", "axis", "budget", "want"), [
    pytest.param((1, 512, 512, 300), 2, 3, 128 * MiB, (1, 64, 64, 64), id="ct-fits"),
    pytest.param((1, 30, 20, 10), 2, 3, 128 * MiB, (1, 30, 20, 10), id="clipped-to-extent"),
    pytest.param((2, 1024, 1024, 1000), 2, 3, 64 * MiB, (1, 64, 64, 32), id="big-plane-thinned"),
    pytest.param((1, 4096, 4096, 100), 12, 3, 128 * MiB, (1, 64, 64, 1), id="huge-plane-one-per-chunk"),
    pytest.param((1, 300, 512, 512), 2, 1, 16 * MiB, (1, 32, 64, 64), id="sagittal-stream-axis-x"),
    pytest.param((3, 100, 100, 100), 1, None, 1, (1, 64, 64, 64), id="in-memory-not-thinned"),
])
def test_plan_chunks(shape, voxel_bytes, axis, budget, want) -> None:
    got = plan_chunks(shape, (64, 64, 64), voxel_bytes=voxel_bytes, stream_axis=axis, budget=budget)
    assert got == want
    if axis is not None and got[axis] > 1:
        assert slab_bytes(shape, got, voxel_bytes=voxel_bytes, stream_axis=axis) <= budget


def test_c_order_copy_of_any_view() -> None:
    a = np.asfortranarray(np.arange(70 * 130 * 90, dtype=np.int16).reshape(70, 130, 90))
    for view in (a, a[::-1, :, ::-1], a.transpose(2, 0, 1), a[5:60, ::-1, 3:80].transpose(1, 2, 0)):
        out = c_order_copy(view[np.newaxis], np.dtype(np.float32))
        assert out.flags.c_contiguous and out.dtype == np.float32
        np.testing.assert_array_equal(out, view[np.newaxis])


@pytest.mark.parametrize("shape", [(1, 32, 32, 32), (2, 40, 70, 20), (1, 130, 70, 90)],
                         ids=["one-chunk", "one-tile", "many-tiles"])
def test_c_order_copy_equals_numpy_for_every_flip_and_axis_order(shape: tuple[int, ...]) -> None:
    """Flipped axes are read forwards and written backwards; whatever the flips, order, dtype or tile count,
    the copy is numpy's."""
    import itertools

    base = np.random.default_rng(1).integers(-2000, 2000, (3, 140, 80, 100)).astype(np.int16)
    region = base[tuple(slice(1, 1 + n) for n in shape)]
    for order in ((0, 1, 2, 3), (0, 3, 2, 1), (2, 0, 3, 1)):
        buffer = np.ascontiguousarray(region.transpose(order)).transpose(np.argsort(order))  # memory in `order`
        for flips in itertools.product((1, -1), repeat=4):
            view = buffer[tuple(slice(None, None, f) for f in flips)]
            for dtype in (None, np.dtype(np.float32)):
                out = c_order_copy(view, dtype)
                assert out.flags.c_contiguous and out.dtype == (dtype or view.dtype)
                np.testing.assert_array_equal(out, np.ascontiguousarray(view, dtype=dtype))


def test_gather_then_copy_into_equals_numpy_for_every_flip_and_axis_order() -> None:
    """The shard writer's two-step copy: a region gathered in memory order (`gather_copy`) indexes as the view
    it came from, and each chunk of it C-ordered into a reused buffer (`copy_into`, with a cast) is numpy's copy."""
    import itertools

    base = np.random.default_rng(2).integers(-2000, 2000, (2, 70, 40, 50)).astype(np.int16)
    for order in ((0, 1, 2, 3), (0, 3, 2, 1), (2, 0, 3, 1)):
        buffer = np.ascontiguousarray(base.transpose(order)).transpose(np.argsort(order))  # memory in `order`
        for flips in itertools.product((1, -1), repeat=4):
            view = buffer[tuple(slice(None, None, f) for f in flips)][:, 3:67, 5:37, 1:41]
            box = gather_copy(view)
            assert box.shape == view.shape and box.base is not view.base
            np.testing.assert_array_equal(box, view)
            for dtype in (np.dtype(np.int16), np.dtype(np.float32)):
                out = np.empty((2, 32, 16, 20), dtype)
                for sel in itertools.product(*(range(0, n, c) for n, c in zip(view.shape[1:], out.shape[1:]))):
                    region = (slice(None), *(slice(s, s + c) for s, c in zip(sel, out.shape[1:])))
                    got = copy_into(box[region], out)
                    assert got is out and out.flags.c_contiguous
                    np.testing.assert_array_equal(out, np.ascontiguousarray(view[region], dtype=dtype))


@pytest.mark.parametrize("name", ["lps", "sagittal"])
def test_streamed_array_equals_canonical_and_content_hash_recomputes(tmp_path: Path, name: str) -> None:
    rng = np.random.default_rng(3)
    path = _write(tmp_path, rng.integers(-1000, 1000, (70, 45, 33, 2)).astype(np.int16), AFFINES[name])
    source = NiftiReader().open(path, Limits(), read_head(path))
    h = source.header
    chunks = plan_chunks(h.shape, (16, 16, 16), voxel_bytes=h.voxel_bytes, stream_axis=h.stream_axis,
                         budget=40 * 45 * 8 * 2)  # forces thinned chunks along the stream axis
    assert chunks[h.stream_axis] < 16
    writer = VolumeWriter(Folder(tmp_path / "s.zarr"), "v", h, chunks=chunks, codecs=codecs(StoreSpec()),
                          attrs={"a": 1})
    for slab in source.slabs(chunks):
        writer.write(slab)
    content = writer.finish(complete="abc")
    arr = zarr.open_array(tmp_path / "s.zarr", path="v", mode="r")
    np.testing.assert_array_equal(arr[...], _canonical(path))
    assert tuple(arr.chunks) == chunks
    assert arr.attrs["content_sha256"] == content == array_content_sha256(arr)
    assert arr.attrs["complete"] == "abc" and arr.attrs["a"] == 1


@pytest.mark.parametrize(("shape", "chunks", "axis", "budget", "want"), [
    pytest.param((1, 512, 512, 300), (1, 32, 32, 32), 3, 128 * MiB, (1, 256, 256, 128), id="ct"),
    pytest.param((1, 100, 40, 20), (1, 32, 32, 20), 3, 128 * MiB, (1, 128, 64, 20), id="whole-chunks-clipped"),
    pytest.param((1, 1024, 1024, 1000), (1, 32, 32, 32), 3, 64 * MiB, (1, 256, 256, 32), id="thinned-to-budget"),
    pytest.param((1, 300, 512, 512), (1, 32, 32, 32), 1, 16 * MiB, (1, 32, 256, 128), id="stream-axis-x"),
    pytest.param((2, 64, 64, 64), (1, 32, 32, 32), None, 1, (1, 64, 64, 64), id="in-memory-not-thinned"),
])
def test_plan_shards(shape, chunks, axis, budget, want) -> None:
    got = plan_shards(shape, chunks, (256, 256, 128), voxel_bytes=2, stream_axis=axis, budget=budget)
    assert got == want
    assert all(s % c == 0 for s, c in zip(got, chunks))  # a shard holds whole chunks
    if axis is not None and got[axis] > chunks[axis]:
        assert slab_bytes(shape, got, voxel_bytes=2, stream_axis=axis) <= budget
    assert plan_shards(shape, chunks, None, voxel_bytes=2, stream_axis=axis) is None


@pytest.mark.parametrize("name", ["lps", "sagittal"])
def test_sharded_stream_equals_canonical_in_few_files(tmp_path: Path, name: str) -> None:
    rng = np.random.default_rng(4)
    path = _write(tmp_path, rng.integers(-1000, 1000, (70, 45, 33, 2)).astype(np.int16), AFFINES[name])
    source = NiftiReader().open(path, Limits(), read_head(path))
    h = source.header
    plane = h.voxel_bytes * int(np.prod([n for i, n in enumerate(h.shape) if i not in (0, h.stream_axis)]))
    budget = 16 * plane  # slabs of 16 planes: shards are thinned along the stream axis
    chunks = plan_chunks(h.shape, (8, 8, 8), voxel_bytes=h.voxel_bytes, stream_axis=h.stream_axis, budget=budget)
    shards = plan_shards(h.shape, chunks, (32, 32, 32), voxel_bytes=h.voxel_bytes, stream_axis=h.stream_axis,
                         budget=budget)
    assert shards is not None and shards[h.stream_axis] < 32
    writer = VolumeWriter(Folder(tmp_path / "s.zarr"), "v", h, chunks=chunks, shards=shards, codecs=codecs(StoreSpec()),
                          attrs={})
    for slab in source.slabs(shards):
        writer.write(slab)
    content = writer.finish(complete="abc")
    arr = zarr.open_array(tmp_path / "s.zarr", path="v", mode="r")
    np.testing.assert_array_equal(arr[...], _canonical(path))
    assert tuple(arr.chunks) == chunks and tuple(arr.shards) == shards
    assert arr.attrs["content_sha256"] == content == array_content_sha256(arr)
    files = [p for p in (tmp_path / "s.zarr" / "v").rglob("*") if p.is_file() and p.name != "zarr.json"]
    assert len(files) == np.prod([-(-n // s) for n, s in zip(h.shape, shards)])  # one file per shard
