"""The slab writer's own shard encoding: the same files zarr-python writes, read back identically by both readers;
and its installs, one by one or published together."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.convert.spec import StoreSpec
from labzarr.convert.write.arrays import Staged, Superseded, codecs, publish
from labzarr.convert.write.lock import LockInfo, lock_path
from labzarr.convert.write.state import staging_dir
from labzarr.convert.write.writer import DEFAULT_THREADS, VolumeWriter, create_volume_array
from labzarr.readers import Slab, VolumeHeader
from labzarr.store import Folder, StoreReader
from labzarr.store.content import array_content_sha256

SPECS = {
    "blosc-lz4+crc": StoreSpec(),
    "blosc-zstd+crc": StoreSpec(compressor="blosc-zstd", level=3),
    "zstd+crc": StoreSpec(compressor="zstd", level=5),
    "zstd": StoreSpec(compressor="zstd", level=1, checksum=False),
    "none+crc": StoreSpec(compressor="none"),
    "none": StoreSpec(compressor="none", checksum=False),
}

# (shape, chunks, shards): edge chunks, edge shards with inner chunks wholly outside the array, shards of a
# number of chunks that is not a power of two (Morton order over a ragged grid), one chunk per shard; and shards
# three chunks wide on two axes, where a job's Morton run of chunks does not fill a box (each chunk is then
# gathered alone, where a run that fills a box is gathered as one); and 32^3 chunks, whole ones a multiple of the
# compiled copy's tile (`transpose.py`), with edge chunks along y and z and an edge shard along x.
LAYOUTS = {
    "ragged": ((2, 37, 50, 23), (1, 8, 8, 8), (1, 16, 24, 16)),
    "three-wide": ((1, 48, 44, 16), (1, 8, 8, 8), (1, 24, 24, 16)),
    "pow2": ((1, 64, 32, 40), (1, 8, 8, 8), (1, 32, 32, 16)),
    "one-chunk-shards": ((1, 20, 9, 7), (1, 4, 4, 4), (1, 4, 4, 4)),
    "tiles": ((1, 96, 70, 80), (1, 32, 32, 32), (1, 64, 64, 64)),
}


def _header(shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> VolumeHeader:
    eye = tuple(tuple(float(i == j) for j in range(4)) for i in range(4))
    return VolumeHeader(kind="nifti", shape=shape, dtype=dtype, spacing=(1.0, 1.0, 1.0), affine=eye, orientation="RAS",
                        stream_axis=None, voxel_bytes=dtype.itemsize)


def _volume(shape: tuple[int, ...], dtype: str, fill: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if fill == "zeros":
        return np.zeros(shape, dtype)
    if fill == "smooth":  # compressible, as a scan is
        grid = np.indices(shape).sum(axis=0)
        return (grid % 50 + rng.integers(0, 3, shape)).astype(dtype)
    return rng.integers(0, 200, shape).astype(dtype)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
            and p.name != "zarr.json"}


def _write_both(tmp_path: Path, data: np.ndarray, chunks: tuple[int, ...], shards: tuple[int, ...], spec: StoreSpec,
                slabs: int, threads: int = DEFAULT_THREADS, compiled: bool = False) -> tuple[Path, Path, str]:
    """`data` written by zarr-python (one whole-array write) and by `VolumeWriter` in `slabs` slabs along x, each a
    strided (flipped, transposed) view as a reader hands it over, its chunks copied by numpy or, with `compiled`,
    by the compiled tile transposition: (zarr's array, ours, our content hash)."""
    h = _header(tuple(data.shape), data.dtype)
    theirs = Folder(tmp_path / "zarr.zarr") / "v"
    arr = create_volume_array(theirs, h, chunks=chunks, shards=shards, codecs=codecs(spec), attrs={})
    arr[...] = data
    writer = VolumeWriter(Folder(tmp_path / "ours.zarr"), "v", h, chunks=chunks, shards=shards, codecs=codecs(spec),
                          attrs={}, threads=threads, compiled=compiled)
    flipped = np.asfortranarray(data[:, ::-1])[:, ::-1]  # the same values, x fastest in memory, then flipped back
    step = -(-data.shape[1] // slabs // shards[1]) * shards[1]
    for lo in range(0, data.shape[1], step):
        hi = min(data.shape[1], lo + step)
        writer.write(Slab(region=(slice(0, data.shape[0]), slice(lo, hi), *(slice(0, n) for n in data.shape[2:])),
                          data=flipped[:, lo:hi]))
    content = writer.finish(complete="x")
    return Path(theirs), tmp_path / "ours.zarr" / "v", content


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_shards_are_byte_identical_to_zarr_python(tmp_path: Path, layout: tuple[tuple[int, ...], ...],
                                                  spec: StoreSpec) -> None:
    shape, chunks, shards = layout
    data = _volume(shape, "int16", "smooth")
    theirs, ours, content = _write_both(tmp_path, data, chunks, shards, spec, slabs=2)
    want, got = _files(theirs), _files(ours)
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    arr = zarr.open_array(tmp_path / "ours.zarr", path="v", mode="r")
    np.testing.assert_array_equal(arr[...], data)
    np.testing.assert_array_equal(StoreReader(tmp_path / "ours.zarr", backend="labzarr").read("v"), data)
    assert arr.attrs["content_sha256"] == content == array_content_sha256(arr)


@pytest.mark.parametrize("dtype", ["int16", "uint8", "float32"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_compiled_chunk_copy_writes_the_same_bytes(tmp_path: Path, layout: tuple[tuple[int, ...], ...],
                                                   dtype: str) -> None:
    """Chunks copied straight out of the slab by the compiled tile transposition (whole 32^3 chunks of one channel;
    numpy copies the rest: edge chunks, two channels, chunks narrower than a tile) give zarr-python's shards and
    the same content hash."""
    shape, chunks, shards = layout
    data = _volume(shape, dtype, "smooth")
    theirs, ours, content = _write_both(tmp_path, data, chunks, shards, StoreSpec(), slabs=2, compiled=True)
    want, got = _files(theirs), _files(ours)
    assert sorted(got) == sorted(want) and [k for k in want if got[k] != want[k]] == []
    arr = zarr.open_array(tmp_path / "ours.zarr", path="v", mode="r")
    assert arr.attrs["content_sha256"] == content == array_content_sha256(arr)


@pytest.mark.parametrize("threads", [1, 3])
def test_thread_count_changes_no_byte(tmp_path: Path, threads: int) -> None:
    """A worker's share of the cores (`TaskSettings.threads`) sets how many chunks are encoded at once, never what a
    shard file holds: one thread and three write zarr-python's bytes, chunk order and index alike."""
    shape, chunks, shards = LAYOUTS["ragged"]
    data = _volume(shape, "int16", "smooth")
    theirs, ours, _ = _write_both(tmp_path, data, chunks, shards, StoreSpec(), slabs=2, threads=threads)
    want, got = _files(theirs), _files(ours)
    assert sorted(got) == sorted(want) and [k for k in want if got[k] != want[k]] == []


@pytest.mark.parametrize(("dtype", "fill"), [("uint8", "random"), ("float32", "random"), ("int16", "zeros"),
                                             ("uint16", "random")])
def test_dtypes_and_all_fill_shards_match_zarr_python(tmp_path: Path, dtype: str, fill: str) -> None:
    shape, chunks, shards = LAYOUTS["ragged"]
    data = _volume(shape, dtype, fill)
    theirs, ours, _ = _write_both(tmp_path, data, chunks, shards, StoreSpec(), slabs=1)
    assert _files(ours) == _files(theirs)
    np.testing.assert_array_equal(StoreReader(tmp_path / "ours.zarr", backend="labzarr").read("v"), data)


def test_a_slab_that_splits_a_shard_is_refused(tmp_path: Path) -> None:
    shape, chunks, shards = LAYOUTS["pow2"]
    data = _volume(shape, "int16", "random")
    writer = VolumeWriter(Folder(tmp_path / "s.zarr"), "v", _header(shape, data.dtype), chunks=chunks, shards=shards,
                          codecs=codecs(StoreSpec()), attrs={})
    try:
        with pytest.raises(ValueError, match="does not cover whole shards"):
            writer.write(Slab(region=(slice(0, 1), slice(0, 8), slice(0, 32), slice(0, 40)), data=data[:, :8]))
    finally:
        writer.close()
    assert not list((tmp_path / "s.zarr").rglob("*.partial"))


def test_large_shards_are_flushed_as_they_are_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shard of 4 MiB of voxels or more starts its way to disk as soon as it is written, while the next are
    encoded; smaller ones are left to the install's fsync. The array is the same either way."""
    flushed: list[tuple[str, ...]] = []
    real = Folder.fsync_tree

    def recording(self: Folder, files: tuple[str, ...] | None = None, *, also: Sequence[Folder] = ()) -> None:
        if files is not None and files and files[0].startswith("c/"):
            flushed.append(tuple(files))
        real(self, files, also=also)

    monkeypatch.setattr(Folder, "fsync_tree", recording)
    data = _volume((1, 256, 128, 96), "int16", "smooth")  # 6 MiB: two shards of 3 MiB, or one of 6
    for shards, want in (((1, 128, 128, 96), []), ((1, 256, 128, 96), [("c/0/0/0/0",)])):
        flushed.clear()
        theirs, ours, _ = _write_both(tmp_path / str(shards[1]), data, (1, 32, 32, 32), shards, StoreSpec(), slabs=1)
        assert flushed == want
        assert _files(ours) == _files(theirs)


def test_deferred_installs_are_published_together(tmp_path: Path) -> None:
    """A batch's volumes are sealed in staging (`finish(defer=...)`), then `publish` makes them durable and moves
    each into place: until then nothing is at the final names; after, each reads back whole, `complete` set, and
    staging is empty. A store another run holds by then gets none of them (`Superseded`), and they stay staged."""
    store = Folder(tmp_path / "s.zarr")
    (store / "volumes").mkdir(parents=True)  # the run creates its groups before any task
    data = _volume((1, 40, 30, 20), "int16", "smooth")
    h = _header(tuple(data.shape), data.dtype)
    staged: list[Staged] = []
    for i in range(3):
        writer = VolumeWriter(store, f"volumes/v{i}", h, chunks=(1, 16, 16, 16), shards=(1, 32, 32, 32),
                              codecs=codecs(StoreSpec()), attrs={}, run_id="run-a")
        writer.write(Slab(region=tuple(slice(0, n) for n in data.shape), data=data + i))
        writer.finish(complete=f"sha-{i}", defer=staged)
        writer.close()  # a deferred array is not discarded
    assert len(staged) == 3 and not list((store / "volumes").iterdir())
    assert all(zarr.open_array(s.folder.zarr()).attrs["complete"] == f"sha-{i}" for i, s in enumerate(staged))

    lock_path(store).parent.mkdir(parents=True, exist_ok=True)
    other = LockInfo(pid=1, host="h", started="2026-12-05T00:00:00+00:00", run_id="run-b", process_started=0.0)
    lock_path(store).write_text(json.dumps(asdict(other)))  # another run holds the store now
    with pytest.raises(Superseded):
        publish(staged)
    assert not list((store / "volumes").iterdir()) and len(list(staging_dir(store).iterdir())) == 3

    lock_path(store).write_text("")
    publish([Staged(s.store, s.name, s.folder, "") for s in staged])
    for i in range(3):
        arr = zarr.open_array((store / f"volumes/v{i}").zarr())
        np.testing.assert_array_equal(arr[...], data + i)
        assert arr.attrs["complete"] == f"sha-{i}"
    assert not list(staging_dir(store).iterdir())
