from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset, open_store

from ..conftest import nib_load


def canonical(path) -> np.ndarray:
    data = np.asanyarray(nib.as_closest_canonical(nib_load(path)).dataobj)
    return np.moveaxis(data.reshape(data.shape[:3] + (-1,), order="F"), 3, 0)


def test_patches_equal_source_slices(converted_demo) -> None:
    d, _ = converted_demo
    ds = PatchDataset(d.store, patch_size=(8, 8, 8), patches_per_item=3, seed=1)
    assert len(ds) == 3 * len(ds.items)
    sources = {i.item_id: canonical(d.raw / i.source) for i in ds.items}
    for i in range(len(ds)):
        s = ds[i]
        src = sources[s["item_id"]]
        o = s["origin"]
        want = src[:, o[0]:o[0] + 8, o[1]:o[1] + 8, o[2]:o[2] + 8]
        got = s["image"].numpy()
        assert got.shape == (src.shape[0], 8, 8, 8)
        np.testing.assert_array_equal(got[:, :want.shape[1], :want.shape[2], :want.shape[3]], want.astype(got.dtype))
        assert (got[:, want.shape[1]:] == 0).all() and (got[:, :, want.shape[2]:] == 0).all()


def test_same_seed_same_patches_any_order_and_epochs_differ(converted_demo) -> None:
    d, _ = converted_demo
    a = PatchDataset(d.store, (8, 8, 8), patches_per_item=2, seed=5)
    b = PatchDataset(d.store, (8, 8, 8), patches_per_item=2, seed=5)
    order = list(range(len(a)))
    fwd = [a[i]["origin"] for i in order]
    back = {i: b[i]["origin"] for i in reversed(order)}
    assert fwd == [back[i] for i in order]
    a.set_epoch(1)
    assert [a[i]["origin"] for i in order] != fwd


def test_dataloader_two_workers_full_epoch(converted_demo) -> None:
    d, _ = converted_demo
    ds = PatchDataset(d.store, (4, 4, 4), patches_per_item=2, seed=0)
    seen = []
    loader = DataLoader(ds, batch_size=1, num_workers=2, shuffle=False)
    for batch in loader:
        seen.append((batch["item_id"][0], tuple(int(v) for v in batch["origin"])))
        assert isinstance(batch["image"], torch.Tensor)
    assert seen == [(ds[i]["item_id"], ds[i]["origin"]) for i in range(len(ds))]


@pytest.mark.parametrize("bad", [-1, 10_000, 1.5, "0", True])
def test_bad_index_raises_index_error(converted_demo, bad) -> None:
    d, _ = converted_demo
    ds = PatchDataset(d.store, (4, 4, 4))
    with pytest.raises(IndexError, match=rf"valid indexes are 0\.\.{len(ds) - 1}"):
        ds[bad]


def test_init_reads_only_the_index(converted_demo, monkeypatch) -> None:
    d, _ = converted_demo
    import zarr

    def boom(*a, **k):
        raise AssertionError("array opened in __init__")

    monkeypatch.setattr(zarr, "open_array", boom)
    ds = PatchDataset(d.store, (4, 4, 4))
    assert len(ds.items) == len(open_store(d.store).items)
