"""Viewer-ready stores: every volume and sample group is an OME-Zarr (NGFF 0.5) image that the spec's own JSON
schemas accept and ome-zarr-py opens at the stored grid's scale and translation, masks are NGFF labels, and the
`[store] pyramid` levels equal an independent reference downsampling (labels by mode, never a new class)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import zarr
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from skimage.measure import block_reduce

from labzarr.convert import convert_delivery
from labzarr.convert.demo import NIBABEL_DATA
from labzarr.loaders import PatchDataset, open_store

from ..conftest import Delivery, seg_delivery
from ..segmentation import anatomy, classes_of, save

SCHEMAS = Path(__file__).parent.parent / "data" / "ngff-0.5"
LEVELS = 2


def _validator(name: str) -> Draft202012Validator:
    resources = [(s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
                 for s in (json.loads(p.read_text()) for p in sorted(SCHEMAS.glob("*.schema")))]
    registry: Registry = Registry().with_resources(resources)
    schema = json.loads((SCHEMAS / f"{name}.schema").read_text())
    return Draft202012Validator(schema, registry=registry)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> dict[str, Delivery]:
    """A delivery of loose volumes (nibabel's real files, odd and 4D shapes) and one of image + mask samples (one
    with a third role), both converted with a 2-level pyramid."""
    root = tmp_path_factory.mktemp("ngff")
    tail = f"[store]\nchunks = [8, 8, 8]\nshards = false\npyramid = {LEVELS}\n"
    vols = seg_delivery(root, "[items]\nid_pattern = '(?P<id>vol\\d+)'\n" + tail, name="vols")
    for name, to in (("anatomical.nii", "vol1.nii"), ("example4d.nii.gz", "vol2.nii.gz"),
                     ("example_nifti2.nii.gz", "vol3.nii.gz")):
        (vols.raw / to).write_bytes((NIBABEL_DATA / name).read_bytes())
    rng = np.random.default_rng(7)
    odd = rng.integers(-1000, 3000, (19, 1, 11), dtype=np.int16)  # an axis of one voxel is never halved
    save(vols.raw / "vol4.nii.gz", odd, np.diag([0.7, 1.5, 2.0, 1.0]) @ np.array(
        [[1, 0, 0, -30], [0, 1, 0, 12], [0, 0, 1, 5], [0, 0, 0, 1.0]]))
    seg = seg_delivery(root, "[items]\nid_pattern = '(?P<id>case_\\d+)'\n"
                             'roles = { image = "*_img*", mask = "*_seg*", t1 = "*_t1*" }\n'
                             'required_roles = ["image", "mask"]\n[masks]\nclasses = [0, 1, 2]\n' + tail, name="seg")
    data, affine = anatomy()
    mask = classes_of(data)
    for n in (1, 2):
        save(seg.raw / f"case_00{n}_img.nii.gz", data + n, affine)
        save(seg.raw / f"case_00{n}_seg.nii.gz", mask, affine)
    save(seg.raw / "case_002_t1.nii.gz", (data * 2).astype(np.float32), affine)
    for d in (vols, seg):
        result = convert_delivery(d.spec, scheduler=scheduler)
        rows = [line.split(",")[2] for line in result.manifest.read_text().splitlines()[1:]]
        assert rows and set(rows) == {"ok"}, result.manifest.read_text()
    return {"vols": vols, "seg": seg}


def _groups(store: Path) -> dict[str, dict[str, object]]:
    """Every group below volumes/ with `ome` attributes, by its path in the store."""
    out = {}
    for meta in sorted((store / "volumes").rglob("zarr.json")):
        doc = json.loads(meta.read_bytes())
        if doc["node_type"] == "group" and "ome" in doc.get("attributes", {}):
            out[meta.parent.relative_to(store).as_posix()] = doc["attributes"]
    return out


def test_every_image_and_label_passes_the_ngff_05_schemas(stores: dict[str, Delivery]) -> None:
    image, label = _validator("strict_image"), _validator("strict_label")
    seen = {"image": 0, "label": 0, "labels": 0}
    for d in stores.values():
        index = open_store(d.store).index
        for path, attrs in _groups(d.store).items():
            ome = attrs["ome"]
            assert isinstance(ome, dict) and ome["version"] == "0.5", path
            if "labels" in ome:
                assert ome["labels"] == ["mask"] and path.endswith("/labels"), path
                seen["labels"] += 1
                continue
            kind = "label" if "image-label" in ome else "image"
            errors = [e.message for e in (label if kind == "label" else image).iter_errors(attrs)]
            assert not errors, (path, errors)
            seen[kind] += 1
            (ms,) = ome["multiscales"]
            level0 = zarr.open_array(d.store / path / "0", mode="r")
            assert [ds["path"] for ds in ms["datasets"]] == [str(k) for k in range(LEVELS + 1)]
            assert [a["name"] for a in ms["axes"]] == list(level0.attrs["axes"])
            assert [a.get("unit") for a in ms["axes"]] == [None, "millimeter", "millimeter", "millimeter"]
        arrays = {i.array for i in index.items}
        assert all(a.endswith("/0") for a in arrays)
    # 4 volumes; 2 sample images, 1 t1 role and 2 masks (label images, each named by its labels/ group)
    assert seen == {"image": 7, "label": 2, "labels": 2}


def _canonical(path: Path) -> nib.Nifti1Image:
    return nib.as_closest_canonical(nib.load(path))


def test_ome_zarr_py_opens_every_level_at_the_canonical_scale_and_translation(stores: dict[str, Delivery]) -> None:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Multiscales, Reader

    d = stores["vols"]
    for name, item in (("vol1.nii", "vol1"), ("vol2.nii.gz", "vol2"), ("vol4.nii.gz", "vol4")):
        img = _canonical(d.raw / name)
        nodes = list(Reader(parse_url(str(d.store / "volumes" / item)))())
        node = nodes[0]
        assert node.load(Multiscales) is not None
        voxels = np.asarray(img.dataobj)
        spatial = voxels.shape[:3]
        spacing = np.asarray(img.header.get_zooms()[:3], dtype=float)
        origin = img.affine[:3, 3]
        transforms = node.metadata["coordinateTransformations"]
        assert len(node.data) == LEVELS + 1 == len(transforms)
        np.testing.assert_array_equal(np.asarray(node.data[0])[0] if voxels.ndim == 3 else
                                      np.moveaxis(np.asarray(node.data[0]), 0, -1), voxels)
        for level, (data, (scale, translation)) in enumerate(zip(node.data, transforms)):
            factors = np.array([2 ** level if n > 1 else 1 for n in spatial])
            factors = np.minimum(factors, [2 ** sum(1 for k in range(level) if -(-n // 2 ** k) > 1)
                                           for n in spatial])
            assert data.shape[1:] == tuple(-(-n // f) for n, f in zip(spatial, factors)), (item, level)
            np.testing.assert_allclose(scale["scale"], [1.0, *(spacing * factors)], rtol=1e-6)
            # a level's first voxel sits at the centre of the level-0 block it covers
            np.testing.assert_allclose(translation["translation"],
                                       [0.0, *(origin + (factors - 1) * spacing / 2)], atol=1e-5)


def test_the_mask_opens_as_ngff_labels_with_its_class_colours(stores: dict[str, Delivery]) -> None:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Label, Reader

    d = stores["seg"]
    nodes = list(Reader(parse_url(str(d.store / "volumes" / "case002" / "labels" / "mask")))())
    label = next(n for n in nodes if n.load(Label) is not None)
    colours = label.metadata["color"]
    assert set(colours) == {0, 1, 2} and colours[0][3] == 0 and all(colours[k][3] == 1 for k in (1, 2))
    assert len({tuple(colours[k]) for k in (1, 2)}) == 2
    stored = zarr.open_array(d.store / "volumes" / "case002" / "labels" / "mask" / "0", mode="r")
    np.testing.assert_array_equal(np.asarray(label.data[0]), stored[...])
    expected = np.asarray(_canonical(d.raw / "case_002_seg.nii.gz").dataobj)
    np.testing.assert_array_equal(stored[0], expected)


def _mean_down(x: np.ndarray) -> np.ndarray:
    """skimage's block sum over 2x2x2 blocks divided by each block's voxel count (edge blocks are partial)."""
    block = (1, *(2 if n > 1 else 1 for n in x.shape[1:]))
    total = block_reduce(x.astype(np.float64), block, np.sum, cval=0)
    count = block_reduce(np.ones(x.shape), block, np.sum, cval=0)
    mean = total / count
    return np.rint(mean).astype(x.dtype) if np.issubdtype(x.dtype, np.integer) else mean.astype(x.dtype)


def _mode_down(x: np.ndarray) -> np.ndarray:
    """Each 2x2x2 block's most frequent value, the smallest on a tie, block by block."""
    steps = [2 if n > 1 else 1 for n in x.shape[1:]]
    out = np.zeros((x.shape[0], *(-(-n // s) for n, s in zip(x.shape[1:], steps))), x.dtype)
    for c in range(x.shape[0]):
        for idx in itertools.product(*(range(n) for n in out.shape[1:])):
            block = x[(c, *(slice(i * s, i * s + s) for i, s in zip(idx, steps)))]
            values, counts = np.unique(block, return_counts=True)
            out[(c, *idx)] = values[np.argmax(counts)]  # np.unique sorts, argmax takes the first maximum
    return out


@pytest.mark.parametrize(("which", "path", "method"), [
    ("vols", "volumes/vol1", "mean"), ("vols", "volumes/vol2", "mean"),
    ("vols", "volumes/vol3", "mean"), ("vols", "volumes/vol4", "mean"),
    ("seg", "volumes/case001", "mean"), ("seg", "volumes/case002/roles/t1", "mean"),
    ("seg", "volumes/case002/labels/mask", "mode")])
def test_pyramid_levels_equal_a_reference_downsampling(stores: dict[str, Delivery], which: str, path: str,
                                                       method: str) -> None:
    group = stores[which].store / path
    level = zarr.open_array(group / "0", mode="r")[...]
    classes = set(np.unique(level).tolist())
    for k in range(1, LEVELS + 1):
        got = zarr.open_array(group / str(k), mode="r")
        level = _mode_down(level) if method == "mode" else _mean_down(level)
        assert got.dtype == level.dtype
        np.testing.assert_array_equal(got[...], level, err_msg=f"{path} level {k}")
        if method == "mode":
            assert set(np.unique(got[...]).tolist()) <= classes  # never a class the mask does not hold
        assert got.attrs["complete"] and got.attrs["content_sha256"]


def test_training_reads_level_0_whatever_the_pyramid(stores: dict[str, Delivery]) -> None:
    d = stores["seg"]
    ds = PatchDataset(d.store, patch_size=(8, 8, 8), seed=0)
    sample = ds[0]
    assert tuple(sample["image"].shape[-3:]) == (8, 8, 8)
    view = open_store(d.store)
    item = next(i for i in view.index.items if i.item_id == "case001")
    assert item.array == "volumes/case001/0" and tuple(item.shape[1:]) == (33, 41, 25)
