"""A sampler's checkpoint over a large index reads what the index's writer recorded (the table's digest, each
entry's digest) instead of building every item: `state_dict` and a resume on the same store build no item; a
checkpoint that recorded the per-entry hash of earlier versions still resumes; a changed index is still refused,
naming what changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from labzarr import PatchDataset
from labzarr.convert.write.arrays import write_index
from labzarr.loaders import StoreChangedError
from labzarr.loaders.resume import entries_hash, index_hash
from labzarr.store import Folder, IndexItem, StoreIndex, open_store
from labzarr.store.format import items as items_module
from labzarr.store.format.items import IndexItems

N = 20_000


def _items(n: int) -> list[IndexItem]:
    return [IndexItem(item_id=f"img{i:06d}", array=f"stacks/s{i // 5000}", slot=i % 5000, kind="jpeg",
                      source=f"raw/img{i:06d}.jpg", shape=(1, 16, 16), dtype="uint8", spacing=(),
                      labels={"cell_type": ("a", "b", "c")[i % 3]}, split=("train", "val")[i % 2],
                      group=f"p{i // 4}") for i in range(n)]


def _write(store: Path, items: list[IndexItem]) -> None:
    write_index(Folder(store), StoreIndex(delivery="scale", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[IndexItem]]:
    store = tmp_path_factory.mktemp("scale") / "scale.zarr"
    items = _items(N)
    _write(store, items)
    return store, items


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many items the index's columns built (each `IndexItem` made from a table row)."""
    counts = [0]
    one, many = items_module._Columns.item, items_module._Columns.items

    def item(self: items_module._Columns, r: int) -> IndexItem:
        counts[0] += 1
        return one(self, r)

    def items(self: items_module._Columns, rows: np.ndarray) -> list[IndexItem]:
        counts[0] += len(rows)
        return many(self, rows)

    monkeypatch.setattr(items_module._Columns, "item", item)
    monkeypatch.setattr(items_module._Columns, "items", items)
    yield counts


def test_state_dict_and_resume_on_a_large_index_build_no_item(large: tuple[Path, list[IndexItem]],
                                                               built: list[int]) -> None:
    store, _ = large
    ds = PatchDataset(store, (8, 8), label="cell_type", split="train")
    sampler = ds.stratified_sampler(num_replicas=2, rank=0)
    state = json.loads(json.dumps(sampler.state_dict([7, 7])))
    again = PatchDataset(store, (8, 8), label="cell_type", split="train").stratified_sampler(num_replicas=2, rank=0)
    again.load_state_dict(state)
    assert built[0] == 0
    assert len(state["index"]) == 64 and len(state["selection"]["digests"]) == N // 2


def test_recorded_digests_are_the_entries_digests(large: tuple[Path, list[IndexItem]]) -> None:
    store, items = large
    view = IndexItems.of(open_store(store).items)
    assert view.digests() == [i.digest()[:16] for i in items]
    assert view.take(np.arange(3, 900, 7)).digests() == [items[k].digest()[:16] for k in range(3, 900, 7)]
    assert view.table_digest is not None and view.take(np.arange(N - 1)).table_digest is None
    assert index_hash(view) != entries_hash(view) == entries_hash(items)  # read, not computed over the entries
    assert index_hash(items) == entries_hash(items)  # items not read from a store: hashed entry by entry


def test_a_checkpoint_with_the_per_entry_hash_of_earlier_versions_resumes(large: tuple[Path, list[IndexItem]]
                                                                          ) -> None:
    store, _ = large
    ds = PatchDataset(store, (8, 8), label="cell_type", split="val")
    state = ds.stratified_sampler().state_dict(11)
    state["index"] = entries_hash(ds.store_items)
    sampler = PatchDataset(store, (8, 8), label="cell_type", split="val").stratified_sampler()
    sampler.load_state_dict(state)
    assert sampler.epoch_indices().size > 0


def test_a_changed_large_index_is_refused_naming_the_change(large: tuple[Path, list[IndexItem]],
                                                            tmp_path: Path) -> None:
    store, items = large
    state = PatchDataset(store, (8, 8), label="cell_type").stratified_sampler().state_dict(5)
    changed = tmp_path / "changed.zarr"
    relabelled = [replace(i, labels={"cell_type": "a"}) if i.item_id == "img000101" else i for i in items[:-1]]
    _write(changed, relabelled)
    later = PatchDataset(changed, (8, 8), label="cell_type").stratified_sampler()
    with pytest.raises(StoreChangedError, match=r"1 removed \(img019999\), 1 changed \(img000101\)") as err:
        later.load_state_dict(state)
    assert err.value.changed == ("img000101",) and err.value.removed == ("img019999",)


@pytest.mark.parametrize("fixture", ["labeled_store", "balanced_store"])
def test_recorded_digests_of_converted_stores(fixture: str, request: pytest.FixtureRequest) -> None:
    view = IndexItems.of(open_store(request.getfixturevalue(fixture)).items)
    assert view._c.digest is not None  # recorded by the writer, not computed below
    assert view.digests() == [i.digest()[:16] for i in view]
