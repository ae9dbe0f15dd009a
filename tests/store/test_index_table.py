"""The index and the statistics as tables of numpy columns (format 4): every field round-trips through a store,
the column accessors agree with the items they describe, and a selection made from the columns equals the
same selection made item by item."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from labzarr.convert.write.arrays import write_index, write_statistics
from labzarr.loaders import Selection
from labzarr.store import (
    INDEX,
    STATISTICS,
    Annotation,
    ChannelStats,
    ClassInfo,
    Folder,
    Histogram,
    IndexItem,
    ItemStats,
    StoreIndex,
    read_index,
    read_statistics,
)
from labzarr.store.format.items import IndexItems

_H = Histogram.of([-32768, -3, 0, 5, 5, 32767], [1, 4, 7, 3, 1, 2])
_FULL = ChannelStats(count=18, mean=1.25, m2=1e300, min=-3.4e38, max=3.4e38, histogram=_H, nan=1, inf=2,
                     integral=True)
_PLAIN = ChannelStats(count=4, mean=-0.1, m2=0.5, min=-1.0, max=2.0, histogram=Histogram.of([0, 1], [2, 2]))
_EMPTY = ChannelStats(count=0, mean=0.0, m2=0.0, min=0.0, max=0.0)


def _items() -> tuple[IndexItem, ...]:
    """Items that set every field in turn, and leave each unset in another."""
    volume = IndexItem(
        item_id="case7", array="volumes/case7/0", slot=None, kind="nifti", source="case7/t1.nii.gz",
        shape=(2, 30, 40, 50), dtype="int16", spacing=(0.7, 0.7, 1.5), labels={"cell_type": "B", "side": ""},
        roles={"image": "volumes/case7/0", "mask": "volumes/case7/labels/mask/0"},
        classes={0: ClassInfo(voxels=59000, start=0, stop=0), 2: ClassInfo(voxels=1000, start=0, stop=64),
                 300: ClassInfo(voxels=2**40, start=64, stop=2**33)},
        locations="volumes/case7/locations", split="train", fold=3, group="patient-1",
        metadata={"EchoTime": 0.01, "BValues": [0, 1000.5], "Vectors": [[1, 0, 0], [0, 1, 0]], "Name": "é"},
        orientation="LPS",
        stats=ItemStats(channels=(_FULL, _PLAIN), classes={0: (_PLAIN, _EMPTY), 2: (_FULL, _PLAIN)}).moments(),
        annotations=(Annotation(center=(1.5, 2.0, 3.0), size=(0.0, 4.0, 0.0), source="Sheet1!B2"),
                     Annotation(center=(0.0, 0.0, 0.0), size=(1.0, 1.0, 1.0), source="")))
    image = IndexItem(item_id="img3", array="stacks/3x64x48_uint8", slot=3, kind="jpeg", source="img/3.jpg",
                      shape=(3, 64, 48), dtype="uint8", spacing=(), labels={"cell_type": "A"},
                      split="val", fold=0, group="patient-2", stats=ItemStats(channels=()))
    bare = IndexItem(item_id="img0", array="stacks/3x64x48_uint8", slot=0, kind="png", source="x/0.png",
                     shape=(1, 8, 8), dtype="uint16", spacing=(1.0, 1.0), labels={})
    other = IndexItem(item_id="s2", array="volumes/s2/0", slot=None, kind="dicom", source="s2/",
                      shape=(1, 4, 4, 4), dtype="float32", spacing=(1.0, 1.0, 2.5), labels={"side": "left"},
                      roles={"image": "volumes/s2/0"}, split="test", group="patient-3", orientation="RAS",
                      stats=ItemStats(channels=(_EMPTY,)).moments())
    return volume, image, bare, other


def _store(tmp_path: Path, items: tuple[IndexItem, ...]) -> tuple[StoreIndex, Path]:
    index = StoreIndex(delivery="d", spec_sha256="1" * 64, manifest_sha256="2" * 64, tool_version="0", items=items)
    write_index(Folder(tmp_path / "s.zarr"), index)
    return index, tmp_path / "s.zarr"


def test_every_index_field_round_trips_through_the_store(tmp_path: Path) -> None:
    items = _items()
    index, store = _store(tmp_path, items)
    back = read_index(store)
    assert back.attrs() == index.attrs() and len(back.items) == len(items)
    for got, want in zip(back.items, items, strict=True):
        for f in fields(IndexItem):
            assert getattr(got, f.name) == getattr(want, f.name), (want.item_id, f.name)
        assert got.digest() == want.digest()  # what a sampler's checkpoint compares
    assert back == index
    assert list(back.items[1:3]) == list(items[1:3]) and back.items[-1] == items[-1]
    assert pickle.loads(pickle.dumps(back.items)) == items  # what a DataLoader worker receives


def test_an_empty_index_round_trips(tmp_path: Path) -> None:
    index, store = _store(tmp_path, ())
    assert read_index(store) == index and len(read_index(store).items) == 0


def test_a_rewritten_index_leaves_only_its_own_table(tmp_path: Path) -> None:
    items = _items()
    _store(tmp_path, items)
    _, store = _store(tmp_path, items[:2])
    assert list(read_index(store).items) == list(items[:2])
    assert len([p for p in (store / INDEX).iterdir() if p.is_dir()]) == 1


def test_the_columns_answer_as_the_items_do() -> None:
    items = _items()
    view = IndexItems.of(items)
    assert view.spatial_axes().tolist() == [i.spatial_axes for i in items]
    assert view.slots().tolist() == [-1 if i.slot is None else i.slot for i in items]
    assert view.folds().tolist() == [-1 if i.fold is None else i.fold for i in items]
    assert view.has_locations().tolist() == [i.locations is not None for i in items]
    assert view.annotated().tolist() == [bool(i.annotations) for i in items]
    for field in ("item_id", "array", "kind", "source", "dtype", "split", "group", "orientation"):
        assert view.values(field) == [getattr(i, field) for i in items], field
    for name in ("cell_type", "side", "nothing"):
        codes, values = view.label(name)
        assert [values[c] if c >= 0 else None for c in codes.tolist()] == [i.labels.get(name) for i in items]
    for role in ("image", "mask"):
        assert view.role(role).tolist() == [_has_role(i, role) for i in items], role
    some = view.take([3, 0])
    assert list(some) == [items[3], items[0]] and some.values("item_id") == ["s2", "case7"]
    slots = StoreIndex("d", "", "", "", view).stack_slots()
    assert {a: dict(s) for a, s in slots.items()} == {"stacks/3x64x48_uint8": {3: "img3", 0: "img0"}}
    assert 3 in slots["stacks/3x64x48_uint8"] and 1 not in slots["stacks/3x64x48_uint8"] and slots


def _has_role(item: IndexItem, role: str) -> bool:
    try:
        item.role_array(role)
    except KeyError:
        return False
    return True


def _reference(selection: Selection, items: tuple[IndexItem, ...]) -> list[IndexItem]:
    """The selection made item by item (as `Selection.apply` did before the index had columns)."""
    keep = list(items)
    if selection.kind is not None:
        keep = [i for i in keep if i.spatial_axes == {"volume": 3, "image": 2}[selection.kind]]
    if selection.split is not None:
        keep = [i for i in keep if i.split == selection.split]
    if selection.fold is not None:
        keep = [i for i in keep if i.fold is not None and (i.fold == selection.fold) == selection.holdout]
    if selection.items is not None:
        keep = [i for i in keep if i.item_id in set(selection.items)]
    if isinstance(selection.where, dict):
        for key, allowed in selection.where.items():
            allowed = allowed if isinstance(allowed, list) else [allowed]
            keep = [i for i in keep if (i.labels.get(key, "") if key in ("cell_type", "side")
                                        else getattr(i, key)) in allowed]
    elif callable(selection.where):
        keep = [i for i in keep if selection.where(i)]
    return keep


_WHERE_KIND: Callable[[IndexItem], bool] = lambda i: i.kind in ("jpeg", "dicom")  # noqa: E731


@pytest.mark.parametrize("selection", [
    Selection(), Selection(kind="volume"), Selection(kind="image"), Selection(split="train"),
    Selection(fold=0, holdout=True), Selection(fold=0, holdout=False), Selection(items=["s2", "img0"]),
    Selection(where={"cell_type": ["A", "B"]}), Selection(where={"side": ""}), Selection(where={"fold": [None, 3]}),
    Selection(where={"dtype": "uint8", "kind": ["jpeg"]}), Selection(where={"group": "patient-3"}),
    Selection(where=_WHERE_KIND), Selection(kind="volume", where={"side": ["left", ""]}),
], ids=lambda s: repr(s).replace(repr(_WHERE_KIND), "callable"))  # stable across xdist processes
def test_a_selection_from_the_columns_equals_one_item_by_item(selection: Selection) -> None:
    items = _items()
    assert list(selection.apply(items, where="s")) == _reference(selection, items)


def test_statistics_round_trip_with_their_histograms(tmp_path: Path) -> None:
    records = {"volumes/case7/0": ItemStats(channels=(_FULL, _PLAIN), classes={0: (_PLAIN, _EMPTY), 7: (_FULL,)}),
               "stacks/a/0": ItemStats(channels=(_EMPTY,)), "stacks/a/1": ItemStats(channels=())}
    store = Folder(tmp_path / "s.zarr")
    write_statistics(store, {"old": ItemStats(channels=(_PLAIN,))})
    write_statistics(store, records)
    back = read_statistics(store)
    assert back == records
    assert back["volumes/case7/0"].channels[0].histogram == _H
    assert back["volumes/case7/0"].channels[0].percentiles((0, 50, 100)) == _FULL.percentiles((0, 50, 100))
    assert len([p for p in (store / STATISTICS).iterdir() if p.is_dir()]) == 1  # the earlier table is gone
    write_statistics(store, iter(sorted(records.items())))  # a stream of (key, record) pairs
    assert read_statistics(store) == records


def test_a_histogram_is_numpy_backed_immutable_and_merges_by_adding_counts() -> None:
    a = Histogram.of([5, -3, 5, 0], [1, 2, 3, 0])
    assert a.ordinals.tolist() == [-3, 5] and a.counts.tolist() == [2, 4] and a.total == 6
    assert a.ordinals.dtype == np.int16 and a.counts.dtype == np.int32  # int64 only for counts beyond int32
    assert Histogram.of([1], [2**40]).counts.dtype == np.int64 and Histogram.of([1], [2**40]).total == 2**40
    with pytest.raises(ValueError):
        a.counts[0] = 9
    with pytest.raises(AttributeError):
        a.counts = np.zeros(2, np.int64)  # type: ignore[misc]
    b = Histogram.of([-3, 7], [1, 1])
    assert Histogram.merge([a, b, Histogram()]) == Histogram.of([-3, 5, 7], [3, 4, 1])
    assert hash(a) == hash(Histogram.of([-3, 5], [2, 4])) and a != b and not Histogram()
    assert Histogram.from_runs(a.runs) == a and pickle.loads(pickle.dumps(a)) == a
    many = [Histogram.of(np.arange(k, k + 20000), np.ones(20000)) for k in (-100, 0)]  # the dense merge
    assert Histogram.merge(many).arrays()[1].sum() == 40000
    with pytest.raises(ValueError, match="outside"):
        Histogram.of([40000], [1])


def test_a_damaged_table_is_an_error_not_other_items(tmp_path: Path) -> None:
    """The tables are read through the checksummed read path: a flipped byte is refused, naming what to do."""
    from labzarr.store import FormatError

    _, store = _store(tmp_path, _items())
    write_statistics(Folder(store), {"volumes/case7/0": ItemStats(channels=(_FULL,))})
    for table, read in ((store / INDEX, read_index), (store / STATISTICS, read_statistics)):
        (chunk,) = [p for p in table.rglob("c/*") if p.is_file()]
        data = bytearray(chunk.read_bytes())
        data[len(data) // 2] ^= 0x40
        chunk.write_bytes(bytes(data))
        with pytest.raises(FormatError, match="damaged .*convert the delivery again"):
            read(store)


def test_a_dataset_over_the_table_equals_one_over_the_items(tmp_path: Path) -> None:
    """PatchDataset chooses from the columns; what it holds equals what the items, one by one, say."""
    from labzarr import PatchDataset

    items = _items()
    _, store = _store(tmp_path, items)
    ds = PatchDataset(store, None, label="cell_type", where={"cell_type": ["A", "B"]})
    want = [i for i in items if i.labels.get("cell_type", "") in ("A", "B")]
    assert list(ds.items) == want and list(ds.store_items) == list(items)
    assert ds.classes == ("A", "B") and ds.targets == tuple(("A", "B").index(i.labels["cell_type"]) for i in want)
    assert ds.annotated == any(i.annotations for i in items)
    with pytest.raises(ValueError, match=r"label .side. is missing for 3 item\(s\) \(case7, img3, img0\)"):
        PatchDataset(store, None, label="side")
    with pytest.raises(ValueError, match="has no role 'mask'"):
        PatchDataset(store, None, roles=("image", "mask"))


def test_columns_made_spending_their_builders_are_the_columns() -> None:
    """`IndexColumns.columns(spend=True)` (each builder let go as its column is made) gives the very columns of
    `columns()`, with the items' labels, roles and text beyond ASCII; the spent object holds no item."""
    from dataclasses import replace

    from labzarr.store.format.items import IndexColumns

    items = [*_items(), *(replace(_items()[0], item_id=f"é{i}", source=f"raw/日本{i}.jpg") for i in range(5))]
    plain, spent = IndexColumns(), IndexColumns()
    for item in items:
        plain.add(item)
        spent.add(item)
    attrs, expected = plain.columns()
    got_attrs, got = spent.columns(spend=True)
    assert got_attrs == attrs and list(got) == list(expected)
    for name, column in expected.items():
        assert got[name].dtype == column.dtype and got[name].tobytes() == column.tobytes(), name
    assert spent.rows == 0 and spent.columns()[1]["slot"].size == 0
