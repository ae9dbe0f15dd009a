"""The store format round-trips: every field of the index and of a volume's attributes decodes as it was encoded."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from labzarr.convert.write.arrays import write_index
from labzarr.store import (
    FORMAT_VERSION,
    INDEX_KEY,
    ClassInfo,
    Folder,
    FormatError,
    IndexItem,
    StoreIndex,
    VolumeAttrs,
    read_index,
)
from labzarr.store.format.nodes import create_group, read_node_at

SAMPLE = IndexItem(item_id="case7", array="volumes/case7/image", slot=None, kind="nifti", source="case7/t1.nii.gz",
                   shape=(1, 30, 40, 50), dtype="int16", spacing=(0.7, 0.7, 1.5), labels={"cell_type": "B"},
                   roles={"image": "volumes/case7/image", "mask": "volumes/case7/mask"},
                   classes={0: ClassInfo(voxels=59000, start=0, stop=0), 2: ClassInfo(voxels=1000, start=0, stop=64)},
                   locations="volumes/case7/locations")
SLOT = IndexItem(item_id="img3", array="images/uint8_3x64x48", slot=3, kind="jpeg", source="img/3.jpg",
                 shape=(3, 64, 48), dtype="uint8", spacing=(1.0, 1.0), labels={})
VOLUME = VolumeAttrs(item_id="case1", source="case1/anat.nii", sha256="ab" * 32, kind="nifti", spacing=(1.0, 2.0, 3.0),
                     affine=((-1.0, 0.0, 0.0, 10.0), (0.0, 2.0, 0.0, -5.0), (0.0, 0.0, 3.0, 0.5), (0.0, 0.0, 0.0, 1.0)),
                     orientation="RAS", source_orientation="LAS", axes=("c", "x", "y", "z"), labels={"side": "left"},
                     role="image", content_sha256="cd" * 32, complete="ab" * 32)


def _through_json(value: object) -> object:
    return json.loads(json.dumps(value))  # what the store holds is JSON: tuples come back as lists


def _written(tmp_path: Path, items: tuple[IndexItem, ...]) -> tuple[StoreIndex, Path]:
    index = StoreIndex(delivery="lab-2026-11", spec_sha256="1" * 64, manifest_sha256="2" * 64, tool_version="0.1.0",
                       items=items)
    store = tmp_path / "x.zarr"
    write_index(Folder(store), index)
    return index, store


@pytest.mark.parametrize("item", [SAMPLE, SLOT], ids=["sample", "stack-slot"])
def test_index_items_round_trip(item: IndexItem, tmp_path: Path) -> None:
    index, store = _written(tmp_path, (item, SLOT))
    back = read_index(store)
    assert back == index
    assert all(getattr(back.items[0], f.name) == getattr(item, f.name) for f in fields(IndexItem))


def test_volume_attrs_round_trip_every_field() -> None:
    back = VolumeAttrs.decode(_through_json(VOLUME.encode()), where="volumes/case1")  # type: ignore[arg-type]
    assert back == VOLUME
    for f in fields(VolumeAttrs):  # each field, set apart from the others, survives alone too
        assert getattr(back, f.name) == getattr(VOLUME, f.name), f.name
    early = replace(VOLUME, role=None, content_sha256=None, complete=None)  # as written when the array is created
    assert set(early.encode()) == set(VOLUME.encode()) - {"role", "content_sha256", "complete"}
    assert VolumeAttrs.decode(early.encode(), where="v") == early


def test_another_format_version_is_refused_with_what_to_do(tmp_path: Path) -> None:
    _, store = _written(tmp_path, (SLOT,))
    transport = Folder(store).transport()
    value = read_node_at(Folder(store))["attributes"][INDEX_KEY]
    with pytest.raises(FormatError, match=rf"x.zarr: store format version 99; this labzarr reads version "
                                          rf"{FORMAT_VERSION}: convert the delivery again"):
        StoreIndex.decode({**value, "format_version": 99}, where="x.zarr", transport=transport)
    with pytest.raises(FormatError, match="not a labzarr store"):
        StoreIndex.decode({"delivery": "d"}, where="x.zarr", transport=transport)
    with pytest.raises(FormatError, match="damaged index .*convert the delivery again"):
        StoreIndex.decode({**value, "items": 5}, where="x.zarr", transport=transport)
    with pytest.raises(FormatError, match="index table 'index/gone' is missing"):
        StoreIndex.decode({**value, "table": "index/gone"}, where="x.zarr", transport=transport)
    with pytest.raises(FormatError, match="volumes/case1: array attributes do not follow"):
        VolumeAttrs.decode({"item_id": "a"}, where="volumes/case1")


def test_a_version_3_store_with_its_index_in_json_is_refused(tmp_path: Path) -> None:
    """Format 3 kept the items as a JSON list in the root attr: such a store is refused, not misread."""
    store = tmp_path / "old.zarr"
    create_group(Folder(store), {INDEX_KEY: {"delivery": "d", "format_version": 3, "items": [{"item_id": "a"}]}})
    with pytest.raises(FormatError, match=r"store format version 3; this labzarr reads version 4: convert the "
                                          r"delivery again"):
        read_index(store)
