"""The record of stored files: a chunk never written reads as the fill value, a recorded file that is gone or
resized is an error, and an array without a record reads as zarr reads it, with a warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.store import ChecksumError, Folder, StoreReader, UncheckedStoreWarning
from labzarr.store.format.written import STORED, StoredFiles


def sparse_array(root: Path, *, shards: tuple[int, ...] | None) -> np.ndarray:
    """A mask-like array, zero but for one corner; zarr stores no all-zero chunk (write_empty_chunks off)."""
    data = np.zeros((1, 24, 16, 8), dtype="uint8")
    data[0, :8, :8, :8] = 3
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="m", shape=data.shape, dtype=data.dtype,
                            chunks=(1, 8, 8, 8), shards=shards, fill_value=0,
                            compressors=(zarr.codecs.ZstdCodec(level=1), zarr.codecs.Crc32cCodec()))
    arr[...] = data
    return data


@pytest.mark.parametrize("shards", [None, (1, 8, 16, 8)], ids=["chunked", "sharded"])
@pytest.mark.parametrize("backend", ["labzarr", "zarr"])
def test_chunks_never_written_read_as_fill_and_a_lost_file_is_an_error(tmp_path: Path, shards, backend) -> None:
    root = tmp_path / "s.zarr"
    data = sparse_array(root, shards=shards)
    arr = zarr.open_array(zarr.storage.LocalStore(root), path="m", mode="r+")
    record = StoredFiles.of_array(arr, Folder(root / "m").sizes())
    assert 0 in record.nbytes and any(record.nbytes), record  # some files never written, some written
    arr.update_attributes({STORED: record.encode()})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncheckedStoreWarning)
        np.testing.assert_array_equal(StoreReader(root, backend=backend).read("m"), data)
    stored = sorted(p for p in (root / "m" / "c").rglob("*") if p.is_file())
    stored[0].unlink()
    with pytest.raises(ChecksumError, match=r"'m'.*missing, where the store recorded [\d,]+ B written"):
        StoreReader(root, backend=backend).read("m")
    # A region away from the lost file still reads.
    far = StoreReader(root, backend=backend).read("m", (0, slice(16, 24)))
    np.testing.assert_array_equal(far, data[0, 16:24])


def test_a_resized_file_is_an_error_even_without_checksums(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=(1, 16, 8, 8), dtype="int16",
                            chunks=(1, 8, 8, 8), fill_value=0, compressors=None)
    arr[...] = np.arange(16 * 64, dtype="int16").reshape(1, 16, 8, 8)
    arr.update_attributes({STORED: StoredFiles.of_array(arr, Folder(root / "v").sizes()).encode()})
    chunk = root / "v" / "c/0/1/0/0"
    chunk.write_bytes(chunk.read_bytes() + b"\0\0")  # the same voxels decode, but it is not what was written
    with pytest.raises(ChecksumError, match=r"holds 1,026 B, the store recorded 1,024 B"):
        StoreReader(root, backend="labzarr").read("v")


def test_an_array_without_a_record_reads_as_zarr_does_and_warns_once(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    data = sparse_array(root, shards=None)
    sorted(p for p in (root / "m" / "c").rglob("*") if p.is_file())[0].unlink()
    reader = StoreReader(root, backend="labzarr")
    with pytest.warns(UncheckedStoreWarning, match="lost chunk file reads as the fill value"):
        got = reader.read("m")
    assert not got[0, :8, :8, :8].any() and data[0, :8, :8, :8].all()  # what zarr returns: zeros, unnoticed


def test_a_record_decodes_what_it_encodes_and_refuses_junk() -> None:
    record = StoredFiles(grid=(1, 2, 3), nbytes=(5, 0, 7, 9, 0, 1))
    assert StoredFiles.decode(record.encode()) == record
    assert [record.size(c) for c in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 2))] == [5, 0, 9, 1]
    for junk in ([1, 2], {"grid": [2], "nbytes": [1]}, {"grid": [1], "nbytes": [-1]}, {"grid": [1]}):
        with pytest.raises(ValueError):
            StoredFiles.decode(junk)
