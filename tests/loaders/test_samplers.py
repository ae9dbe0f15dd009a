from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from labzarr import PatchDataset
from labzarr.loaders import StratifiedSampler

from .conftest import CELL_TYPES


def classes_of(ds: PatchDataset, keys) -> Counter:
    items = ds.item_positions()
    return Counter(ds.classes[ds.targets[items[i]]] for _, i, *_ in keys)


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("num_samples", [None, 7, 301])
def test_class_counts_are_balanced_to_within_one(labeled_store: Path, replacement: bool, num_samples) -> None:
    # The items are 4 neuron, 3 astrocyte, 2 microglia, 1 oligodendrocyte; each epoch draws every class
    # equally often (+-1).
    ds = PatchDataset(labeled_store, (4, 4, 4), patches_per_item=3, label="cell_type")
    sampler = ds.stratified_sampler(replacement=replacement, num_samples=num_samples)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        keys = list(sampler)
        assert len(keys) == len(sampler) == (num_samples or len(ds))
        counts = classes_of(ds, keys)
        assert set(counts) == set(CELL_TYPES.values())
        assert max(counts.values()) - min(counts.values()) <= 1, counts
        assert all(e == epoch for e, *_ in keys)


def test_without_replacement_every_sample_of_a_class_is_drawn_equally_often(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4), patches_per_item=2, label="cell_type")
    keys = [i for _, i, *_ in ds.stratified_sampler(num_samples=80)]  # 20 per class: oligodendrocyte has 2 samples
    items = ds.item_positions()
    for c, name in enumerate(ds.classes):
        pool = [i for i in range(len(ds)) if ds.targets[items[i]] == c]
        times = Counter(i for i in keys if i in pool)
        assert sum(times.values()) == 20
        # a small class is cycled (each sample 20 // len(pool) or one more times), a large one subsampled
        assert {times.get(i, 0) for i in pool} <= {20 // len(pool), -(-20 // len(pool))}, (name, times)


def test_epochs_are_deterministic_and_differ(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4), patches_per_item=3, label="cell_type")
    a = ds.stratified_sampler()
    b = PatchDataset(labeled_store, (4, 4, 4), patches_per_item=3, label="cell_type").stratified_sampler()
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert ds.epoch == 1  # one epoch for sampler and dataset
    assert list(a) != first
    a.set_epoch(0)
    assert list(a) == first
    assert list(ds.stratified_sampler(seed=9)) != first


@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("replacement", [False, True])
def test_ddp_shards_partition_each_epoch_exactly(labeled_store: Path, replicas: int, replacement: bool) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4), patches_per_item=3, label="cell_type")  # 30 samples
    for epoch in range(2):
        shards = []
        for rank in range(replicas):
            s = ds.stratified_sampler(num_replicas=replicas, rank=rank, replacement=replacement)
            s.set_epoch(epoch)
            shards.append([i for _, i, *_ in s])
        whole = ds.stratified_sampler(num_replicas=replicas, rank=0, replacement=replacement).epoch_indices(epoch)
        assert len({len(s) for s in shards}) == 1  # equal lengths
        assert len(whole) == replicas * len(shards[0]) >= len(ds)
        interleaved = [shards[r][k] for k in range(len(shards[0])) for r in range(replicas)]
        assert interleaved == whole.tolist()  # every position of the epoch on exactly one rank: no gaps, no overlap


@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
def test_ddp_shards_of_a_balanced_epoch_are_a_partition_of_the_dataset(balanced_store: Path, replicas: int) -> None:
    # "side" is 5 x "left", 5 x "right": 60 samples, and an epoch without replacement is a permutation of
    # the dataset, so the shards, for any world size dividing 60, hold every sample exactly once.
    ds = PatchDataset(balanced_store, (4, 4, 4), patches_per_item=6, label="side")
    assert len(ds) == 60
    for epoch in range(2):
        union: list[int] = []
        for rank in range(replicas):
            s = StratifiedSampler(ds, num_replicas=replicas, rank=rank)
            s.set_epoch(epoch)
            shard = [i for _, i, *_ in s]
            assert len(shard) == 60 // replicas
            union += shard
        assert sorted(union) == list(range(60))


def test_sampler_needs_a_label_and_a_valid_rank(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4))
    with pytest.raises(ValueError, match="stratified_sampler needs a label"):
        ds.stratified_sampler()
    with pytest.raises(ValueError, match=r"rank = 2, num_replicas = 2"):
        ds.stratified_sampler("cell_type", num_replicas=2, rank=2)
    s = ds.stratified_sampler("cell_type")  # a label the dataset was not built with is fine
    assert s.classes == ("astrocyte", "microglia", "neuron", "oligodendrocyte") and ds.classes == ()


def test_dataset_accepts_the_sampler_keys(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4), label="cell_type")
    s = ds.stratified_sampler()
    s.set_epoch(3)
    key = next(iter(s))
    ds.set_epoch(0)
    assert key[0] == 3
    other = PatchDataset(labeled_store, (4, 4, 4))
    other.set_epoch(3)
    assert ds[key]["origin"] == other.origin(key[1])
    assert np.array_equal(ds[key]["image"].numpy(), other[key[1]]["image"].numpy())
