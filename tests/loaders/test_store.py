from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr import open_store
from labzarr.loaders import class_names

from .conftest import CELL_TYPES


@pytest.mark.parametrize("which", ["folder", "zip"])
def test_view_lists_items_labels_attrs_and_reads_arrays(labeled_store: Path, zipped_store: Path, sources,
                                                        which: str) -> None:
    view = open_store(labeled_store if which == "folder" else zipped_store)
    assert [i.item_id for i in view.items] == sorted(CELL_TYPES)  # manifest order
    assert view.labels("cell_type") == [CELL_TYPES[i.item_id] for i in view.items]
    assert view.label_names() == ("cell_type", "side")
    assert view.classes("cell_type") == ("astrocyte", "microglia", "neuron", "oligodendrocyte")
    assert view.attrs["delivery"] == "demo" and "items" not in view.attrs
    for item in view.items:
        np.testing.assert_array_equal(view.read(item), sources[item.item_id].astype(item.dtype))
        assert view.array(item).shape == item.shape
    assert view.read("case7").shape == view.item("case7").shape
    assert len(pickle.dumps(view)) < 20_000  # a view holds no open handles


def test_unknown_item_names_known_ones(labeled_store: Path) -> None:
    with pytest.raises(KeyError, match="no ok item 'case99'; items are e.g. case1"):
        open_store(labeled_store).item("case99")


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such store"):
        open_store(tmp_path / "missing.zarr")
    zarr.open_group(zarr.storage.LocalStore(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(ValueError, match="not a labzarr store"):
        open_store(tmp_path / "plain.zarr")
    (tmp_path / "notes.zarr").write_text("not a zip")
    with pytest.raises(ValueError, match="a file but not a zip"):
        open_store(tmp_path / "notes.zarr")


@pytest.mark.parametrize(("values", "order"), [
    (["b", "a", "b", "10"], ("10", "a", "b")),
    (["10", "2", "1", "2"], ("1", "2", "10")),  # all numbers: numeric order
    (["0.5", "-1", "3"], ("-1", "0.5", "3")),
])
def test_class_names_are_stable(values: list[str], order: tuple[str, ...]) -> None:
    assert class_names(values) == order
    assert class_names(reversed(values)) == order
