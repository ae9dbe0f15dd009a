from __future__ import annotations

import pickle

import pytest
import torch

from labzarr.loaders import Collate, collate


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


def test_variable_sizes_are_padded_with_a_mask() -> None:
    small, big = sample((1, 2, 3, 4), 5, "a"), sample((2, 4, 3, 1), 6, "b", dtype=torch.float32)
    b = Collate(pad_value=-1)([small, big])
    assert b["image"].shape == (2, 2, 4, 3, 4) and b["image"].dtype == torch.float32  # promoted
    assert b["image_mask"].dtype == torch.bool
    assert b["image_mask"][0].sum() == small["image"].numel() and b["image_mask"][1].sum() == big["image"].numel()
    assert (b["image"][0][b["image_mask"][0]] == 5).all() and (b["image"][0][~b["image_mask"][0]] == -1).all()
    assert (b["image"][1][b["image_mask"][1]] == 6).all()


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


def test_bad_option_raises() -> None:
    with pytest.raises(ValueError, match="variable = 'crop'"):
        Collate(variable="crop")  # type: ignore[arg-type]
