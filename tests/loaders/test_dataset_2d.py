from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset, open_store

from ..imaging import turbo_decode


def test_2d_patches_equal_the_decoded_source(converted_images) -> None:
    d, _, _ = converted_images
    ds = PatchDataset(d.store, patch_size=(8, 8), patches_per_item=3, seed=2)
    assert len(ds) == 3 * len(ds.items)
    checked = 0
    for i in range(len(ds)):
        s = ds[i]
        item = ds.items[i // 3]
        y, x = s["origin"]
        assert s["image"].shape == (item.shape[0], 8, 8)
        if item.source in {f"tiles/tile_{n:03d}.jpg" for n in (1, 2, 3, 13, 14, 17)}:
            src = turbo_decode((d.raw / item.source).read_bytes())
            np.testing.assert_array_equal(s["image"].numpy(), src[:, y : y + 8, x : x + 8])
            checked += 1
    assert checked == 18


def test_whole_images_with_patch_size_none(converted_images) -> None:
    d, _, _ = converted_images
    view = open_store(d.store)
    ds = PatchDataset(d.store, patch_size=None)
    for i, item in enumerate(ds.items):
        s = ds[i]
        assert s["origin"] == (0, 0) and s["item_id"] == item.item_id
        np.testing.assert_array_equal(s["image"].numpy(), view.array(item)[item.slot])


def test_patch_larger_than_image_is_centred_and_padded(converted_images) -> None:
    d, _, _ = converted_images
    view = open_store(d.store)
    ds = PatchDataset(d.store, patch_size=(36, 48), pad_value=7)
    i = next(k for k, item in enumerate(ds.items) if item.shape == (3, 32, 40))
    s = ds[i]
    image = s["image"].numpy()
    assert s["origin"] == (-2, -4) and s["valid"] == ((2, 34), (4, 44)) and image.shape == (3, 36, 48)
    np.testing.assert_array_equal(image[:, 2:34, 4:44], view.read(ds.items[i]))
    inside = np.zeros((36, 48), bool)
    inside[2:34, 4:44] = True
    assert (image[:, ~inside] == 7).all()


def test_grid_tiles_cover_every_pixel_of_every_image(converted_images) -> None:
    d, _, _ = converted_images
    view = open_store(d.store)
    ds = PatchDataset(d.store, patch_size=(32, 32), mode="grid", overlap=8)
    cover = {item.item_id: np.zeros(item.shape[1:], np.int32) for item in ds.items}
    for i in range(len(ds)):
        s = ds[i]
        (y0, y1), (x0, x1) = s["valid"]
        oy, ox = s["origin"]
        src = view.read(s["item_id"])
        np.testing.assert_array_equal(s["image"].numpy()[:, y0:y1, x0:x1], src[:, oy + y0:oy + y1, ox + x0:ox + x1])
        cover[s["item_id"]][oy + y0:oy + y1, ox + x0:ox + x1] += 1
    assert all((c >= 1).all() for c in cover.values())


def test_3d_patch_on_2d_items_is_refused(converted_images) -> None:
    d, _, _ = converted_images
    with pytest.raises(ValueError, match=r"has 2 spatial axes \(shape \(3, 32, 40\)\), patch_size \(8, 8, 8\) has 3"):
        PatchDataset(d.store, patch_size=(8, 8, 8))


def test_dataloader_two_workers_over_2d_stacks(converted_images) -> None:
    d, _, _ = converted_images
    ds = PatchDataset(d.store, patch_size=(16, 16), patches_per_item=2, seed=4)
    loader = DataLoader(ds, batch_size=1, num_workers=2, shuffle=False)
    seen = []
    for batch in loader:
        assert isinstance(batch["image"], torch.Tensor) and batch["image"].shape[-2:] == (16, 16)
        seen.append((batch["item_id"][0], tuple(int(v) for v in batch["origin"]), float(batch["image"].float().sum())))
    assert seen == [(ds[i]["item_id"], ds[i]["origin"], float(ds[i]["image"].float().sum())) for i in range(len(ds))]
