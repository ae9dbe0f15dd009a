"""DICOM-SEG deliveries: a SEG written by highdicom on pydicom's real CT slices becomes the mask of its series.

The expected masks come from highdicom's own decoding (`get_pixels_by_source_instance`, frames found by the
instances they reference) and nibabel's canonical reorientation of an affine built here from the CT headers,
independently of labzarr's layout.
"""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import nibabel as nib
import numpy as np
import pytest
import zarr

from labzarr.convert import execute, load_spec, read_manifest
from labzarr.loaders import open_store

from ..conftest import seg_delivery
from ..dicom_masks_data import SEG_LABELS, by_position, ct, moved_frame, seg_arrays, shuffled_frames, write_seg

SPEC = "[items]\nid_pattern = '(?P<id>case_\\d+)'\n"


def _lps_affine(cts) -> np.ndarray:
    """(i, j, k) -> LPS mm of the slices sorted along their normal: i along a row, j down a column."""
    first, last = by_position(cts)[0], by_position(cts)[-1]
    row, col = np.array(first.ImageOrientationPatient[:3], float), np.array(first.ImageOrientationPatient[3:], float)
    dr, dc = (float(v) for v in first.PixelSpacing)
    step = (np.array(last.ImagePositionPatient, float) - np.array(first.ImagePositionPatient, float)) / (len(cts) - 1)
    out = np.eye(4)
    out[:3, 0], out[:3, 1], out[:3, 2], out[:3, 3] = row * dc, col * dr, step, np.array(first.ImagePositionPatient)
    return out


def canonical(cts, stacked: np.ndarray) -> np.ndarray:
    """(slices, rows, columns, C) in `by_position` order -> (C, X, Y, Z) canonical RAS, by nibabel."""
    ijk = np.transpose(stacked, (2, 1, 0, 3))
    img = nib.as_closest_canonical(nib.Nifti1Image(ijk, np.diag([-1.0, -1.0, 1.0, 1.0]) @ _lps_affine(cts)))
    return np.moveaxis(np.asanyarray(img.dataobj), 3, 0)


def highdicom_masks(seg_path: Path, cts, threshold: float = 0.5) -> np.ndarray:
    """highdicom's decoding of the SEG on the CT's slices, thresholded: (slices, rows, columns, segments)."""
    seg = hd.seg.segread(seg_path)
    uids = [d.SOPInstanceUID for d in by_position(cts)]
    pixels = seg.get_pixels_by_source_instance(uids, rescale_fractional=True, skip_overlap_checks=True)
    return np.asarray(pixels) >= threshold if seg.SegmentationType == "FRACTIONAL" else np.asarray(pixels) > 0


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, dask_client):
    root = tmp_path_factory.mktemp("dicomseg")
    work = root / "work"
    d = seg_delivery(root, SPEC)
    cases = {}
    # 1: a fractional SEG of two overlapping segments (a fractional "liver", a 0/1 "lesion")
    cts = ct(d.raw / "case_001" / "ct", "case1")
    write_seg(d.raw / "case_001" / "seg.dcm", cts, seg_arrays(cts), kind="FRACTIONAL")
    cases["case001"] = cts
    # 2: the same masks on the same pixels (another patient's copy), its frames shuffled in the file
    cts = ct(d.raw / "case_002" / "ct", "case2")
    write_seg(work / "case_002.dcm", cts, seg_arrays(cts), kind="FRACTIONAL")
    shuffled_frames(work / "case_002.dcm", d.raw / "case_002" / "seg.dcm")
    cases["case002"] = cts
    # 3: a binary SEG whose segments do not overlap: a label map
    cts = ct(d.raw / "case_003" / "ct", "case3")
    arr = seg_arrays(cts)
    arr[..., 0] = (arr[..., 0] >= 0.5) & (arr[..., 1] == 0)
    write_seg(d.raw / "case_003" / "seg.dcm", cts, arr, kind="BINARY")
    cases["case003"] = cts
    # 4: a SEG whose series is not delivered
    cts = ct(work / "case_004" / "ct", "case4")
    write_seg(d.raw / "case_004" / "seg.dcm", cts, seg_arrays(cts), kind="FRACTIONAL")
    cases["case004"] = cts
    # 5: a SEG one of whose frames lies half a slice off the instance it references
    cts = ct(d.raw / "case_005" / "ct", "case5")
    write_seg(work / "case_005.dcm", cts, seg_arrays(cts), kind="FRACTIONAL")
    moved_frame(work / "case_005.dcm", d.raw / "case_005" / "seg.dcm", frame=2, shift_mm=1.25)
    cases["case005"] = cts
    result = execute(load_spec(d.spec, root=root), dask_client)
    return d, result, cases


def _rows(result) -> dict[str, dict[str, str]]:
    return {r["source"]: r for r in read_manifest(result.manifest)}


def test_a_seg_is_the_mask_of_its_series_not_another_image(converted) -> None:
    d, result, _ = converted
    rows = _rows(result)
    ok = {r["item_id"]: r for r in rows.values() if r["status"] == "ok"}
    assert sorted(ok) == ["case001", "case002", "case003"]
    for item, row in ok.items():
        n = item[-1]
        assert row["source"] == row["role.image"] == f"case_00{n}/ct/ (series 5)"
        assert row["role.mask"] == f"case_00{n}/seg.dcm" and row["n_files"] == "6"
    # no SEG converted as an image of its own: every file is the source or a member of exactly one row
    on_disk = [p for p in d.raw.rglob("*") if p.is_file()]
    assert sum(int(r["n_files"]) for r in rows.values()) == len(on_disk)
    assert not [r for r in rows.values() if r["source"].endswith("seg.dcm") and r["status"] == "ok"]


def test_fractional_seg_equals_highdicoms_decoding_on_the_ct_grid(converted) -> None:
    d, _, cases = converted
    view = open_store(d.store)
    item = next(i for i in view.items if i.item_id == "case001")
    image, mask = view.array(item.roles["image"])[...], view.array(item.roles["mask"])[...]
    cts = cases["case001"]
    pixels = np.stack([c.pixel_array * float(c.RescaleSlope) + float(c.RescaleIntercept) for c in by_position(cts)])
    np.testing.assert_array_equal(image, canonical(cts, pixels[..., np.newaxis]))  # the grid the mask must be on
    decoded = highdicom_masks(d.raw / "case_001" / "seg.dcm", cts)
    assert decoded.shape == (5, 16, 16, 2) and (decoded.sum(axis=-1) > 1).any()  # overlapping: one channel each
    want = canonical(cts, decoded.astype(np.uint8) * np.array([1, 2], dtype=np.uint8))
    assert mask.shape == (2, 16, 16, 5) and mask.dtype == np.uint8
    np.testing.assert_array_equal(mask, want)
    assert 0 < (mask[0] == 1).sum() < mask[0].size  # the threshold cut the fractional segment somewhere


def test_shuffled_frames_give_the_same_mask(converted) -> None:
    d, _, _ = converted
    view = open_store(d.store)
    masks = {i.item_id: view.array(i.roles["mask"])[...] for i in view.items}
    np.testing.assert_array_equal(masks["case002"], masks["case001"])


def test_non_overlapping_segments_are_one_label_map(converted) -> None:
    d, _, cases = converted
    view = open_store(d.store)
    item = next(i for i in view.items if i.item_id == "case003")
    mask = view.array(item.roles["mask"])[...]
    decoded = highdicom_masks(d.raw / "case_003" / "seg.dcm", cases["case003"])
    want = canonical(cases["case003"], (decoded * np.array([1, 2])).sum(axis=-1, keepdims=True).astype(np.uint8))
    assert mask.shape == (1, 16, 16, 5)
    np.testing.assert_array_equal(mask, want)
    assert sorted(item.classes) == [0, 1, 2]


def test_segment_labels_and_colours_name_the_classes(converted) -> None:
    d, _, _ = converted
    group = zarr.open_group(str(d.store / "volumes" / "case001"), mode="r")
    classes = group.attrs["classes"]
    assert [classes[k]["name"] for k in ("1", "2")] == list(SEG_LABELS)
    blue, red = classes["1"]["color"], classes["2"]["color"]
    assert blue[2] > 200 > max(blue[:2]) and red[0] > 200 > max(red[1:])  # (0, 0, 255) and (255, 0, 0) via CIELab
    label = zarr.open_group(str(d.store / "volumes" / "case001" / "labels" / "mask"), mode="r").attrs["ome"]
    props = label["image-label"]["properties"]
    assert [(p["label-value"], p["name"]) for p in props] == [(1, "liver"), (2, "lesion")]
    colors = {c["label-value"]: c["rgba"] for c in label["image-label"]["colors"]}
    assert colors[1][:3] == blue and colors[2][:3] == red


def test_seg_without_its_series_is_rejected_naming_the_series(converted) -> None:
    _, result, cases = converted
    row = _rows(result)["case_004/seg.dcm"]
    assert (row["status"], row["reason"], row["kind"]) == ("rejected", "missing_role", "dicom-seg")
    assert cases["case004"][0].SeriesInstanceUID in row["detail"] and "not in this delivery" in row["detail"]


def test_seg_frame_off_its_referenced_slice_is_a_geometry_mismatch(converted) -> None:
    _, result, _ = converted
    row = next(r for r in _rows(result).values() if r["item_id"] == "case005")
    assert (row["status"], row["reason"]) == ("rejected", "geometry_mismatch")
    assert row["detail"].startswith("mask case_005/seg.dcm: SEG frame 3 lies at")
    assert "1.25 mm apart, tolerance 0.001 mm" in row["detail"], row["detail"]
    assert row["n_files"] == "6"  # the series and its SEG, accounted for in the one row


def test_patch_dataset_serves_the_overlapping_segments_as_channels(converted) -> None:
    from labzarr import PatchDataset

    d, _, _ = converted
    ds = PatchDataset(d.store, (8, 8, 4), patches_per_item=4, roles=("image", "mask"), foreground=1.0, seed=0,
                      items=["case001"])
    stored = open_store(d.store)
    (item,) = [i for i in stored.items if i.item_id == "case001"]
    mask = stored.array(item.roles["mask"])[...]
    for i in range(len(ds)):
        sample = ds[i]
        x, y, z = sample["origin"]
        assert sample["mask"].shape == (2, 8, 8, 4)
        np.testing.assert_array_equal(sample["mask"].numpy(), mask[:, x:x + 8, y:y + 8, z:z + 4])
        assert sample["mask"].numpy().any()  # foreground sampling found a segment's voxel


def _planned(root: Path, tail: str):
    from labzarr.convert.discover import discover, walk
    from labzarr.convert.plan.build import plan
    from labzarr.convert.probe import probe_files

    spec = load_spec(root / "manifests" / "seg" / "delivery.toml", root=root)
    candidates = discover(walk(spec.delivery.raw), spec.items)
    probes = {p.rel: p for p in probe_files([(c.rel, str(c.entry.path)) for c in candidates])}
    return plan(spec, candidates, probes)


def test_with_roles_a_seg_joins_the_sample_of_its_series(tmp_path: Path) -> None:
    roles = SPEC + 'roles = { image = "*/ct/*" }\n'
    d = seg_delivery(tmp_path, roles)
    for n in (1, 2):
        cts = ct(d.raw / f"case_00{n}" / "ct", f"case{n}")
        write_seg(d.raw / f"case_00{n}" / "seg.dcm", cts, seg_arrays(cts), kind="FRACTIONAL")
    write_seg(d.raw / "case_002" / "again.dcm", cts, seg_arrays(cts), kind="FRACTIONAL")  # a second SEG on case 2
    the_plan = _planned(tmp_path, roles)
    samples = {s.item_id: s for s in the_plan.samples}
    assert sorted(samples) == ["case001", "case002"]
    assert [(f.role, f.kind) for f in samples["case001"].files] == [("image", "dicom"), ("mask", "dicom-seg")]
    (row,) = the_plan.rows
    assert (row.source, row.reason.value) == ("case_002/seg.dcm", "missing_role")
    assert "already has mask case_002/again.dcm" in row.detail
