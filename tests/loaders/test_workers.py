"""Real DataLoader workers under each start method; a hang fails through the timeout guard, not CI's."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset
from labzarr.loaders import Collate
from labzarr.store import ChecksumError

# The demo store mixes 1-, 2- and 20-channel items of int16, uint8 and float32: these tests batch them all.
collate = Collate(channels="pad", dtypes="promote")


def expected(ds: PatchDataset, keys) -> list[tuple[str, tuple[int, ...], torch.Tensor]]:
    return [(s["item_id"], s["origin"], s["image"]) for s in (ds[k] for k in keys)]


def flatten(batches) -> list[tuple[str, tuple[int, ...], torch.Tensor]]:
    out = []
    for b in batches:
        for n, item_id in enumerate(b["item_id"]):
            c = int(b["image_mask"][n].any(dim=(1, 2, 3)).sum()) if "image_mask" in b else b["image"].shape[1]
            out.append((item_id, tuple(int(v) for v in b["origin"][n]), b["image"][n, :c]))
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(x[0] == y[0] and x[1] == y[1] and torch.equal(x[2], y[2]) for x, y in zip(a, b))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_two_workers_iterate_an_epoch_under_each_start_method(labeled_store: Path, method: str) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=2, label="cell_type", seed=3)
    ds[0]  # the parent has read before the workers start: a fork must not inherit its open files
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=method, collate_fn=collate,
                        sampler=ds.stratified_sampler())
    got = flatten(loader)
    keys = list(loader.sampler)
    assert same(got, expected(ds, keys))


@pytest.mark.timeout(120)
def test_persistent_workers_follow_the_sampler_epoch(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=2, label="cell_type", seed=3)
    sampler = ds.stratified_sampler()
    loader = DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True, collate_fn=collate,
                        sampler=sampler, multiprocessing_context="fork")
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        epochs.append(flatten(loader))  # the workers were started in epoch 0 and are reused in epoch 1
        assert same(epochs[-1], expected(ds, list(sampler)))
    assert [o for _, o, _ in epochs[0]] != [o for _, o, _ in epochs[1]]


@pytest.mark.timeout(120)
def test_a_flipped_byte_is_a_named_error_in_a_worker_never_wrong_voxels(labeled_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "damaged.zarr"
    shutil.copytree(labeled_store, store)
    ds = PatchDataset(store, None)
    item = max(ds.items, key=lambda i: int(np.prod(i.shape)))
    shard = max((p for p in (store / item.array / "c").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    blob = bytearray(shard.read_bytes())
    blob[len(blob) // 3] ^= 0x10  # inside a chunk's compressed bytes, far from the shard index at the end
    shard.write_bytes(bytes(blob))
    loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="fork",
                        sampler=[ds.items.index(item)])
    with pytest.raises(ChecksumError):  # in this process
        ds[ds.items.index(item)]
    # torch re-raises a worker's exception by its type, or as a RuntimeError carrying its text
    with pytest.raises((ChecksumError, RuntimeError), match="stored bytes are damaged") as raised:
        next(iter(loader))
    message = str(raised.value)
    assert str(store) in message and repr(item.array) in message and f"item {item.item_id}" in message
    assert "chunk (" in message and "labzarr verify" in message
