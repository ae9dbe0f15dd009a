"""A sampler state records the store's index hash and the dataset's selection: a resume on a store a new
delivery was converted into (or items removed from) is refused, naming what changed, and `strict=False`
finishes the checkpoint's epoch over the items still present: exactly what it had left, less the samples of
items that are gone."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from labzarr import PatchDataset
from labzarr.convert import convert_delivery
from labzarr.loaders import StoreChangedError, StratifiedSampler

from ..conftest import make_delivery

PATCH, PER_ITEM, WORLD = (4, 4, 4), 3, 2
LATE = "case_010_ct_oblique.nii.gz"  # case10: arrives with the second delivery
Named = tuple[str, int, int]  # item, its sample, repeat: a key that survives renumbering


def _samplers(store: Path) -> tuple[PatchDataset, list[StratifiedSampler]]:
    ds = PatchDataset(store, PATCH, patches_per_item=PER_ITEM, label="cell_type")
    return ds, [ds.stratified_sampler(num_replicas=WORLD, rank=r) for r in range(WORLD)]


def _named(ds: PatchDataset, key: tuple[int, ...]) -> Named:
    i = key[1]
    k = int(ds.item_positions()[i])
    return ds.items[k].item_id, i - k * PER_ITEM, key[2] if len(key) == 3 else 0


def _checkpoint(ds: PatchDataset, samplers: list[StratifiedSampler], taken: list[int]
                ) -> tuple[dict, Counter, Counter]:
    """The state after each rank took `taken` samples (JSON round trip), what they took and what was left."""
    shares = [list(s) for s in samplers]
    took = Counter(_named(ds, k) for share, n in zip(shares, taken) for k in share[:n])
    left = Counter(_named(ds, k) for share, n in zip(shares, taken) for k in share[n:])
    return json.loads(json.dumps(samplers[0].state_dict(taken))), took, left


def _resume(store: Path, state: dict, **kw: bool) -> tuple[PatchDataset, list[list[tuple[int, ...]]]]:
    ds, samplers = _samplers(store)
    for s in samplers:
        s.load_state_dict(state, **kw)
    return ds, [list(s) for s in samplers]


@pytest.mark.timeout(600)
def test_a_checkpoint_from_before_a_new_delivery_is_refused_and_strict_false_finishes_its_epoch(
        tmp_path: Path, scheduler: str) -> None:
    d = make_delivery(tmp_path)
    held = tmp_path / "later"
    held.mkdir()
    shutil.move(d.raw / LATE, held / "late.nii.gz")
    convert_delivery(d.spec, scheduler=scheduler)
    ds, samplers = _samplers(d.store)
    assert "case10" not in {it.item_id for it in ds.items}
    ds.set_epoch(2)
    state, took, left = _checkpoint(ds, samplers, [5, 4])

    shutil.move(held / "late.nii.gz", d.raw / LATE)  # the new delivery arrives and is converted in
    convert_delivery(d.spec, scheduler=scheduler)
    with pytest.raises(StoreChangedError, match=r"1 added \(case10\); the checkpoint covered 10 items, the store "
                                                r"now gives 11") as err:
        _resume(d.store, state)
    assert (err.value.added, err.value.removed, err.value.changed) == (("case10",), (), ())

    now, shares = _resume(d.store, state, strict=False)
    assert now.epoch == 2
    rest = Counter(_named(now, k) for share in shares for k in share)
    assert rest == left  # the checkpoint's epoch goes on exactly: nothing taken twice, nothing of case10
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    keys = [k for share in shares for k in share]
    assert len(set(keys)) == len(keys)

    # A checkpoint inside the remapped epoch, then an item withdrawn: refused, then finished without it.
    ds2, samplers2 = _samplers(d.store)
    for s in samplers2:
        s.load_state_dict(state, strict=False)
    state2, took2, left2 = _checkpoint(ds2, samplers2, [3, 6])
    assert took + took2 + left2 == took + left
    # Withdrawn: a NIfTI item with samples left (not case5, whose file case17 duplicates).
    gone = next(it for it in ds2.items if it.kind == "nifti" and it.item_id != "case5"
                and any(k[0] == it.item_id for k in left2))
    (d.raw / gone.source).unlink()
    convert_delivery(d.spec, scheduler=scheduler)
    with pytest.raises(StoreChangedError, match=rf"1 removed \({gone.item_id}\)") as err:
        _resume(d.store, state2)
    assert err.value.removed == (gone.item_id,)
    now, shares = _resume(d.store, state2, strict=False)
    rest = Counter(_named(now, k) for share in shares for k in share)
    assert rest == Counter({k: n for k, n in left2.items() if k[0] != gone.item_id})


def test_the_same_store_resumes_and_another_selection_is_refused(labeled_store: Path) -> None:
    ds, samplers = _samplers(labeled_store)
    state, _, left = _checkpoint(ds, samplers, [2, 2])
    assert len(state["index"]) == 64 and state["selection"]["names"] == [it.item_id for it in ds.items]
    again, shares = _resume(labeled_store, state)
    assert Counter(_named(again, k) for share in shares for k in share) == left
    other = PatchDataset(labeled_store, PATCH, patches_per_item=PER_ITEM, label="side")  # same length, other classes
    with pytest.raises(ValueError, match="another selection of this store"):
        other.stratified_sampler(num_replicas=WORLD, rank=0).load_state_dict(state)
