from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from labzarr import PatchDataset, open_store
from labzarr.loaders import ReadOptions, collate

BACKENDS = ["labzarr", "zarr"]


def check_sample(sample: dict, src: np.ndarray, patch: tuple[int, ...], pad: float) -> None:
    """The patch equals the numpy slice of the source at `origin`, and is `pad` exactly outside `valid`."""
    got = sample["image"].numpy()
    assert got.shape == (src.shape[0], *patch)
    o, valid = sample["origin"], sample["valid"]
    inside = tuple(slice(a, b) for a, b in valid)
    want = src[(slice(None), *(slice(x + a, x + b) for x, (a, b) in zip(o, valid)))]
    np.testing.assert_array_equal(got[(slice(None), *inside)], want.astype(got.dtype))
    outside = np.ones(got.shape[1:], bool)
    outside[inside] = False
    assert (got[:, outside] == pad).all()
    for n, x, p, (a, b) in zip(src.shape[1:], o, patch, valid):
        assert (a, b) == (max(0, -x), min(p, n - x))  # valid is exactly the part of the patch inside the item


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_patches_equal_source_slices_and_pad_outside(labeled_store: Path, sources, backend: str) -> None:
    patch = (24, 24, 24)  # larger than some demo items on some axes: those patches are centred and padded
    ds = PatchDataset(labeled_store, patch, patches_per_item=3, seed=1, pad_value=7,
                      read=ReadOptions(backend=backend))
    assert len(ds) == 3 * len(ds.items)
    padded = 0
    for i in range(len(ds)):
        s = ds[i]
        check_sample(s, sources[s["item_id"]], patch, pad=7)
        padded += any((a, b) != (0, p) for (a, b), p in zip(s["valid"], patch))
    assert padded  # the demo has items smaller than 24 voxels: padding was exercised


def test_small_item_is_centred_in_its_patch(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8))
    k = next(n for n, item in enumerate(ds.items) if item.item_id == "case2")  # 17 x 21 x 3 voxels
    o = ds.origin(k)
    assert o[2] == -2 and ds[k]["valid"][2] == (2, 5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_read_together_equals_the_samples_read_one_by_one(labeled_store: Path, backend: str) -> None:
    ds = PatchDataset(labeled_store, (24, 24, 24), patches_per_item=2, seed=4, label="cell_type",
                      read=ReadOptions(backend=backend))
    keys = [3, (2, 5), 0, 17, 3]
    together = ds.__getitems__(keys)  # what the DataLoader calls with each batch's keys
    for key, s in zip(keys, together):
        one = ds[key]
        assert s.keys() == one.keys() and s["origin"] == one["origin"] and s["label"] == one["label"]
        assert torch.equal(s["image"], one["image"])


def test_same_seed_and_epoch_same_samples_in_any_order(labeled_store: Path) -> None:
    a = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=2, seed=5, read=ReadOptions(backend="zarr"))
    b = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=2, seed=5, read=ReadOptions(backend="labzarr"))
    order = np.random.default_rng(0).permutation(len(a)).tolist()
    fwd = {i: a[i] for i in range(len(a))}
    shuffled = {i: b[i] for i in order}
    for i in range(len(a)):
        assert fwd[i]["origin"] == shuffled[i]["origin"] and fwd[i]["item_id"] == shuffled[i]["item_id"]
        assert torch.equal(fwd[i]["image"], shuffled[i]["image"])


def test_epochs_and_seeds_change_the_patches_and_keys_carry_the_epoch(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=4, seed=5)
    e0 = [ds.origin(i) for i in range(len(ds))]
    ds.set_epoch(1)
    e1 = [ds.origin(i) for i in range(len(ds))]
    assert e1 != e0
    assert [ds.origin((0, i)) for i in range(len(ds))] == e0  # an (epoch, index) key ignores set_epoch
    other = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=4, seed=6)
    assert [other.origin(i) for i in range(len(ds))] != e0
    assert torch.equal(ds[(0, 3)]["image"],
                       PatchDataset(labeled_store, (8, 8, 8), patches_per_item=4, seed=5)[3]["image"])


@pytest.mark.parametrize("overlap", [0, (4, 2, 0)])
def test_grid_covers_every_voxel_of_every_item(labeled_store: Path, sources, overlap) -> None:
    patch = (16, 16, 8)
    ds = PatchDataset(labeled_store, patch, mode="grid", overlap=overlap)
    cover = {k: np.zeros(v.shape[1:], np.int32) for k, v in sources.items()}
    for i in range(len(ds)):
        s = ds[i]
        check_sample(s, sources[s["item_id"]], patch, pad=0)
        o = s["origin"]
        cover[s["item_id"]][tuple(slice(x + a, x + b) for x, (a, b) in zip(o, s["valid"]))] += 1
    assert all((c >= 1).all() for c in cover.values()), {k: int((c == 0).sum()) for k, c in cover.items()}
    expected = sum(int(np.prod([1 if n <= p else -(-(n - p) // (p - ov)) + 1 for n, p, ov in
                                zip(v.shape[1:], patch, (overlap,) * 3 if isinstance(overlap, int) else overlap)]))
                   for v in sources.values())
    assert len(ds) == expected  # len counts every tile of every item


def test_labels_become_stable_class_indexes(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4), label="cell_type")
    assert ds.classes == ("astrocyte", "microglia", "neuron", "oligodendrocyte")
    for i in range(len(ds)):
        s = ds[i]
        assert ds.classes[s["label"]] == open_store(labeled_store).item(s["item_id"]).labels["cell_type"]
    pinned = PatchDataset(labeled_store, (4, 4, 4), label="cell_type",
                          classes=["neuron", "oligodendrocyte", "unseen", "microglia", "astrocyte"])
    assert pinned.classes[pinned[0]["label"]] == ds.classes[ds[0]["label"]]
    assert pinned.targets != ds.targets


@pytest.mark.parametrize(("kwargs", "match"), [
    pytest.param({"label": "nope"}, r"label 'nope' is missing for 11 item\(s\).*labels in the store: cell_type, side",
                 id="label"),
    pytest.param({"label": "cell_type", "classes": ["neuron", "astrocyte"]},
                 r"values \['microglia', 'oligodendrocyte'\] that are not in classes", id="classes"),
    pytest.param({"patches_per_item": 0}, r"patches_per_item = 0; expected >= 1", id="ppi"),
    pytest.param({"mode": "grid", "patches_per_item": 2}, r"grid mode yields every tile once", id="grid-ppi"),
    pytest.param({"mode": "sliding"}, r"mode = 'sliding'", id="mode"),
    pytest.param({"overlap": 8}, r"overlap = 8; expected 0 <= overlap < patch", id="overlap"),
    pytest.param({"seed": -1}, r"seed = -1; expected an int >= 0", id="seed"),
    pytest.param({"pad_value": 0.5}, r"pad_value = 0.5 does not fit dtype int16 of item 'case1'", id="pad"),
])
def test_bad_arguments_raise_value_error(labeled_store: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PatchDataset(labeled_store, (8, 8, 8), **kwargs)


def test_patch_size_must_match_spatial_axes(labeled_store: Path) -> None:
    with pytest.raises(ValueError, match=r"has 3 spatial axes .* has 2"):
        PatchDataset(labeled_store, (8, 8))


@pytest.mark.parametrize("bad", [-1, 10_000, 1.5, "0", True, (-1, 0), (0, 99_999)])
def test_bad_index_raises_index_error(labeled_store: Path, bad) -> None:
    ds = PatchDataset(labeled_store, (4, 4, 4))
    with pytest.raises(IndexError):
        ds[bad]


def test_whole_items_when_patch_size_is_none(labeled_store: Path, sources) -> None:
    ds = PatchDataset(labeled_store, None)
    for i in range(len(ds)):
        s = ds[i]
        np.testing.assert_array_equal(s["image"].numpy(), sources[s["item_id"]].astype(s["image"].numpy().dtype))
    batch = collate([ds[0], ds[1]])  # different shapes: padded, with a mask
    assert batch["image_mask"].shape == batch["image"].shape and batch["image_mask"][0].sum() == ds[0]["image"].numel()


@pytest.mark.parametrize("backend", BACKENDS)
def test_zipped_store_reads_the_same_patches(labeled_store: Path, zipped_store: Path, backend: str) -> None:
    folder = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=2, label="cell_type")
    zipped = PatchDataset(zipped_store, (8, 8, 8), patches_per_item=2, label="cell_type",
                          read=ReadOptions(backend=backend))
    assert zipped.classes == folder.classes
    for i in range(len(folder)):
        a, b = folder[i], zipped[i]
        assert torch.equal(a["image"], b["image"]) and a["label"] == b["label"]


def test_init_reads_only_the_index(labeled_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zarr

    from labzarr.store import StoreReader

    def boom(*a, **k):
        raise AssertionError("array opened in __init__")

    monkeypatch.setattr(zarr, "open_array", boom)
    monkeypatch.setattr(StoreReader, "array", boom)
    ds = PatchDataset(labeled_store, (4, 4, 4), label="cell_type", mode="grid")
    assert len(ds.items) == len(open_store(labeled_store).items)


def test_pickling_drops_open_handles(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), read=ReadOptions(max_open=2))
    first = [ds[i]["image"] for i in range(len(ds))]  # more arrays than max_open: the LRU closes some
    assert ds._reader.open_arrays() == 2
    blob = pickle.dumps(ds)
    assert len(blob) < 20_000
    again = pickle.loads(blob)
    assert again._reader.open_arrays() == 0
    assert all(torch.equal(a, again[i]["image"]) for i, a in enumerate(first))


def test_transform_sees_and_replaces_the_sample(labeled_store: Path) -> None:
    def to_float(s: dict) -> dict:
        return {**s, "image": s["image"].float() / 1000}

    ds = PatchDataset(labeled_store, (8, 8, 8), transform=to_float)
    raw = PatchDataset(labeled_store, (8, 8, 8))
    assert ds[0]["image"].dtype == torch.float32
    torch.testing.assert_close(ds[0]["image"], raw[0]["image"].float() / 1000)
