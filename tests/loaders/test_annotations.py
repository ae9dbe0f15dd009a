"""Patches around workbook annotations, their points and boxes in patch coordinates, and the padded collate.

The store is converted from NIfTI volumes whose voxels mark each annotation's centre with a value of its own
(and an item with none), so a patch "contains" a point when the image says so, not only the numbers.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import openpyxl
import pytest
import torch
from torch.utils.data import DataLoader

from labzarr.convert import execute, load_spec
from labzarr.loaders import Collate, PatchDataset, open_store

# Source voxel (i, j, k) and box size (voxels) of each annotation; case3 has none.
ANNOTATIONS = {
    "case1": [((10, 12, 8), (4, 6, 2)), ((30, 5, 20), (2, 2, 2)), ((33, 36, 3), (8, 3, 5))],
    "case2": [((20, 20, 12), (5, 5, 5))],
    "case3": [],
}
SHAPE = (40, 40, 24)
PATCH = (16, 16, 8)
# case2 is stored flipped on x (an LAS file): its annotations are given in the file's voxels, as stored.
AFFINES = {"case1": np.diag([1.5, 1.5, 2.0, 1.0]), "case2": np.diag([-1.5, 1.5, 2.0, 1.0]),
           "case3": np.diag([1.5, 1.5, 2.0, 1.0])}


def marker(item: str, n: int) -> int:
    return 1000 * (int(item[-1])) + n + 1


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, dask_client: object) -> Path:
    root = tmp_path_factory.mktemp("lesions")
    raw = root / "raw"
    raw.mkdir()
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["Case", "i", "j", "k", "w", "h", "d"])
    for item, found in ANNOTATIONS.items():
        data = np.zeros(SHAPE, np.int16)
        for n, (ijk, size) in enumerate(found):
            data[ijk] = marker(item, n)
            ws.append([item, *ijk, *size])
        if not found:
            ws.append([item])
        nib.save(nib.Nifti1Image(data, AFFINES[item]), raw / f"{item}.nii.gz")
    wb.save(raw / "lesions.xlsx")
    spec = root / "delivery.toml"
    spec.write_text(
        f'[delivery]\nname = "lesions"\nraw = "{raw}"\nstore = "{root / "lesions.zarr"}"\n\n'
        '[labels]\nworkbook = "lesions.xlsx"\nid_column = "Case"\n'
        'annotations = { center = ["i", "j", "k"], size = ["w", "h", "d"], space = "voxel" }\n')
    result = execute(load_spec(spec, root=root), dask_client)
    assert [r.status for r in result.rows if r.item_id] == ["ok"] * 3
    return result.spec.delivery.store.local_path()


def test_points_in_voxel_space_follow_the_reorientation(store: Path) -> None:
    items = {i.item_id: i for i in open_store(store).items}
    assert [a.center for a in items["case1"].annotations] == [tuple(map(float, ijk)) for ijk, _ in ANNOTATIONS["case1"]]
    (a,) = items["case2"].annotations  # i runs toward L in the file: flipped on canonical x
    assert a.center == (SHAPE[0] - 1 - 20.0, 20.0, 12.0) and a.size == (5.0, 5.0, 5.0)
    assert items["case3"].annotations == ()


def test_foreground_patches_contain_the_point_they_centre_on(store: Path) -> None:
    ds = PatchDataset(store, PATCH, patches_per_item=20, foreground=1.0, seed=3)
    items = {i.item_id: i for i in ds.items}
    seen = set()
    for i in range(len(ds)):
        s = ds[i]
        item = items[s["item_id"]]
        origin = np.array(s["origin"])
        points, boxes = s["points"].numpy(), s["boxes"].numpy()
        assert points.shape[1:] == (3,) and boxes.shape == (len(points), 6)
        if not item.annotations:  # no annotation: a uniform patch, nothing in it
            assert len(points) == 0
            continue
        assert len(points) >= 1  # the one it was centred on, at least
        image = s["image"][0].numpy()
        for p, box in zip(points, boxes):
            assert np.all(p >= 0) and np.all(p < np.array(PATCH))
            whole = p + origin
            (n, a), = [(n, a) for n, a in enumerate(item.annotations) if np.allclose(a.center, whole)]
            seen.add((item.item_id, n))
            # The patch's voxel there is the annotation's own marker: the point is in the patch, truly.
            assert image[tuple(int(v) for v in p)] == marker(item.item_id, n)
            np.testing.assert_allclose(box, np.clip(np.array(a.box).reshape(2, 3) - origin, -0.5,
                                                    np.array(PATCH) - 0.5).reshape(6))
    assert seen == {(k, n) for k, v in ANNOTATIONS.items() for n in range(len(v))}  # every annotation drawn


def test_uniform_patches_list_exactly_the_annotations_inside(store: Path) -> None:
    ds = PatchDataset(store, PATCH, patches_per_item=30, seed=1)
    items = {i.item_id: i for i in ds.items}
    found = 0
    for i in range(len(ds)):
        s = ds[i]
        origin = np.array(s["origin"])
        inside = [a.center for a in items[s["item_id"]].annotations
                  if np.all(np.array(a.center) - origin >= -0.5)
                  and np.all(np.array(a.center) - origin < np.array(PATCH) - 0.5)]
        np.testing.assert_allclose(s["points"].numpy(), np.array(inside, np.float32).reshape(-1, 3) - origin)
        found += len(inside)
    assert found  # some uniform patch holds one


def test_collate_pads_boxes_to_the_batch_most_with_a_row_mask(store: Path) -> None:
    ds = PatchDataset(store, PATCH, patches_per_item=4, foreground=1.0, seed=0)
    loader = DataLoader(ds, batch_size=6, num_workers=2, collate_fn=Collate(), shuffle=False)
    batches = list(loader)
    assert sum(len(b["item_id"]) for b in batches) == len(ds)
    k = 0
    for batch in batches:
        counts = [len(ds[k + n]["boxes"]) for n in range(len(batch["item_id"]))]
        most = max(counts)
        assert batch["boxes"].shape == (len(counts), most, 6) and batch["points"].shape == (len(counts), most, 3)
        assert batch["boxes_mask"].shape == (len(counts), most) and batch["boxes_mask"].dtype == torch.bool
        assert batch["boxes_mask"].sum(dim=1).tolist() == counts
        for n, c in enumerate(counts):
            torch.testing.assert_close(batch["boxes"][n, :c], ds[k + n]["boxes"])
            assert torch.all(batch["boxes"][n, c:] == 0)
        k += len(counts)


def test_collate_of_batches_without_any_box_keeps_its_keys() -> None:
    empty = {"image": torch.zeros(1, 2, 2), "boxes": torch.zeros(0, 6), "points": torch.zeros(0, 3)}
    batch = Collate()([empty, empty])
    assert batch["boxes"].shape == (2, 0, 6) and batch["boxes_mask"].shape == (2, 0)
    assert set(batch) == {"image", "boxes", "boxes_mask", "points", "points_mask"}
    two = {"image": torch.zeros(1, 2, 2), "boxes": torch.ones(2, 6), "points": torch.ones(2, 3)}
    batch = Collate()([empty, two])
    assert batch["boxes_mask"].tolist() == [[False, False], [True, True]]
    with pytest.raises(ValueError, match="differ beyond their first axis"):
        Collate()([two, {**two, "boxes": torch.ones(2, 4)}])


def test_grid_tiles_together_hold_every_annotation(store: Path) -> None:
    ds = PatchDataset(store, PATCH, mode="grid")
    found: dict[str, set[tuple[float, ...]]] = {}
    for i in range(len(ds)):
        s = ds[i]
        for p in s["points"].numpy():
            found.setdefault(s["item_id"], set()).add(tuple(float(v) for v in p + np.array(s["origin"])))
    assert found == {i.item_id: {a.center for a in i.annotations} for i in ds.items if i.annotations}
