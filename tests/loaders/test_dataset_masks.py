"""PatchDataset on a segmentation store: image and mask of one region, foreground oversampling, class weights."""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from torch.utils.data import DataLoader

from labzarr import PatchDataset, convert_delivery
from labzarr.loaders import open_store

from ..conftest import nib_load, seg_delivery
from ..segmentation import SEG_ROLES, anatomy, save

SHAPE, BLOB, PATCH = 48, (30, 9, 20), 12  # a 2x2x2 blob of class 1 in a 48^3 volume, 12^3 patches


def canonical(path: Path) -> np.ndarray:
    return np.asanyarray(nib.as_closest_canonical(nib_load(path)).dataobj)[np.newaxis]


@pytest.fixture(scope="module")
def sparse_store(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> Path:
    """One sample: a real-data image (anatomical.nii, tiled to 48^3) and a sparse mask, stored RAS (identity)."""
    d = seg_delivery(tmp_path_factory.mktemp("sparse"), SEG_ROLES)
    data, _ = anatomy()
    image = np.resize(data, (SHAPE,) * 3)
    mask = _sparse_mask()
    affine = np.diag([1.5, 1.5, 3.0, 1.0])
    save(d.raw / "case_001_img.nii.gz", image, affine)
    save(d.raw / "case_001_seg.nii.gz", mask, affine)
    assert convert_delivery(d.spec, scheduler=scheduler).summary["counts"]["ok"] == 1
    return d.store


def _sparse_mask() -> np.ndarray:
    mask = np.zeros((SHAPE,) * 3, np.uint8)
    x, y, z = BLOB
    mask[x:x + 2, y:y + 2, z:z + 2] = 1
    mask[5, 40, 40] = 2  # one voxel of a second class
    return mask


def _uniform_hit_probability() -> float:
    """P(a uniformly placed patch holds foreground): the share of all origins whose window does."""
    windows = np.lib.stride_tricks.sliding_window_view(_sparse_mask() > 0, (PATCH,) * 3)
    return float(windows.any(axis=(3, 4, 5)).mean())


def _fraction(ds: PatchDataset) -> float:
    return float(np.mean([bool(ds[i]["mask"].numpy().any()) for i in range(len(ds))]))


def test_image_and_mask_patches_are_the_same_region(converted_seg) -> None:
    d, _, _ = converted_seg
    ds = PatchDataset(d.store, (16, 16, 16), patches_per_item=6, seed=3, roles=("image", "mask"), foreground=0.5)
    for i in range(len(ds)):
        s = ds[i]
        item = ds.items[i // ds.patches_per_item]
        mask_source = next(p for p in d.raw.glob(f"{item.source.split('_img')[0]}_seg*"))
        x, y, z = s["origin"]
        for role, source in (("image", d.raw / item.source), ("mask", mask_source)):
            want = canonical(source)[:, x:x + 16, y:y + 16, z:z + 16]
            got = s[role].numpy()
            assert got.shape == (1, 16, 16, 16)
            np.testing.assert_array_equal(got[:, :want.shape[1], :want.shape[2], :want.shape[3]],
                                          want.astype(got.dtype))
            assert not got[:, want.shape[1]:].any() or role == "image"  # past the volume: padding


def test_grid_mode_tiles_every_role_alike_and_covers_every_voxel(converted_seg) -> None:
    """Grid tiles with overlap on x, an exact fit on y, and a patch longer than z (one centred, padded tile)."""
    d, _, _ = converted_seg
    patch = (16, 20, 32)
    ds = PatchDataset(d.store, patch, mode="grid", overlap=(4, 0, 0), roles=("image", "mask"), pad_value=-1)
    arrays = {(item.item_id, role): open_store(d.store).array(item.roles[role])[...]
              for item in ds.items for role in ("image", "mask")}
    covered = {item.item_id: np.zeros(item.shape[1:], np.int32) for item in ds.items}
    assert len(ds) == len(ds.items) * 3 * 3 * 1  # x 33: 0, 12, 17; y 41: 0, 20, 21; z 25: -3
    for i in range(len(ds)):
        s = ds[i]
        assert set(s) >= {"image", "mask", "origin", "valid"}
        valid = tuple(slice(a, b) for a, b in s["valid"])
        source = tuple(slice(o + a, o + b) for o, (a, b) in zip(s["origin"], s["valid"]))
        for role in ("image", "mask"):
            got = s[role].numpy()
            assert got.shape == (1, *patch)
            want = arrays[(s["item_id"], role)][(slice(None), *source)]
            np.testing.assert_array_equal(got[(slice(None), *valid)], want)
            outside = np.ones(patch, bool)
            outside[valid] = False
            assert (got[0][outside] == (0 if role == "mask" else -1)).all()  # a mask pads with 0
        covered[s["item_id"]][source] += 1
    for item_id, count in covered.items():
        assert count.min() >= 1, item_id  # every voxel of every mask (and image) is in some tile


def test_foreground_fraction_matches_expectation(sparse_store: Path) -> None:
    """Measured over 1000 patches; tolerance 4 binomial standard deviations (p=0.33 + 0.67 p0, and p0 for 0)."""
    p0 = _uniform_hit_probability()
    n = 1000
    for foreground in (0.33, 0.0):
        ds = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=n, seed=11, roles=("mask",),
                          foreground=foreground)
        expected = foreground + (1 - foreground) * p0
        tolerance = 4 * math.sqrt(expected * (1 - expected) / n)
        assert abs(_fraction(ds) - expected) < tolerance, (foreground, expected, tolerance)


def test_foreground_zero_is_exactly_uniform_sampling(sparse_store: Path) -> None:
    plain = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=50, seed=2)
    masked = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=50, seed=2, roles=("image", "mask"))
    assert [plain.origin(i) for i in range(50)] == [masked.origin(i) for i in range(50)]


def test_foreground_one_always_holds_a_chosen_class_and_class_weights_steer(sparse_store: Path) -> None:
    every = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=200, seed=4, roles=("mask",), foreground=1.0)
    hits = [set(np.unique(every[i]["mask"].numpy()).tolist()) - {0} for i in range(len(every))]
    assert all(hits)
    assert 40 < sum(2 in h for h in hits) < 160  # both classes chosen alike, whatever their size
    only2 = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=50, seed=4, roles=("mask",), foreground=1.0,
                         class_weights={2: 1.0})
    assert all((only2[i]["mask"] == 2).any() for i in range(len(only2)))


def test_foreground_patches_are_pure_in_seed_epoch_index_and_in_workers(sparse_store: Path) -> None:
    a = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=16, seed=9, roles=("image", "mask"), foreground=0.5)
    b = PatchDataset(sparse_store, (PATCH,) * 3, patches_per_item=16, seed=9, roles=("image", "mask"), foreground=0.5)
    first = [a.origin(i) for i in range(16)]
    assert first == [b.origin(i) for i in reversed(range(16))][::-1]
    loader = DataLoader(a, batch_size=4, num_workers=2)
    assert [tuple(int(v) for v in o) for batch in loader for o in zip(*batch["origin"])] == first
    a.set_epoch(1)
    assert [a.origin(i) for i in range(16)] != first


def test_roles_and_foreground_need_a_segmentation_store(converted_demo, sparse_store: Path) -> None:
    d, _ = converted_demo
    with pytest.raises(ValueError, match="has no role 'mask'"):
        PatchDataset(d.store, (8, 8, 8), roles=("image", "mask"))
    with pytest.raises(ValueError, match="no class locations"):
        PatchDataset(d.store, (8, 8, 8), foreground=0.33)
    with pytest.raises(ValueError, match=r"foreground = 1.5"):
        PatchDataset(sparse_store, (8, 8, 8), foreground=1.5)
    with pytest.raises(ValueError, match="has no role 'label'"):
        PatchDataset(sparse_store, (8, 8, 8), roles=("image", "label"))
