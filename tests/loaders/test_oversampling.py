"""Oversampling draws fresh patches: a sample index drawn again within an epoch (a small class cycled, draws
with replacement, more draws than samples) is keyed `(epoch, index, repeat)` and reads a patch of its own; no
key reaches two ranks, in process and over a real gloo process group of 2 ranks."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from labzarr import PatchDataset

from .ddp_resume import PATCH, dataset
from .test_resume import _run


def _ranks(ds: PatchDataset, replicas: int, **kw: object) -> list[list[tuple[int, ...]]]:
    out = []
    for r in range(replicas):
        s = ds.stratified_sampler(num_replicas=replicas, rank=r, **kw)  # type: ignore[arg-type]
        out.append(list(s))
    return out


@pytest.mark.parametrize("replicas", [1, 2, 3])
@pytest.mark.parametrize("replacement", [False, True])
def test_every_draw_of_an_epoch_has_its_own_key_and_origin(labeled_store: Path, replicas: int,
                                                           replacement: bool) -> None:
    ds = dataset(str(labeled_store))  # 11 items x 3: oligodendrocyte is one item, 3 samples, drawn ~9 times
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        shares = _ranks(ds, replicas, replacement=replacement, num_samples=60)
        keys = [k for share in shares for k in share]
        assert len(keys) == len(set(keys)) >= 60  # no key twice, on one rank or across ranks
        assert all(k[0] == epoch for k in keys)
        by_index: defaultdict[int, list[tuple[int, ...]]] = defaultdict(list)
        for k in keys:
            by_index[k[1]].append(k)
        by_item: defaultdict[int, list[tuple[int, ...]]] = defaultdict(list)
        for i, ks in by_index.items():
            assert sorted(k[2] if len(k) == 3 else 0 for k in ks) == list(range(len(ks)))  # repeats 0, 1, 2, ...
            by_item[int(ds.item_positions()[i])] += [ds.origin(k) for k in ks]
        for k, origins in by_item.items():  # every draw of an item a new patch, while the item has one left
            room = int(np.prod([max(n - p + 1, 1) for n, p in zip(ds.items[k].shape[1:], PATCH)]))
            assert len(set(origins)) == min(len(origins), room), (ds.items[k].item_id, origins)
        small = [i for i in by_index if ds.items[ds.item_positions()[i]].labels["cell_type"] == "oligodendrocyte"]
        assert max(len(by_index[i]) for i in small) >= 3  # the one-item class really is oversampled


def test_shuffle_sampler_cycling_past_the_dataset_draws_fresh_patches(labeled_store: Path) -> None:
    ds = dataset(str(labeled_store))
    keys = list(ds.shuffle_sampler(num_samples=3 * len(ds)))
    assert len(set(keys)) == len(keys) == 3 * len(ds)
    assert Counter(len(k) for k in keys) == {2: len(ds), 3: 2 * len(ds)}
    for i in range(len(ds)):
        assert len({ds.origin(k) for k in keys if k[1] == i}) == 3


def test_a_repeat_key_is_a_pure_function_too(labeled_store: Path) -> None:
    a, b = dataset(str(labeled_store)), dataset(str(labeled_store))
    assert a.origin((2, 5, 3)) == b.origin((2, 5, 3)) != a.origin((2, 5, 0))
    assert a.origin((2, 5, 0)) == a.origin((2, 5))  # the first draw keeps the plain key's origin
    with pytest.raises(IndexError, match="the repeat must be an int >= 0"):
        a[(0, 1, -1)]


@pytest.mark.timeout(240)
def test_two_gloo_ranks_stratified_over_a_one_item_class_never_share_a_key_and_repeats_differ(
        labeled_store: Path, tmp_path: Path) -> None:
    ds = dataset(str(labeled_store))
    room = {it.item_id: int(np.prod([max(n - p + 1, 1) for n, p in zip(it.shape[1:], PATCH)])) for it in ds.items}
    _run(labeled_store, tmp_path, "over", 2, kind="stratified", batch=4, patches=True)
    ranks = [[json.loads(line) for line in (tmp_path / f"over.{r}.patches").read_text().splitlines()]
             for r in (0, 1)]
    keys = [{tuple(row[0]) for row in rows} for rows in ranks]
    assert sum(len(rows) for rows in ranks) == len(keys[0]) + len(keys[1])  # no key twice on one rank
    assert not keys[0] & keys[1]  # no key on both ranks
    whole = Counter(k for share in _ranks(ds, 2) for k in share)
    assert Counter(keys[0] | keys[1]) == whole  # the ranks took exactly the epoch
    patches: defaultdict[str, list[tuple[tuple[int, ...], str]]] = defaultdict(list)
    for rows in ranks:
        for _key, item_id, origin, voxels in rows:
            patches[item_id].append((tuple(origin), voxels))
    (lonely,) = [it.item_id for it in ds.items if it.labels["cell_type"] == "oligodendrocyte"]
    assert len(patches[lonely]) > 3  # drawn more often than it has samples
    assert room[lonely] >= len(patches[lonely])
    for item_id, got in patches.items():  # every draw of an item a different patch, while it has one left
        assert len({o for o, _ in got}) == min(len(got), room[item_id]), item_id
    assert len({v for _, v in patches[lonely]}) == len(patches[lonely])  # different voxels, not just origins
