"""Random augmentation stays a pure function of the sample's key: the built-in seeded transforms and the MONAI
and TorchIO adapters give the same sample for the same key in any worker, under any start method, in any
order and after a resume, whatever the global generators hold, and leave those generators as they were."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
import torchio as tio
from monai.transforms import Compose as MonaiCompose
from monai.transforms import RandAffined, RandFlipd
from torch.utils.data import DataLoader

from labzarr import PatchDataset
from labzarr.loaders import (
    Compose,
    GaussianNoise,
    MonaiTransform,
    RandomFlip,
    RandomIntensity,
    RandomRot90,
    SeededTransform,
    TorchioTransform,
    seeded,
)

PATCH = (8, 8, 8)
AUGMENT = Compose(RandomFlip(), RandomRot90((0, 1)), RandomIntensity(), GaussianNoise(std=0.5, p=0.5))


def _ds(store: Path, transform: object = AUGMENT, **kw: object) -> PatchDataset:
    return PatchDataset(store, PATCH, patches_per_item=3, label="side", seed=5, transform=transform,  # type: ignore[arg-type]
                        **kw)  # type: ignore[arg-type]


def _scramble() -> None:
    """Put the global generators somewhere else: a seeded transform must not read them."""
    torch.manual_seed(int(torch.randint(1 << 30, ())) + 1)
    np.random.seed(np.random.randint(1 << 30) + 1)


def _flips(plain: torch.Tensor, got: torch.Tensor) -> list[tuple[int, ...]]:
    """The sets of spatial axes whose flip turns `plain` into `got`."""
    n = plain.ndim - 1
    subsets = [s for k in range(n + 1) for s in itertools.combinations(range(n), k)]
    return [s for s in subsets if torch.equal(torch.flip(plain, [a + 1 for a in s]) if s else plain, got)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_random_transform_gives_each_key_one_sample_in_any_worker(balanced_store: Path, method: str) -> None:
    ds = _ds(balanced_store)
    ds[0]  # the parent has read (and transformed) before the workers start
    sampler = ds.stratified_sampler(num_samples=40)
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=method, collate_fn=list,
                        sampler=sampler)
    got = [s for batch in loader for s in batch]
    keys = list(sampler)
    _scramble()
    ref, plain = _ds(balanced_store), _ds(balanced_store, transform=None)
    assert len(got) == len(keys) == 40
    for key in reversed(keys):  # another order, another process, other global generator states
        _scramble()
        assert torch.equal(got[keys.index(key)]["image"], ref[key]["image"]), key
    assert all(s["image"].dtype == torch.float32 for s in got)
    changed = [not torch.allclose(s["image"], plain[k]["image"].float()) for s, k in zip(got, keys)]
    assert all(changed)  # the intensity change applies to every sample: the transform really ran


def test_a_random_transform_survives_a_resume(balanced_store: Path) -> None:
    ds = _ds(balanced_store)
    sampler = ds.stratified_sampler(num_samples=30)
    sampler.set_epoch(2)
    whole = [(k, ds[k]["image"]) for k in sampler]
    state = sampler.state_dict(11)
    again = _ds(balanced_store)
    resumed = again.stratified_sampler(num_samples=30)
    resumed.load_state_dict(state)
    _scramble()
    rest = [(k, again[k]["image"]) for k in resumed]
    assert [k for k, _ in rest] == [k for k, _ in whole[11:]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(rest, whole[11:]))


def test_geometric_transforms_move_image_and_mask_alike_and_intensity_only_the_image(converted_seg) -> None:
    d, _, _ = converted_seg
    plain = PatchDataset(d.store, PATCH, patches_per_item=4, roles=("image", "mask"), seed=1)
    flipped = PatchDataset(d.store, PATCH, patches_per_item=4, roles=("image", "mask"), seed=1,
                           transform=Compose(RandomFlip(p=0.5), GaussianNoise(std=1.0, p=1.0)))
    seen = set()
    for key in range(len(plain)):
        p, f = plain[key], flipped[key]
        mask_flips = _flips(p["mask"], f["mask"])
        assert mask_flips, key  # the mask is only moved, never noised
        assert f["mask"].dtype == p["mask"].dtype
        if len(mask_flips) == 1:  # a mask patch with no symmetry tells which axes were flipped: the image's too
            axes = [a + 1 for a in mask_flips[0]]
            residual = f["image"] - (torch.flip(p["image"], axes) if axes else p["image"]).float()
            assert 0.8 < float(residual.std()) < 1.2, key  # what is left is the noise (std 1) alone
            seen.add(mask_flips[0])
    assert len(seen) > 2  # different keys flip different axes


def test_rot90_and_flip_are_what_their_draws_say(balanced_store: Path) -> None:
    plain = _ds(balanced_store, transform=None)
    rot = _ds(balanced_store, transform=RandomRot90((1, 2), p=1.0))
    ks = set()
    for key in range(6):
        p, r = plain[key]["image"], rot[key]["image"]
        k = [k for k in (1, 2, 3) if torch.equal(torch.rot90(p, k, (2, 3)), r)]
        assert len(k) >= 1, key
        ks.add(k[0])
    assert len(ks) > 1
    with pytest.raises(ValueError, match=r"axes = \(0, 3\); the sample's tensors have 3 spatial axes"):
        _ds(balanced_store, transform=RandomFlip(axes=(0, 3)))[0]
    with pytest.raises(ValueError, match="p = 2"):
        RandomFlip(p=2)


def _noise(sample: dict, rng: np.random.Generator) -> dict:
    return {**sample, "noise": float(rng.random())}


def test_the_protocol_is_the_marker_class_not_the_signature(balanced_store: Path) -> None:
    marked = seeded(_noise)
    assert isinstance(marked, SeededTransform)
    ds = _ds(balanced_store, transform=marked)
    assert ds[(0, 1)]["noise"] == ds[(0, 1)]["noise"] != ds[(0, 2)]["noise"]
    assert ds[(0, 1)]["noise"] != ds[(1, 1)]["noise"] != ds[(0, 1, 1)]["noise"]  # epoch and repeat are in the key
    plain = _ds(balanced_store, transform=lambda s: {**s, "seen": True})  # a one-argument callable gets no rng
    assert plain[0]["seen"]


# -- MONAI and TorchIO -------------------------------------------------------------------------------------


def _monai() -> MonaiTransform:
    return MonaiTransform(MonaiCompose([
        RandFlipd(keys=["image"], prob=0.5, spatial_axis=0),
        RandAffined(keys=["image"], prob=1.0, rotate_range=(0.4, 0.4, 0.4), translate_range=(2, 2, 2),
                    padding_mode="zeros"),
    ]))


def test_monai_randflipd_and_randaffined_are_deterministic_per_key(balanced_store: Path) -> None:
    keys = [(e, i) for e in (0, 1) for i in range(0, 15, 2)] + [(0, 2, 1), (0, 2, 2)]
    a = _ds(balanced_store, transform=_monai())
    first = {k: a[k]["image"] for k in keys}
    _scramble()
    b = _ds(balanced_store, transform=_monai())
    for k in reversed(keys):  # a fresh transform, the other order: the same samples
        assert torch.equal(b[k]["image"], first[k]), k
        assert type(b[k]["image"]) is torch.Tensor  # MONAI's MetaTensor comes back as a plain tensor
    assert len({first[k].sum().item() for k in keys}) == len(keys)  # the affine differs from key to key


def test_monai_adapter_in_two_spawned_workers(balanced_store: Path) -> None:
    ds = _ds(balanced_store, transform=_monai())
    keys = [(0, i) for i in range(12)]
    loader = DataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="spawn", collate_fn=list,
                        sampler=keys)
    got = [s["image"] for b in loader for s in b]
    assert all(torch.equal(g, ds[k]["image"]) for g, k in zip(got, keys))


def test_torchio_randomflip_is_deterministic_per_key_and_leaves_torch_rng_alone(balanced_store: Path) -> None:
    def make() -> PatchDataset:
        return _ds(balanced_store, transform=TorchioTransform(tio.RandomFlip(axes=(0, 1, 2), flip_probability=0.5)))

    a, plain = make(), _ds(balanced_store, transform=None)
    keys = [(0, i) for i in range(15)] + [(3, 4), (0, 4, 1)]
    torch.manual_seed(11)
    before = torch.get_rng_state()
    first = {k: a[k]["image"] for k in keys}
    assert torch.equal(torch.get_rng_state(), before)  # the adapter restored torch's generator
    b = make()
    flips = set()
    for k in reversed(keys):
        _scramble()
        got = b[k]["image"]
        assert torch.equal(got, first[k]), k
        found = _flips(plain[k]["image"], got)
        assert found, k  # what TorchIO did is a flip of the plain patch
        flips.add(found[0])
    assert len(flips) > 2
