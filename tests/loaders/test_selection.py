"""PatchDataset's item selection (split, fold, items, where, kind) on the converted cohort store, which holds
patients split train/val/test and mixes 3D volumes with two 2D images (tests/cohort.py)."""

from __future__ import annotations

import csv
import pickle
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset as PublicPatchDataset
from labzarr import open_store
from labzarr.convert import convert_delivery
from labzarr.loaders import PatchDataset, Selection, SelectionKeywords, StratifiedSampler

from ..cohort import project


def _store(spec: Path) -> Path:
    return spec.parents[2] / "data" / "stores" / "cohort.zarr"


def _manifest(spec: Path) -> dict[str, dict[str, str]]:
    with (spec.parent / "manifest.csv").open(newline="") as f:
        return {r["item_id"]: r for r in csv.DictReader(f) if r["status"] == "ok"}


def test_a_val_dataset_yields_no_patch_of_a_train_item(converted_cohort: Path) -> None:
    rows = _manifest(converted_cohort)
    val = PatchDataset(_store(converted_cohort), (4, 4, 4), split="val", kind="volume", patches_per_item=3)
    expected = {i for i, r in rows.items() if r["split"] == "val" and r["shape"].count("x") == 3}
    assert {i.item_id for i in val.items} == expected and len(val) == 3 * len(expected)
    ids = [s["item_id"] for batch in DataLoader(val, batch_size=4, num_workers=2, collate_fn=list) for s in batch]
    assert len(ids) == len(val) and set(ids) == expected
    assert all(rows[i]["split"] != "train" for i in ids)


def test_a_mixed_store_needs_kind_and_works_with_it(converted_cohort: Path) -> None:
    store = _store(converted_cohort)
    with pytest.raises(ValueError, match=r"item 'p901t1' has 2 spatial axes"):
        PatchDataset(store, (4, 4, 4))
    volumes = PatchDataset(store, (4, 4, 4), kind="volume")
    images = PatchDataset(store, (6, 6), kind="image")
    assert {i.item_id for i in images.items} == {"p901t1", "p902t1"}
    assert len(volumes.items) + len(images.items) == len(open_store(store).items)
    assert volumes[0]["image"].shape == (1, 4, 4, 4) and images[1]["image"].shape == (1, 6, 6)


def test_items_and_where_select_exactly_what_they_say(converted_cohort: Path) -> None:
    store, rows = _store(converted_cohort), _manifest(converted_cohort)
    ds = PatchDataset(store, None, items=["p002t3", "p001t1"])
    assert [i.item_id for i in ds.items] == ["p001t1", "p002t3"]  # index order, not the order given
    tumour = PatchDataset(store, (4, 4, 4), where={"diagnosis": "tumour"}, kind="volume")
    assert {i.item_id for i in tumour.items} == {i for i, r in rows.items() if r["label.diagnosis"] == "tumour"}
    both = PatchDataset(store, None, where={"split": ["val", "test"], "group": ("p001", "p002", "p003")})
    assert {i.item_id for i in both.items} == {i for i, r in rows.items() if r["split"] in ("val", "test")
                                              and r["split_group"] in ("p001", "p002", "p003")}
    late = PatchDataset(store, None, where=lambda item: item.item_id.endswith("t3"))
    assert {i.item_id for i in late.items} == {i for i in rows if i.endswith("t3")}


def test_classes_come_from_the_whole_store_and_the_sampler_follows_the_selection(converted_cohort: Path) -> None:
    store = _store(converted_cohort)
    full = PatchDataset(store, None, label="diagnosis")
    train = PatchDataset(store, None, label="diagnosis", split="train", where={"diagnosis": "healthy"})
    assert train.classes == full.classes == ("healthy", "tumour")
    assert set(train.targets) == {0}
    sampler = StratifiedSampler(train)
    assert len(sampler) == len(train) and {k for _, k in sampler} <= set(range(len(train)))


def test_a_selection_that_does_not_fit_the_store_says_why(converted_cohort: Path, labeled_store: Path) -> None:
    store = _store(converted_cohort)
    cases = [
        (dict(split="train"), labeled_store, "the store has no splits; add [splits]"),
        (dict(split="training"), store, "split = 'training'; the store's splits are test, train, val"),
        (dict(fold=1, holdout=True), store, "the store has no folds"),
        (dict(holdout=True), store, "holdout = True needs fold="),
        (dict(items=["p001t1", "case7"]), store, "items names 1 ID(s) not among the store's ok items: 'case7'"),
        (dict(where={"diagnosys": "x"}), store, "where= names 'diagnosys', which is neither a label"),
        (dict(where={"diagnosis": "cyst"}), store, "keeps none of the store's"),
    ]
    for kwargs, where, needle in cases:
        with pytest.raises(ValueError) as err:
            PatchDataset(where, None, **kwargs)  # type: ignore[arg-type]
        assert needle in str(err.value), (kwargs, str(err.value))


def test_folds_select_validation_and_training_items(tmp_path: Path, scheduler: str) -> None:
    spec = project(tmp_path, splits='folds = 3\ntest = 0.2\ngroup = "patient"\n')
    convert_delivery(spec, scheduler=scheduler)
    rows = _manifest(spec)
    store = _store(spec)
    with pytest.raises(ValueError, match="needs holdout=True"):
        PatchDataset(store, None, fold=0)
    for k in range(3):
        val = {i.item_id for i in PatchDataset(store, None, fold=k, holdout=True).items}
        train = {i.item_id for i in PatchDataset(store, None, fold=k, holdout=False).items}
        assert val == {i for i, r in rows.items() if r["fold"] == str(k)}
        assert train == {i for i, r in rows.items() if r["fold"] not in ("", str(k))}
        assert not val & train and not {r["split_group"] for i, r in rows.items() if i in val} & \
            {r["split_group"] for i, r in rows.items() if i in train}


def test_grid_mode_tiles_only_the_selected_items(converted_cohort: Path) -> None:
    store, rows = _store(converted_cohort), _manifest(converted_cohort)
    grid = PatchDataset(store, (4, 4, 4), mode="grid", split="test", kind="volume")
    tiled = {grid.items[grid.locate(i)[0]].item_id for i in range(len(grid))}
    assert tiled == {i for i, r in rows.items() if r["split"] == "test" and r["shape"].count("x") == 3}


SAME_CHOICE: list[Any] = [
    pytest.param(dict(split="val", kind="volume"), dict(patches_per_item=3, seed=4), id="split"),
    pytest.param(dict(items=["p005t3", "p001t1", "p002t3"]), dict(patches_per_item=2, seed=9), id="items"),
    pytest.param(dict(where={"diagnosis": "tumour"}, kind="volume"), dict(label="diagnosis", seed=1), id="where"),
    pytest.param(dict(where=lambda item: item.item_id.endswith("t3"), kind="volume"), dict(seed=2), id="callable"),
    pytest.param(dict(split="test", kind="volume"), dict(mode="grid", overlap=1), id="grid"),
]


@pytest.mark.parametrize(("choice", "options"), SAME_CHOICE)
def test_a_selection_selects_exactly_what_its_keywords_select(converted_cohort: Path, choice: dict[str, Any],
                                                              options: dict[str, Any]) -> None:
    store = _store(converted_cohort)
    by_keywords = PatchDataset(store, (4, 4, 4), **options, **choice)
    by_selection = PublicPatchDataset(store, (4, 4, 4), **options, selection=Selection(**choice))
    assert by_selection.selection == by_keywords.selection == Selection(**choice)
    assert by_selection.items == by_keywords.items and len(by_selection) == len(by_keywords)
    assert by_selection.classes == by_keywords.classes and by_selection.targets == by_keywords.targets
    assert repr(by_selection) == repr(by_keywords)
    # ds[i] stays a pure function of (seed, epoch, i), in this process and in a pickled copy (a worker's)
    copy = pickle.loads(pickle.dumps(by_selection)) if not callable(choice.get("where")) else by_selection
    for key in [*range(len(by_keywords)), (1, 0), (2, len(by_keywords) - 1)]:
        a, b, c = by_keywords[key], by_selection[key], copy[key]
        assert a["item_id"] == b["item_id"] == c["item_id"] and a["origin"] == b["origin"] == c["origin"], key
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["image"], c["image"]), key


def test_selection_and_its_keywords_together_are_refused_before_the_store_is_read(converted_cohort: Path,
                                                                                   tmp_path: Path) -> None:
    store = _store(converted_cohort)
    with pytest.raises(TypeError, match=r"selection= and split=, kind= both choose the items; pass the selection "
                                         r"once"):
        PatchDataset(store, None, selection=Selection(split="val"), split="train", kind="volume")
    with pytest.raises(TypeError, match=r"selection= and items= both choose"):
        PatchDataset(tmp_path / "missing.zarr", None, selection=Selection(), items=["p001t1"])
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'splt'; besides its options it "
                                         r"takes Selection's fields: split, fold"):
        PatchDataset(store, None, splt="val")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"selection = \{'split': 'val'\}; expected a labzarr.loaders.Selection"):
        PatchDataset(store, None, selection={"split": "val"})  # type: ignore[arg-type]
    # None is every keyword's default, so a wrapper forwarding its own defaults may pass them with selection=.
    forwarded = PatchDataset(store, None, selection=Selection(split="val"), split=None, where=None)
    assert forwarded.items == PatchDataset(store, None, split="val").items


def test_the_keywords_are_the_selection_fields() -> None:
    assert list(SelectionKeywords.__annotations__) == [f.name for f in fields(Selection)]
    assert Selection(items=["a", "b"]) == Selection(items=("a", "b")) and Selection().describe() == ""
