from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset
from labzarr.loaders import Collate, MixedBatchError, collate

MIXED = Collate(channels="pad", dtypes="promote")


def sample(shape: tuple[int, ...], fill: int, item_id: str, dtype: torch.dtype = torch.int16) -> dict:
    return {"image": torch.full(shape, fill, dtype=dtype), "label": fill, "item_id": item_id,
            "origin": (fill, -fill, 0), "valid": ((0, shape[1]), (0, shape[2]), (1, 3)), "note": None}


def test_same_shapes_stack_and_mixed_types_batch_by_kind() -> None:
    b = collate([sample((1, 4, 4, 4), 1, "a"), sample((1, 4, 4, 4), 2, "b")])
    assert b["image"].shape == (2, 1, 4, 4, 4) and b["image"].dtype == torch.int16
    assert b["label"].tolist() == [1, 2]
    assert b["item_id"] == ["a", "b"] and b["note"] == [None, None]
    assert b["origin"].tolist() == [[1, -1, 0], [2, -2, 0]]
    assert b["valid"].shape == (2, 3, 2)
    assert "image_mask" not in b


def test_small_tensors_of_one_dtype_share_one_buffer() -> None:
    """`origin`, `valid` and the labels (int64) are views of one buffer: from a worker, one shared-memory trip."""
    b = collate([sample((1, 4, 4, 4), 1, "a"), sample((1, 4, 4, 4), 2, "b")])
    ints = [b["label"], b["origin"], b["valid"]]
    assert {t.dtype for t in ints} == {torch.int64}
    assert len({t.untyped_storage().data_ptr() for t in ints}) == 1
    assert b["image"].untyped_storage().data_ptr() != b["label"].untyped_storage().data_ptr()
    assert b["valid"].tolist() == [[[0, 4], [0, 4], [1, 3]]] * 2 and b["label"].tolist() == [1, 2]
    floats = collate([{"w": 0.5, "origin": (1, 2)}, {"w": 1.5, "origin": (3, 4)}])
    assert floats["w"].dtype == torch.float32 and floats["w"].tolist() == [0.5, 1.5]  # as torch.tensor types it
    assert floats["origin"].tolist() == [[1, 2], [3, 4]]


def test_variable_spatial_sizes_are_padded_with_a_mask_by_default() -> None:
    small, big = sample((1, 2, 3, 4), 5, "a"), sample((1, 4, 3, 1), 6, "b")
    b = Collate(pad_value=-1)([small, big])
    assert b["image"].shape == (2, 1, 4, 3, 4) and b["image"].dtype == torch.int16
    assert b["image_mask"][0].sum() == small["image"].numel() and b["image_mask"][1].sum() == big["image"].numel()
    assert (b["image"][0][b["image_mask"][0]] == 5).all() and (b["image"][0][~b["image_mask"][0]] == -1).all()


def test_mixed_channels_and_dtypes_are_padded_and_promoted_when_asked() -> None:
    small, big = sample((1, 2, 3, 4), 5, "a"), sample((2, 4, 3, 1), 6, "b", dtype=torch.float32)
    b = Collate(pad_value=-1, channels="pad", dtypes="promote")([small, big])
    assert b["image"].shape == (2, 2, 4, 3, 4) and b["image"].dtype == torch.float32  # promoted
    assert b["image_mask"].dtype == torch.bool
    assert b["image_mask"][0].sum() == small["image"].numel() and b["image_mask"][1].sum() == big["image"].numel()
    assert (b["image"][0][b["image_mask"][0]] == 5).all() and (b["image"][0][~b["image_mask"][0]] == -1).all()
    assert (b["image"][1][b["image_mask"][1]] == 6).all()


@pytest.mark.parametrize(("shapes", "dtypes", "match"), [
    pytest.param([(1, 4, 4), (20, 4, 4), (2, 4, 4), (1, 4, 4)], [torch.int16] * 4,
                 r"under 'image', channel counts: 1 channel \(a, d\), 2 channels \(c\), 20 channels \(b\)\. .*"
                 r'Collate\(channels="pad"\)', id="channels"),
    pytest.param([(1, 4, 4), (1, 2, 4)], [torch.int16, torch.float32],
                 r"under 'image', dtypes: int16 \(a\), float32 \(b\)\. .*Collate\(dtypes=\"promote\"\).*"
                 "casts all to float32", id="dtypes"),
    pytest.param([(1, 4, 4), (2, 4, 4)], [torch.int16, torch.float32],
                 r"channel counts: .*; and dtypes: .*Collate\(channels=\"pad\", dtypes=\"promote\"\)", id="both"),
])
def test_mixed_channels_or_dtypes_are_refused_naming_the_items(shapes, dtypes, match: str) -> None:
    batch = [sample(shape, 1, "abcd"[n], dtype=dtype) for n, (shape, dtype) in enumerate(zip(shapes, dtypes))]
    with pytest.raises(MixedBatchError, match=match):
        collate(batch)
    with pytest.raises(MixedBatchError, match=match.split("Collate")[0]):
        Collate(variable="list")(batch)  # a list of mixed tensors would reach the model just the same


def test_samples_without_item_ids_are_named_by_position() -> None:
    with pytest.raises(MixedBatchError, match=r"1 channel \(sample 0\), 3 channels \(sample 1\)"):
        collate([{"image": torch.zeros(1, 2)}, {"image": torch.zeros(3, 2)}])


def test_variable_sizes_kept_as_a_list_by_option() -> None:
    small, big = sample((1, 2, 3, 4), 5, "a"), sample((1, 4, 3, 1), 6, "b")
    b = Collate(variable="list")([small, big])
    assert isinstance(b["image"], list) and [t.shape for t in b["image"]] == [(1, 2, 3, 4), (1, 4, 3, 1)]
    assert "image_mask" not in b


def test_collate_is_picklable_for_spawned_workers() -> None:
    c = pickle.loads(pickle.dumps(Collate(variable="list", pad_value=3)))
    assert c == Collate(variable="list", pad_value=3)


@pytest.mark.parametrize(("batch", "match"), [
    pytest.param([], "empty batch", id="empty"),
    pytest.param([{"image": torch.zeros(1)}, {"img": torch.zeros(1)}], r"sample 1 has keys \['img'\]", id="keys"),
    pytest.param([{"image": torch.zeros(1, 2)}, {"image": torch.zeros(3)}], "different ranks", id="ranks"),
])
def test_bad_batches_raise_value_error(batch, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        collate(batch)


@pytest.mark.parametrize(("kwargs", "match"), [
    pytest.param({"variable": "crop"}, "variable = 'crop'; expected 'pad' or 'list'", id="variable"),
    pytest.param({"channels": "crop"}, "channels = 'crop'; expected 'refuse' or 'pad'", id="channels"),
    pytest.param({"dtypes": "cast"}, "dtypes = 'cast'; expected 'refuse' or 'promote'", id="dtypes"),
])
def test_bad_option_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Collate(**kwargs)


# The demo store (tests/loaders/conftest.py): case1 1 x int16, case2 20 x float32, case3 2 x int16,
# case7..case10 1 x int16, case21 1 x float32 (channels x dtype).
def keys(ds: PatchDataset, ids: list[str]) -> list[int]:
    return [ds.items.index(next(item for item in ds.items if item.item_id == item_id)) for item_id in ids]


def one_batch(ds: PatchDataset, ids: list[str], collate_fn: Collate) -> dict:
    """The items `ids` (one sample each) as one batch, collated in one of two DataLoader workers."""
    loader = DataLoader(ds, batch_size=len(ids), num_workers=2, sampler=keys(ds, ids), collate_fn=collate_fn,
                        multiprocessing_context="fork")
    (batch,) = loader
    return batch


@pytest.mark.timeout(120)
def test_a_worker_refuses_a_batch_of_mixed_items_naming_them(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), seed=1)
    with pytest.raises(MixedBatchError) as raised:  # torch re-raises it by its type, the worker's text inside
        one_batch(ds, ["case1", "case3", "case2", "case7"], collate)
    message = str(raised.value)
    assert "DataLoader worker" in message
    assert ("under 'image', channel counts: 1 channel (case1, case7), 2 channels (case3), 20 channels (case2); "
            "and dtypes: int16 (case1, case3, case7), float32 (case2)") in message
    assert 'collate_fn=Collate(channels="pad", dtypes="promote")' in message


@pytest.mark.timeout(120)
def test_a_worker_pads_and_promotes_mixed_items_when_asked(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), seed=1)
    ids = ["case1", "case3", "case2", "case7"]
    b = one_batch(ds, ids, MIXED)
    assert b["item_id"] == ids
    assert b["image"].shape == (4, 20, 8, 8, 8) and b["image"].dtype == torch.float32
    for n, (k, c) in enumerate(zip(keys(ds, ids), [1, 2, 20, 1])):
        assert b["image_mask"][n].any(dim=(1, 2, 3)).sum() == c
        assert torch.equal(b["image"][n, :c], ds[k]["image"].to(torch.float32)) and not b["image"][n, c:].any()


@pytest.mark.timeout(120)
def test_a_worker_batches_items_of_one_kind_unchanged(labeled_store: Path) -> None:
    ids = ["case1", "case7", "case8", "case9"]  # 1 channel of int16 each
    ds = PatchDataset(labeled_store, (8, 8, 8), seed=1)
    b = one_batch(ds, ids, collate)
    assert b["image"].shape == (4, 1, 8, 8, 8) and b["image"].dtype == torch.int16 and "image_mask" not in b
    assert all(torch.equal(b["image"][n], ds[k]["image"]) for n, k in enumerate(keys(ds, ids)))
    whole = PatchDataset(labeled_store, None)  # whole items: spatial sizes differ, padded with a mask as before
    b = one_batch(whole, ids, collate)
    assert b["image"].dtype == torch.int16 and b["image"].shape[:2] == (4, 1)
    assert [int(m.sum()) for m in b["image_mask"]] == [whole[k]["image"].numel() for k in keys(whole, ids)]
