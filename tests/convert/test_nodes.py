"""Nodes written without zarr's API (`convert/write/nodes.py`): byte for byte the documents zarr-python writes,
and arrays zarr reads and writes as its own."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from labzarr.convert.spec import StoreSpec
from labzarr.convert.write.arrays import codecs, compact_metadata, open_root, write_index
from labzarr.store import INDEX_KEY, Folder, IndexItem, StoreIndex
from labzarr.store.format import nodes

SPECS = {
    "blosc-lz4+crc": StoreSpec(),
    "blosc-zstd": StoreSpec(compressor="blosc-zstd", level=5, checksum=False),
    "zstd+crc": StoreSpec(compressor="zstd", level=3),
    "none": StoreSpec(compressor="none", checksum=False),
}
# (shape, chunks, shards): sharded with edge shards, unsharded, a 2D image's three axes
LAYOUTS = {
    "sharded": ((1, 70, 64, 33), (1, 32, 32, 16), (1, 64, 64, 32)),
    "chunked": ((2, 20, 9, 7), (1, 8, 8, 8), None),
    "image": ((3, 40, 30), (3, 16, 16), None),
}
ATTRS: dict[str, Any] = {"item_id": "case1", "affine": [[1.0, 0.0], [0.0, 1.0]], "labels": {}, "nested": {"t": [1, 2]},
                         "stats": {"mean": math.nan, "max": math.inf}}


def _doc(path: Path) -> bytes:
    return (path / "zarr.json").read_bytes()


@pytest.mark.parametrize("indent", ["zarr's default", "compact"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", ">u2"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_an_array_node_is_the_one_zarr_writes(tmp_path: Path, spec: StoreSpec, layout: tuple[Any, ...], dtype: str,
                                              indent: str) -> None:
    shape, chunks, shards = layout
    names = ("c", "x", "y", "z") if len(shape) == 4 else None
    with compact_metadata() if indent == "compact" else zarr.config.set({}):
        ours = nodes.create_array(Folder(tmp_path / "ours"), shape=shape, dtype=np.dtype(dtype), chunks=chunks,
                                  shards=shards, codecs=codecs(spec), dimension_names=names, attributes=ATTRS,
                                  config={"write_empty_chunks": True})
        theirs = zarr.create_array(zarr.storage.LocalStore(tmp_path / "theirs"), shape=shape, dtype=np.dtype(dtype),
                                   chunks=chunks, shards=shards, compressors=codecs(spec), fill_value=0,
                                   dimension_names=names, attributes=ATTRS, config={"write_empty_chunks": True})
        assert _doc(tmp_path / "ours") == _doc(tmp_path / "theirs")
        assert ours.metadata == theirs.metadata

        nodes.update_attributes(Folder(tmp_path / "ours"), ours, {"complete": "abc", "labels": {"y": "1"}})
        theirs.update_attributes({"complete": "abc", "labels": {"y": "1"}})
        assert _doc(tmp_path / "ours") == _doc(tmp_path / "theirs")
        assert ours.attrs.asdict() == theirs.attrs.asdict()  # the open array sees what it wrote

    # the array is zarr's to write through and to read: the same chunk files as zarr's own array writes
    data = np.arange(math.prod(shape)).reshape(shape).astype(dtype)
    ours[...] = data
    theirs[...] = data
    np.testing.assert_array_equal(zarr.open_array(zarr.storage.LocalStore(tmp_path / "ours"))[...], data)
    files = sorted(p.relative_to(tmp_path / "theirs") for p in (tmp_path / "theirs").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "ours") for p in (tmp_path / "ours").rglob("*") if p.is_file())
    for rel in files:
        assert (tmp_path / "ours" / rel).read_bytes() == (tmp_path / "theirs" / rel).read_bytes(), rel


def test_layouts_are_built_once_and_kept_apart(tmp_path: Path) -> None:
    """The in-memory layout zarr builds is shared by arrays of one layout, never across layouts (a codec's
    settings, a dtype, the chunks each make another)."""
    nodes._layout.cache_clear()
    args: dict[str, Any] = {"dimension_names": None, "attributes": {}, "config": {}}
    layouts = [("int16", (1, 8, 8, 8), StoreSpec()), ("int16", (1, 8, 8, 8), StoreSpec()),
               ("uint16", (1, 8, 8, 8), StoreSpec()), ("int16", (1, 8, 8, 4), StoreSpec()),
               ("int16", (1, 8, 8, 8), StoreSpec(level=1))]
    for i, (dtype, chunks, spec) in enumerate(layouts):
        arr = nodes.create_array(Folder(tmp_path / str(i)), shape=(1, 9, 9, 9), dtype=np.dtype(dtype), chunks=chunks,
                                 shards=None, codecs=codecs(spec), **args)
        ref = zarr.create_array(zarr.storage.MemoryStore(), shape=(1, 9, 9, 9), dtype=dtype, chunks=chunks,
                                compressors=codecs(spec), fill_value=0)
        assert arr.metadata == ref.metadata
    assert nodes._layout.cache_info().misses == 4 and nodes._layout.cache_info().hits == 1


@pytest.mark.parametrize("indent", ["zarr's default", "compact"])
def test_a_group_node_is_the_one_zarr_writes(tmp_path: Path, indent: str) -> None:
    big = {"stats": {f"case{i}": {"channels": [{"count": i, "mean": math.nan, "histogram": [[0, 3], [5, i]]}]}
                     for i in range(50)}, "ome": {"version": "0.5", "axes": ("x", "y")}}
    with compact_metadata() if indent == "compact" else zarr.config.set({}):
        nodes.create_group(Folder(tmp_path / "ours"), big)
        zarr.create_group(zarr.storage.LocalStore(tmp_path / "theirs"), zarr_format=3, attributes=big)
        assert _doc(tmp_path / "ours") == _doc(tmp_path / "theirs")

        # replacing a published group's attributes whole, as `attrs.put` does, through a temporary file
        nodes.create_group(Folder(tmp_path / "ours"), {"stats": {}}, atomic=True)
        zarr.open_group(zarr.storage.LocalStore(tmp_path / "theirs"), mode="r+").attrs.put({"stats": {}})
        assert _doc(tmp_path / "ours") == _doc(tmp_path / "theirs")
        assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["zarr.json"]  # no temporary file left


def test_the_store_index_is_written_as_zarr_writes_it_keeping_the_root_attributes(tmp_path: Path) -> None:
    items = tuple(IndexItem(item_id=f"c{i}", array=f"volumes/c{i}/0", slot=None, kind="nifti", source=f"c{i}.nii",
                            shape=(1, 4, 4, 4), dtype="int16", spacing=(1.0, 1.0, 1.0), labels={"y": str(i)},
                            roles={}, classes={}, locations=None, split="", fold=None, group="",
                            metadata={"EchoTime": 0.01}, orientation="RAS", stats=None) for i in range(3))
    index = StoreIndex(delivery="d", spec_sha256="a" * 64, manifest_sha256="b" * 64, tool_version="0", items=items)
    for name in ("ours", "theirs"):
        root = open_root(Folder(tmp_path / name))
        root.attrs["other"] = {"kept": [1, 2]}
        root.attrs[INDEX_KEY] = {"stale": True}
    with compact_metadata():
        write_index(Folder(tmp_path / "ours"), index)
        value = zarr.open_group(zarr.storage.LocalStore(tmp_path / "ours")).attrs[INDEX_KEY]
        open_root(Folder(tmp_path / "theirs")).attrs[INDEX_KEY] = value
    assert _doc(tmp_path / "ours") == _doc(tmp_path / "theirs")
    assert zarr.open_group(zarr.storage.LocalStore(tmp_path / "ours")).attrs["other"] == {"kept": [1, 2]}
    assert StoreIndex.decode(value, where="ours", transport=Folder(tmp_path / "ours").transport()) == index
