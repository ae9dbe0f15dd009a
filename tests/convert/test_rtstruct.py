"""RTSTRUCT deliveries: ROI contours on pydicom's real CT slices become a mask on the CT's canonical grid.

The reference mask is computed here, independently of labzarr's grid: the contour points go to voxels through
an affine built from the CT headers, scikit-image's `polygon` fills each contour, the contours of one slice
combine by the even-odd rule, and nibabel reorients the result.
"""

from __future__ import annotations

import json
import shutil

import nibabel as nib
import numpy as np
import pytest
import zarr
from scipy import ndimage
from skimage.draw import polygon

from labzarr.convert import execute, load_spec, read_manifest
from labzarr.loaders import open_store
from labzarr.readers.rtstruct import roi_class

from ..conftest import seg_delivery
from ..dicom_data import PYDICOM_DATA
from ..dicom_masks_data import ROI_SHAPES, by_position, ct, roi_points, write_rtstruct
from .test_dicom_seg import _lps_affine

SPEC = ("[items]\nid_pattern = '(?P<id>case_\\d+)'\n"
        '[masks]\nrois = { tumour = ["gtv.*", "gross.?tumou?r.*"], lung = ["lung.*", "pulmo.*"] }\n')
RULES = (("tumour", ("gtv.*", "gross.?tumou?r.*")), ("lung", ("lung.*", "pulmo.*")))


def reference(cts, shapes: dict[str, dict[int, list[list[tuple[float, float]]]]]) -> dict[str, np.ndarray]:
    """Each ROI's mask, canonical (X, Y, Z), from its contours' LPS points."""
    inverse = np.linalg.inv(_lps_affine(cts))
    out = {}
    for name, slices in shapes.items():
        ijk = np.zeros((16, 16, len(cts)), dtype=bool)
        for k, polygons in slices.items():
            for ij in polygons:
                pts = roi_points(cts, k, ij)
                vox = (inverse @ np.c_[pts, np.ones(len(pts))].T).T
                assert np.allclose(vox[:, 2], k, atol=1e-4)
                fill = np.zeros((16, 16), dtype=bool)
                rr, cc = polygon(vox[:, 0], vox[:, 1], shape=fill.shape)
                fill[rr, cc] = True
                ijk[:, :, k] ^= fill
        img = nib.as_closest_canonical(nib.Nifti1Image(ijk.astype(np.uint8),
                                                       np.diag([-1.0, -1.0, 1.0, 1.0]) @ _lps_affine(cts)))
        out[name] = np.asanyarray(img.dataobj).astype(bool)
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, dask_client):
    root = tmp_path_factory.mktemp("rtstruct")
    d = seg_delivery(root, SPEC)
    cts = ct(d.raw / "case_001" / "ct", "case1")
    write_rtstruct(d.raw / "case_001" / "rs.dcm", cts)
    lost = ct(root / "work" / "case_002" / "ct", "case2")
    write_rtstruct(d.raw / "case_002" / "rs.dcm", lost)
    shutil.copyfile(PYDICOM_DATA / "rtstruct.dcm", d.raw / "rtstruct.dcm")
    return d, execute(load_spec(d.spec, root=root), dask_client), cts, lost


def test_roi_names_map_to_classes_case_and_spelling_aside() -> None:
    assert [roi_class(n, RULES) for n in ("GTV", "gtv_1", "Gross Tumour", "gross tumor vol", "LUNG_L",
                                          "Pulmonary", "Couch", "CTV")] == [1, 1, 1, 1, 2, 2, None, None]


def test_contours_rasterise_to_the_reference_mask(converted) -> None:
    d, result, cts, _ = converted
    row = next(r for r in read_manifest(result.manifest) if r["item_id"] == "case001")
    assert (row["status"], row["role.mask"], row["n_files"]) == ("ok", "case_001/rs.dcm", "6"), row["detail"]
    view = open_store(d.store)
    (item,) = [i for i in view.items if i.item_id == "case001"]
    mask = view.array(item.roles["mask"])[...]
    assert mask.shape == (1, 16, 16, 5)  # tumour and lung do not overlap: one label map
    ref = reference(cts, {k: v for k, v in ROI_SHAPES.items() if k != "Couch"})
    for value, name in ((1, "GTV"), (2, "Lung_L")):
        got, want = mask[0] == value, ref[name]
        assert want.sum() > 10
        # any difference lies on the reference's boundary: within one voxel of both its inside and its outside
        boundary = ndimage.binary_dilation(want) & ~ndimage.binary_erosion(want)
        assert not (got ^ want)[~boundary].any(), name
        np.testing.assert_array_equal(got, want)  # same rasteriser, same points: in fact equal
    assert sorted(item.classes) == [0, 1, 2]


def test_a_contour_inside_another_is_a_hole(converted) -> None:
    d, _, cts, _ = converted
    view = open_store(d.store)
    (item,) = [i for i in view.items if i.item_id == "case001"]
    mask = view.array(item.roles["mask"])[...]
    ref = reference(cts, {"Lung_L": ROI_SHAPES["Lung_L"]})["Lung_L"]
    outer_only = reference(cts, {"Lung_L": {2: ROI_SHAPES["Lung_L"][2][:1]}})["Lung_L"]
    hole = outer_only & ~ref
    assert hole.sum() >= 8  # the inner contour cut a real hole out of the outer one
    assert (mask[0][hole] == 0).all() and (mask[0][ref] == 2).all()


def test_unmapped_rois_are_listed_in_the_detail_and_the_summary(converted) -> None:
    _, result, _, _ = converted
    row = next(r for r in read_manifest(result.manifest) if r["item_id"] == "case001")
    assert "'Couch'" in row["detail"] and "'Isocenter'" in row["detail"]
    summary = json.loads(result.summary_path.read_text())
    listed = summary["dicom_masks"]
    assert listed["unmapped_rois"] == {"case_001/rs.dcm": ["Couch", "Isocenter"]}
    assert sorted(listed["missing_series"]) == ["case_002/rs.dcm", "rtstruct.dcm"]


def test_class_names_and_colours_come_from_the_spec_and_the_rois(converted) -> None:
    d, _, _, _ = converted
    classes = zarr.open_group(str(d.store / "volumes" / "case001"), mode="r").attrs["classes"]
    assert (classes["1"]["name"], classes["1"]["color"]) == ("tumour", [255, 0, 0])
    assert (classes["2"]["name"], classes["2"]["color"]) == ("lung", [0, 128, 255])


def test_rtstruct_whose_series_is_absent_is_rejected_clearly(converted) -> None:
    _, result, _, lost = converted
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    shipped = rows["rtstruct.dcm"]
    assert (shipped["status"], shipped["reason"], shipped["kind"]) == ("rejected", "missing_role", "rtstruct")
    assert "1.2.826.0.1.3680043.8.498.2010020400001.2.1.1" in shipped["detail"]
    assert "not in this delivery" in shipped["detail"] and "Pixel Data" not in shipped["detail"]
    mine = rows["case_002/rs.dcm"]
    assert (mine["status"], mine["reason"]) == ("rejected", "missing_role")
    assert by_position(lost)[0].SeriesInstanceUID in mine["detail"]
