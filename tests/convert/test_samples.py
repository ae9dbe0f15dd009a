"""Segmentation deliveries: samples planned from roles, geometry checks, masks stored beside images, class index."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import zarr
from PIL import Image

from labzarr.convert import UsageError, convert_delivery, execute, load_spec, read_manifest
from labzarr.convert.discover import discover, walk
from labzarr.convert.plan.build import plan
from labzarr.convert.probe import probe_files
from labzarr.convert.qc.thumbs import thumbnail
from labzarr.loaders import PatchDataset, open_store

from ..conftest import nib_load, seg_delivery
from ..dicom_data import canonical as dicom_canonical
from ..dicom_data import ct_series
from ..segmentation import (
    DICOM_SEG_ROLES,
    SEG_MASKS,
    SEG_ROLES,
    anatomy,
    classes_of,
    save,
    write_2d_seg_delivery,
    write_dicom_seg_delivery,
)


def canonical(path: Path) -> np.ndarray:
    img = nib.as_closest_canonical(nib_load(path))
    return np.asanyarray(img.dataobj)[np.newaxis]


def _members(row: dict[str, str]) -> set[str]:
    out = {row["source"]}
    for key, value in row.items():
        if key.startswith("role.") and not key.endswith(".sha256") and value:
            out |= set(value.split("; "))
    return out


def test_every_sample_gets_its_documented_outcome(converted_seg) -> None:
    d, result, expected = converted_seg
    rows = read_manifest(result.manifest)
    by_item = {r["item_id"]: r for r in rows if r["source"].endswith("_img.nii.gz") or r["status"] == "rejected"}
    by_source = {r["source"]: r for r in rows}
    for key, (status, reason) in expected.items():
        row = by_source[key] if "." in key else by_item[key.replace("_", "")]
        assert (row["status"], row["reason"]) == (status, reason), (key, row["detail"])
        if status == "rejected":
            assert row["detail"], key
    # every file under raw is the source or a role member of exactly one row
    on_disk = sorted(p.relative_to(d.raw).as_posix() for p in d.raw.rglob("*") if p.is_file())
    claimed = sorted(f for r in rows for f in _members(r))
    assert claimed == on_disk
    assert sum(int(r["n_files"]) for r in rows) == len(on_disk) == result.summary["counts"]["files"]


@pytest.mark.parametrize(("item", "needle"), [
    pytest.param("case003", ["affine [(2, 0, 0, 32)", "vs image [(2, 0, 0, -32)", "64 mm", "tolerance 0.001 mm"],
                 id="flipped-axis-in-affine"),
    pytest.param("case004", ["spacing (2, 2, 2.5) mm vs image (2, 2, 2) mm"], id="spacing"),
    pytest.param("case009", ["shape (x,y,z) 33x41x24 vs image 33x41x25"], id="shape"),
    pytest.param("case005", ["no file for required role 'mask' ('*_seg*')", "has image: case_005_img.nii.gz"],
                 id="missing-mask"),
    pytest.param("case011", ["no file for required role 'image'"], id="missing-image"),
    pytest.param("case007", ["64 of 33,825 mask voxels are not integers", "first 0.5", 'policy = "reject"'],
                 id="float-mask-fractional"),
    pytest.param("case008", ["classes 7 (8 voxels) not in [masks] classes [0, 1, 2]"], id="unexpected-class"),
    pytest.param("case013", ["ambiguous: 2 files (case_013_seg.nii.gz, case_013_seg_v2.nii.gz)"], id="two-masks"),
    pytest.param("case010", ["mask case_010_seg.nii.gz: gzip stream ends"], id="truncated-mask"),
])
def test_rejection_details_name_both_values(converted_seg, item: str, needle: list[str]) -> None:
    _, result, _ = converted_seg
    row = next(r for r in read_manifest(result.manifest) if r["item_id"] == item and r["status"] == "rejected")
    for text in needle:
        assert text in row["detail"], row["detail"]


def test_mask_stored_beside_image_in_canonical_order(converted_seg) -> None:
    d, result, _ = converted_seg
    view = open_store(d.store)
    items = {i.item_id: i for i in view.items}
    assert sorted(items) == ["case001", "case002", "case006", "case012"]
    data, affine = anatomy()
    want_mask = canonical(save(d.raw.parent / "ref_seg.nii.gz", classes_of(data), affine))
    for item in items.values():
        group = item.array.rsplit("/", 1)[0]
        assert item.roles == {"image": f"{group}/0", "mask": f"{group}/labels/mask/0"}  # an NGFF image and its labels
        image, mask = view.array(item.roles["image"]), view.array(item.roles["mask"])
        assert mask.dtype == np.uint8 and image.shape == mask.shape and image.chunks == mask.chunks
        # the float mask (case006) and the mask stored flipped along x (case002) give the same canonical voxels
        np.testing.assert_array_equal(mask[...], want_mask)
        np.testing.assert_array_equal(image[...], canonical(d.raw / item.source))
        assert mask.attrs["orientation"] == image.attrs["orientation"] == "RAS"
        np.testing.assert_allclose(mask.attrs["affine"], image.attrs["affine"])
        root = zarr.open_group(d.store, mode="r")
        assert root[group].attrs["complete"] and root[group].attrs["item_id"] == item.item_id


def test_class_counts_and_locations(converted_seg) -> None:
    d, result, _ = converted_seg
    view = open_store(d.store)
    for item in view.items:
        mask = view.array(item.roles["mask"])[0]
        values, counts = np.unique(mask, return_counts=True)
        assert {v: c.voxels for v, c in item.classes.items()} == dict(zip(values.tolist(), counts.tolist()))
        locations = view.array(item.locations)[...]
        for value, info in item.classes.items():
            block = locations[info.start:info.stop]
            assert len(block) == min(info.voxels, 10_000)
            assert len({tuple(p) for p in block.tolist()}) == len(block)  # without replacement
            assert (mask[block[:, 0], block[:, 1], block[:, 2]] == value).all()
    totals = result.summary["classes"]
    assert totals == {str(v): {"voxels": int(sum(i.classes[v].voxels for i in view.items)), "samples": 4}
                      for v in (0, 1, 2)}
    assert json.loads(result.summary_path.read_text())["classes"] == totals
    rows = {r["item_id"]: r for r in read_manifest(result.manifest) if r["status"] == "ok"}
    first = view.items[0]
    assert rows[first.item_id]["classes"] == " ".join(f"{v}:{c.voxels}" for v, c in sorted(first.classes.items()))


def test_locations_are_capped_and_seeded(tmp_path: Path, scheduler: str) -> None:
    d = seg_delivery(tmp_path, SEG_ROLES + "\n[masks]\nlocations = 40\n")
    data, affine = anatomy()
    save(d.raw / "case_001_img.nii.gz", data, affine)
    save(d.raw / "case_001_seg.nii.gz", classes_of(data), affine)
    convert_delivery(d.spec, scheduler=scheduler)
    first = open_store(d.store)
    loc_a = first.array(first.items[0].locations)[...]
    convert_delivery(d.spec, scheduler=scheduler)
    again = open_store(d.store)
    assert len(loc_a) == 3 * 40
    np.testing.assert_array_equal(again.array(again.items[0].locations)[...], loc_a)
    # uniform over the class: 40 of the ~11,000 class-1 voxels do not cluster in one corner
    info = first.items[0].classes[1]
    assert np.ptp(loc_a[info.start:info.stop], axis=0).min() > 10


def test_warn_policy_keeps_fractional_and_unexpected_masks(tmp_path: Path, scheduler: str) -> None:
    d = seg_delivery(tmp_path, SEG_ROLES + '\n[masks]\nclasses = [0, 1, 2]\npolicy = "warn"\n')
    data, affine = anatomy()
    mask = classes_of(data)
    soft = mask.astype(np.float32)
    soft[10:14, 10:14, 10:14] = 0.6
    save(d.raw / "case_007_img.nii.gz", data, affine)
    save(d.raw / "case_007_seg.nii.gz", soft, affine)
    extra = mask.astype(np.int16)
    extra[0:2, 0:2, 0:2] = 300  # does not fit uint8: the stored dtype grows to uint16
    save(d.raw / "case_008_img.nii.gz", data + 1, affine)
    save(d.raw / "case_008_seg.nii.gz", extra, affine)
    result = convert_delivery(d.spec, scheduler=scheduler)
    rows = {r["item_id"]: r for r in read_manifest(result.manifest)}
    assert rows["case007"]["status"] == rows["case008"]["status"] == "ok"
    assert "rounded to the nearest integer" in rows["case007"]["warnings"]
    assert "300 (8 voxels) not in [masks] classes" in rows["case008"]["warnings"]
    view = open_store(d.store)
    items = {i.item_id: i for i in view.items}
    assert view.array(items["case007"].roles["mask"]).dtype == np.uint8
    assert view.array(items["case008"].roles["mask"]).dtype == np.uint16
    assert items["case008"].classes[300].voxels == 8
    assert result.summary["classes"]["300"] == {"voxels": 8, "samples": 1}


def _plan(tmp_path: Path, tail: str, files: dict[str, bytes]):
    d = seg_delivery(tmp_path, tail)
    for rel, blob in files.items():
        (d.raw / rel).parent.mkdir(parents=True, exist_ok=True)
        (d.raw / rel).write_bytes(blob)
    spec = load_spec(d.spec, root=tmp_path)
    candidates = discover(walk(spec.delivery.raw), spec.items)
    probes = {p.rel: p for p in probe_files([(c.rel, str(c.entry.path)) for c in candidates])}
    return plan(spec, candidates, probes)


def test_plan_groups_by_item_and_role_with_globs_on_paths_and_regexes(tmp_path: Path) -> None:
    data, affine = anatomy()
    nii = save(tmp_path / "x.nii.gz", data, affine).read_bytes()
    tail = ("[items]\nid_pattern = '(?P<id>case_\\d+)'\n"
            'roles = { image = "images/**", mask = { regex = "^labels/.*_label\\\\.nii" } }\n'
            'required_roles = ["image"]\n')
    the_plan = _plan(tmp_path, tail, {"images/case_1.nii.gz": nii, "labels/case_1_label.nii.gz": nii + b"",
                                      "images/case_2.nii.gz": nii[:-1] + b"\0", "labels/case_1_other.nii.gz": b""})
    samples = {s.item_id: s for s in the_plan.samples}
    assert [(f.role, f.source) for f in samples["case1"].files] == [("image", "images/case_1.nii.gz"),
                                                                   ("mask", "labels/case_1_label.nii.gz")]
    assert [f.role for f in samples["case2"].files] == ["image"]  # mask not required here
    rows = {r.source: r for r in the_plan.rows}
    assert rows["labels/case_1_other.nii.gz"].status == "ignored"
    assert "matches no [items] roles pattern" in rows["labels/case_1_other.nii.gz"].detail
    assert samples["case1"].group == "volumes/case1"


def test_plan_rejects_a_sample_whose_member_is_bad_before_decoding(tmp_path: Path) -> None:
    data, affine = anatomy()
    nii = save(tmp_path / "x.nii.gz", data, affine).read_bytes()
    the_plan = _plan(tmp_path, SEG_ROLES, {"case_1_img.nii.gz": nii, "case_1_seg.nii.gz": b""})
    assert not the_plan.samples
    (row,) = the_plan.rows
    assert (row.status, row.reason.value, row.n_files) == ("rejected", "empty_file", 2)
    assert row.detail.startswith("mask case_1_seg.nii.gz: 0 B")
    assert [r.source for r in row.roles] == ["case_1_img.nii.gz", "case_1_seg.nii.gz"]


GOOD = '[delivery]\nname = "s"\nraw = "raw"\nstore = "s.zarr"\n'
BAD = [
    pytest.param('[items]\nroles = { mask = "*_seg*" }\n', r"roles need an 'image' role", id="no-image-role"),
    pytest.param('[items]\nroles = { image = 3 }\n', r"roles.image = 3: expected a glob", id="role-type"),
    pytest.param('[items]\nroles = { image = { regex = "(" } }\n', r"not a valid regular expression", id="role-regex"),
    pytest.param('[items]\nroles = { image = "*_img*" }\nrequired_roles = ["mask"]\n', r"'mask' is not a role",
                 id="required-unknown"),
    pytest.param('[items]\nroles = { image = "*_img*", mask = "*_seg*" }\nrequired_roles = ["mask"]\n',
                 r"must include 'image'", id="required-without-image"),
    pytest.param('[items]\nroles = { image = "*_img*" }\n[masks]\nclasses = [0, 1]\n',
                 r"\[masks\] is set but \[items\] roles has no 'mask' role", id="masks-without-mask-role"),
    pytest.param(SEG_ROLES + '[masks]\npolicy = "ignore"\n', r"policy = 'ignore': allowed", id="policy"),
    pytest.param(SEG_ROLES + '[masks]\nclasses = [0, 0.5]\n', r"classes = .*expected distinct integers",
                 id="classes"),
    pytest.param(SEG_ROLES + '[masks]\ntolerance = -1\n', r"tolerance = -1: must be >= 0", id="tolerance"),
    pytest.param('[masks]\nfractional_threshold = 0\n', r"fractional_threshold = 0: must be in \(0, 1\]",
                 id="fractional-threshold"),
    pytest.param('[masks]\nrois = { gtv = 3 }\n', r"rois.gtv = 3: expected a regex or a list", id="rois-type"),
    pytest.param('[masks]\nrois = { gtv = ["("] }\n', r"rois.gtv = .*not a valid regular expression", id="rois-regex"),
]


@pytest.mark.parametrize(("tail", "match"), BAD)
def test_bad_roles_spec_is_a_usage_error(tmp_path: Path, tail: str, match: str) -> None:
    (tmp_path / "raw").mkdir()
    p = tmp_path / "delivery.toml"
    p.write_text(GOOD + tail)
    with pytest.raises(UsageError, match=match):
        load_spec(p, root=tmp_path)


def test_roles_spec_defaults(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    p = tmp_path / "delivery.toml"
    p.write_text(GOOD + SEG_ROLES + SEG_MASKS)
    spec = load_spec(p, root=tmp_path)
    assert [r for r, _ in spec.items.roles] == ["image", "mask"] == list(spec.items.required_roles)
    assert spec.masks.classes == (0, 1, 2) and spec.masks.policy == "reject"
    assert spec.masks.tolerance == 1e-3 and spec.masks.locations == 10_000


@pytest.fixture(scope="module")
def converted_dicom_seg(tmp_path_factory: pytest.TempPathFactory, dask_client):
    """CT series + NIfTI masks (tests/segmentation.py), converted once on the shared cluster."""
    root = tmp_path_factory.mktemp("dicomseg")
    d = seg_delivery(root, DICOM_SEG_ROLES)
    expected = write_dicom_seg_delivery(d.raw, root / "dcm2niix")
    return d, execute(load_spec(d.spec, root=root), dask_client), expected


def test_dicom_series_is_one_member_of_its_sample(converted_dicom_seg) -> None:
    d, result, expected = converted_dicom_seg
    rows = read_manifest(result.manifest)
    by_item = {r["item_id"]: r for r in rows}
    assert len(rows) == len(expected)  # one row per sample, none per slice
    for item, (status, reason) in expected.items():
        row = by_item[item]
        assert (row["status"], row["reason"]) == (status, reason), (item, row["detail"])
        assert row["kind"] == "dicom" and row["source"] == row["role.image"] == f"case_{item[4:]}/ct/ (series 5)"
    assert int(by_item["case004"]["n_files"]) == 5 and by_item["case004"]["role.mask"] == ""
    assert "no file for required role 'mask'" in by_item["case004"]["detail"]
    on_disk = [p for p in d.raw.rglob("*") if p.is_file()]
    assert sum(int(r["n_files"]) for r in rows) == len(on_disk) == result.summary["counts"]["files"]
    assert [int(r["n_files"]) for r in rows if r["role.mask"]] == [6, 6, 6]


@pytest.mark.parametrize(("item", "needle"), [
    pytest.param("case002", ["spacing (0.488281, 0.488281, 3) mm vs image (0.488281, 0.488281, 2.5) mm"],
                 id="spacing"),
    pytest.param("case003", ["affine [(0.488281, 0, 0, 63.8992)", "vs image [(0.488281, 0, 0, 64.8758)",
                            "differs by up to 0.9766 mm"], id="origin"),
])
def test_dicom_series_geometry_mismatch_names_both_values(converted_dicom_seg, item: str, needle: list[str]) -> None:
    _, result, _ = converted_dicom_seg
    row = next(r for r in read_manifest(result.manifest) if r["item_id"] == item)
    assert row["detail"].startswith("mask case_")
    for text in needle:
        assert text in row["detail"], row["detail"]


def test_dicom_series_and_nifti_mask_stored_on_one_grid(converted_dicom_seg) -> None:
    d, _, _ = converted_dicom_seg
    view = open_store(d.store)
    (item,) = view.items
    assert item.item_id == "case001" and set(item.roles) == {"image", "mask"}
    image, mask = view.array(item.roles["image"]), view.array(item.roles["mask"])
    assert image.shape == mask.shape == (1, 16, 16, 5) and image.chunks == mask.chunks and mask.dtype == np.uint8
    # the series decodes to what dcm2niix writes (canonical), the mask to its own canonical voxels
    (nii,) = sorted((d.raw.parent.parent / "dcm2niix" / "case_001").glob("*.nii"))
    want_image, want_affine = dicom_canonical(nii)
    np.testing.assert_allclose(image[...], want_image, rtol=0, atol=1e-3)
    np.testing.assert_array_equal(mask[...], canonical(d.raw / "case_001" / "case_001_seg.nii.gz"))
    np.testing.assert_allclose(mask.attrs["affine"], image.attrs["affine"], atol=1e-3)
    np.testing.assert_allclose(image.attrs["affine"], want_affine, atol=1e-3)
    values, counts = np.unique(mask[...], return_counts=True)
    assert {v: c.voxels for v, c in item.classes.items()} == dict(zip(values.tolist(), counts.tolist()))


def test_plan_rejects_a_series_split_between_roles(tmp_path: Path) -> None:
    tail = ("[items]\nid_pattern = '(?P<id>case_\\d+)'\n"
            'roles = { image = "*/ct/*", mask = "*/seg/*" }\nrequired_roles = ["image"]\n')
    d = seg_delivery(tmp_path, tail)
    slices = ct_series(d.raw / "case_001" / "ct", "case1")
    (d.raw / "case_001" / "seg").mkdir()
    for p in slices[3:]:  # two slices of the one series filed under the mask's folder
        p.rename(d.raw / "case_001" / "seg" / p.name)
    spec = load_spec(d.spec, root=tmp_path)
    candidates = discover(walk(spec.delivery.raw), spec.items)
    the_plan = plan(spec, candidates, {p.rel: p for p in probe_files([(c.rel, str(c.entry.path))
                                                                        for c in candidates])})
    assert not the_plan.samples
    (row,) = the_plan.rows
    assert (row.status, row.reason.value, row.n_files) == ("rejected", "missing_role", 5)
    assert "its 5 files match different roles (image: 3 files, mask: 2 files)" in row.detail


@pytest.fixture(scope="module")
def converted_2d_seg(tmp_path_factory: pytest.TempPathFactory, dask_client):
    """2D image/mask pairs (tests/segmentation.py), converted once on the shared cluster."""
    root = tmp_path_factory.mktemp("seg2d")
    d = seg_delivery(root, SEG_ROLES + SEG_MASKS)
    expected = write_2d_seg_delivery(d.raw)
    return d, execute(load_spec(d.spec, root=root), dask_client), expected


def test_2d_pairs_get_their_documented_outcomes(converted_2d_seg) -> None:
    d, result, expected = converted_2d_seg
    rows = {r["item_id"]: r for r in read_manifest(result.manifest)}
    assert set(rows) == set(expected)
    for item, (status, reason) in expected.items():
        assert (rows[item]["status"], rows[item]["reason"]) == (status, reason), (item, rows[item]["detail"])
        assert rows[item]["n_files"] == "2"
    assert "shape (h,w) 48x63 vs image 48x64" in rows["case004"]["detail"]
    assert "mask case_005_seg.png: 3 channels; a mask has 1" in rows["case005"]["detail"]
    assert "classes 255 (" in rows["case006"]["detail"]
    assert ("image case_008_img.png is a 2D image, mask case_008_seg.nii.gz a volume"
            in rows["case008"]["detail"])
    assert "EXIF orientation 6 applied" in rows["case003"]["warnings"]


def test_2d_masks_are_stored_as_class_values_beside_their_images(converted_2d_seg) -> None:
    d, _, _ = converted_2d_seg
    view = open_store(d.store)
    items = {i.item_id: i for i in view.items}
    assert sorted(items) == ["case001", "case002", "case003", "case007"]
    for item in items.values():
        image, mask = view.array(item.roles["image"]), view.array(item.roles["mask"])
        assert image.shape[1:] == mask.shape[1:] and mask.shape[0] == 1 and mask.dtype == np.uint8
        assert image.chunks == (1, *image.shape[1:]) and mask.chunks == (1, *mask.shape[1:])  # a plane per chunk
        source = d.raw / view.array(item.roles["mask"]).attrs["source"]
        with Image.open(source) as im:
            stored = np.asarray(im).astype(np.uint8)  # a palette's indices; a bilevel image's True/False
        np.testing.assert_array_equal(mask[0], stored)
        locations = view.array(item.locations)[...]
        assert locations.shape[1] == 2 and view.array(item.locations).attrs["axes"] == ["y", "x"]
        for value, info in item.classes.items():
            block = locations[info.start:info.stop]
            assert len(block) == min(info.voxels, 10_000) and (mask[0][block[:, 0], block[:, 1]] == value).all()
    assert sorted(items["case001"].classes) == [0, 1, 2] and sorted(items["case007"].classes) == [0, 1]
    # the EXIF-rotated JPEG is stored as shown (32x40), the mask drawn on what was shown lies on it
    assert view.array(items["case003"].roles["image"]).shape == (3, 32, 40)
    case = items["case001"]  # the report draws the mask over its image
    tile = thumbnail(view.array(case), slot=None, spacing=case.spacing, mask=view.array(case.roles["mask"]))
    assert tile.mode == "RGB" and tile.size == (64, 48)


def test_2d_pairs_give_patches_of_one_region(converted_2d_seg) -> None:
    d, _, _ = converted_2d_seg
    view = open_store(d.store)
    ds = PatchDataset(d.store, (16, 16), roles=("image", "mask"), patches_per_item=8, foreground=1.0, seed=3)
    items = {i.item_id: i for i in view.items}
    for i in range(len(ds)):
        s = ds[i]
        item = items[s["item_id"]]
        (y, x) = s["origin"]
        for role in ("image", "mask"):
            np.testing.assert_array_equal(s[role].numpy(), view.array(item.roles[role])[:, y:y + 16, x:x + 16])
        assert (s["mask"] > 0).any()  # foreground=1: centred on a stored location of a foreground class
    grid = PatchDataset(d.store, (20, 20), mode="grid", roles=("image", "mask"))
    covered = {i.item_id: np.zeros(i.shape[1:], bool) for i in view.items}
    for i in range(len(grid)):
        s = grid[i]
        (y, x) = s["origin"]
        for role in ("image", "mask"):
            want = view.array(items[s["item_id"]].roles[role])[:, y:y + 20, x:x + 20]
            np.testing.assert_array_equal(s[role].numpy(), want)
        covered[s["item_id"]][y:y + 20, x:x + 20] = True
    assert all(c.all() for c in covered.values())


def test_plugin_reader_reads_a_sample_member(tmp_path: Path, scheduler: str) -> None:
    """A mask in a format only a `[run] readers` plugin knows is read by that plugin inside the sample, too."""
    from ..plugin_readers import PLUGINS

    image, _ = anatomy()
    mask = classes_of(image)
    readers = ", ".join(f'"{p}"' for p in PLUGINS)
    tail = ("[items]\nid_pattern = '(?P<id>case_\\d+)'\nroles = { image = '*_img*', mask = '*_seg*' }\n\n"
            f"[masks]\nclasses = [0, 1, 2]\n\n[run]\nreaders = [{readers}]\n")
    d = seg_delivery(tmp_path, tail)
    save(d.raw / "case_001_img.nii.gz", image, np.eye(4))
    np.save(d.raw / "case_001_seg.npy", mask.astype(np.uint8))
    result = convert_delivery(d.spec, scheduler=scheduler)
    (row,) = read_manifest(result.manifest)
    assert (row["status"], row["reason"]) == ("ok", ""), row["detail"]
    assert row["role.mask"] == "case_001_seg.npy"
    item = open_store(d.store).items[0]
    stored = open_store(d.store).array(item.roles["mask"])[...]
    np.testing.assert_array_equal(stored, mask[np.newaxis].astype(np.uint8))
