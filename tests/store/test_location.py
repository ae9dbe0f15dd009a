"""The three kinds of location answer the same reading questions alike; a zip refuses every write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.store import Folder, ReadOnlyStore, UrlStore, Zipped, as_location, open_transport

from ..loaders.conftest import zip_store


@pytest.fixture
def folder(tmp_path: Path) -> Folder:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w", zarr_format=3)
    group.create_array("volumes/a/0", shape=(1, 9, 9), chunks=(1, 4, 4), dtype="uint8", fill_value=0)[...] = 7
    group.create_array("stacks/s", shape=(3, 1, 4, 4), chunks=(1, 1, 4, 4), dtype="int16", fill_value=0)[...] = 2
    (root / ".labzarr").mkdir()
    (root / ".labzarr" / "lock").write_text("x")
    return Folder(root)


def test_as_location_tells_the_kinds_apart_by_content(folder: Folder, tmp_path: Path) -> None:
    zipped = zip_store(folder, tmp_path / "no-suffix")
    assert isinstance(as_location(folder), Folder) and isinstance(as_location(str(folder)), Folder)
    assert isinstance(as_location(zipped), Zipped)
    assert isinstance(as_location("s3://b/x.zarr/", {"anon": True}), UrlStore)
    assert as_location("rel.zarr", base=tmp_path) == Folder(tmp_path / "rel.zarr")
    text = tmp_path / "notes.txt"
    text.write_text("not a store")
    with pytest.raises(ValueError, match="a file but not a zip"):
        open_transport(text)


def test_a_zip_reads_as_its_folder(folder: Folder, tmp_path: Path) -> None:
    zipped = as_location(zip_store(folder, tmp_path / "s.zarr.zip"))
    assert zipped.sizes() == folder.sizes() and zipped.keys() == folder.keys()
    assert (zipped / "volumes").sizes() == (folder / "volumes").sizes()
    assert [p.name for p in zipped.iterdir()] == sorted(p.name for p in folder.iterdir())
    assert zipped.array_nodes(skip=".labzarr") == folder.array_nodes(skip=".labzarr")
    assert (zipped / "volumes/a/0/zarr.json").read_bytes() == (folder / "volumes/a/0/zarr.json").read_bytes()
    assert (zipped / "volumes").is_dir() and (zipped / "zarr.json").is_file() and not (zipped / "nothing").exists()
    assert zipped.tree_bytes() == folder.tree_bytes()
    np.testing.assert_array_equal(zarr.open_array(zipped.zarr(), path="stacks/s", mode="r")[...], 2)
    assert zipped.transport().read("zarr.json") == folder.transport().read("zarr.json")


@pytest.mark.parametrize("write", [
    pytest.param(lambda z: z.mkdir(parents=True, exist_ok=True), id="mkdir"),
    pytest.param(lambda z: (z / "x").write_bytes(b"1"), id="write_bytes"),
    pytest.param(lambda z: (z / "x").write_atomic(b"1"), id="write_atomic"),
    pytest.param(lambda z: (z / "volumes").remove_tree(), id="remove_tree"),
    pytest.param(lambda z: (z / "lock").create_exclusive(b"1"), id="create_exclusive"),
    pytest.param(lambda z: z.fsync_tree(), id="fsync_tree"),
    pytest.param(lambda z: z.zarr(read_only=False), id="zarr-rw"),
])
def test_a_zip_refuses_every_write_saying_how_to_change_it(folder: Folder, tmp_path: Path, write) -> None:
    zipped = as_location(zip_store(folder, tmp_path / "s.zarr.zip"))
    before = (tmp_path / "s.zarr.zip").read_bytes()
    with pytest.raises(ReadOnlyStore, match="read-only.*zip that folder again"):
        write(zipped)
    assert (tmp_path / "s.zarr.zip").read_bytes() == before
