"""Reading a store at an s3:// URL (moto server): the same index, voxels and patches as the local store."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset, open_store
from labzarr.loaders import Collate, ReadOptions


def test_open_store_reads_the_same_items_and_voxels(converted_s3, converted_demo) -> None:
    _, _, url = converted_s3
    local, _ = converted_demo
    a, b = open_store(local.store), open_store(url)
    assert b.path == url and a.items == b.items
    for item in a.items:
        np.testing.assert_array_equal(a.read(item), b.read(item), err_msg=item.item_id)


def test_a_missing_store_at_a_url_is_file_not_found(s3) -> None:
    with pytest.raises(FileNotFoundError, match="no such store"):
        open_store("s3://labzarr/nothing-here.zarr")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("backend", "method"), [("zarr", "fork"), ("auto", "forkserver"), ("auto", "fork")],
                         ids=["zarr-fork", "labzarr-forkserver", "labzarr-fork"])
def test_patches_from_the_url_equal_the_local_ones(converted_s3, converted_demo, s3, backend: str,
                                                   method: str) -> None:
    """Two DataLoader workers read the URL store (through fsspec, told the endpoint through `storage_options`);
    every patch equals the one the local store gives for the same key."""
    _, _, url = converted_s3
    local, _ = converted_demo
    options = {"endpoint_url": s3.endpoint, "key": "testing", "secret": "testing"}
    remote = PatchDataset(url, (8, 8, 8), patches_per_item=2, label="cell_type", seed=11,
                          read=ReadOptions(backend=backend, storage_options=options))  # type: ignore[arg-type]
    near = PatchDataset(local.store, (8, 8, 8), patches_per_item=2, label="cell_type", seed=11)
    remote[0]  # the parent reads first: a forked worker must not reuse its filesystem's event loop
    loader = DataLoader(remote, batch_size=5, num_workers=2, multiprocessing_context=method,
                        collate_fn=Collate(channels="pad", dtypes="promote"))  # the demo mixes both
    got = [(item_id, image) for b in loader for item_id, image in zip(b["item_id"], b["image"])]
    assert len(got) == len(near) == 2 * len(near.items) > 0
    for k, (item_id, image) in enumerate(got):
        want = near[k]
        c = want["image"].shape[0]
        assert item_id == want["item_id"] and torch.equal(image[:c], want["image"]), k
