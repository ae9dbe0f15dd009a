"""`[labels] annotations`: workbook points and spheres placed on the stored canonical grid (issue 37).

The expected voxels come from nibabel and numpy alone: the source's own affine (the NIfTI header's, or one
built from the DICOM headers' ImagePositionPatient, ImageOrientationPatient and PixelSpacing), then
nibabel's `as_closest_canonical`. Files are real: nibabel's oblique `example4d.nii.gz` and pydicom's
dicomdirtests CT5N series.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import openpyxl
import pydicom
import pytest
import zarr

from labzarr.convert import UsageError, execute, load_spec, read_manifest
from labzarr.convert.annotations import AnnotationCells, Geometry, Refusal, place
from labzarr.convert.spec import AnnotationsSpec
from labzarr.loaders import open_store
from labzarr.readers import ColumnRef, LabelCell, Reason
from labzarr.store import Annotation, VolumeAttrs

from ..dicom_data import CT5N

OBLIQUE = Path(os.path.dirname(nib.__file__)) / "tests" / "data" / "example4d.nii.gz"
HEADER = ["Case", "coordX", "coordY", "coordZ", "diameter_mm"]


@dataclass(frozen=True)
class Source:
    """An item's source as nibabel sees it: voxels (i, j, k) and their affine to RAS mm."""

    data: np.ndarray
    affine: np.ndarray

    def world(self, ijk: tuple[float, float, float]) -> np.ndarray:
        """RAS mm of source voxel `ijk`."""
        return (self.affine @ [*ijk, 1.0])[:3]

    def canonical_voxel(self, ras: np.ndarray) -> np.ndarray:
        """Where RAS mm `ras` falls in nibabel's closest-canonical grid of this source."""
        canon = nib.as_closest_canonical(nib.Nifti1Image(self.data, self.affine))
        return (np.linalg.inv(canon.affine) @ [*ras, 1.0])[:3]

    def canonical_value(self, ijk: tuple[int, int, int]) -> float:
        """The source voxel's value (what the store must hold at that voxel's canonical place)."""
        return float(self.data[ijk])


def ct_source() -> Source:
    """CT5N as (column i, row j, slice k by increasing position), its affine built from the headers."""
    slices = sorted((pydicom.dcmread(p) for p in CT5N), key=lambda d: float(d.ImagePositionPatient[2]))
    first = slices[0]
    iop = np.array(first.ImageOrientationPatient, dtype=float)
    row_mm, col_mm = (float(v) for v in first.PixelSpacing)
    lps = np.eye(4)
    lps[:3, 0] = iop[:3] * col_mm
    lps[:3, 1] = iop[3:] * row_mm
    lps[:3, 2] = np.array(slices[1].ImagePositionPatient, float) - np.array(first.ImagePositionPatient, float)
    lps[:3, 3] = np.array(first.ImagePositionPatient, float)
    ras = np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps
    data = np.stack([d.pixel_array.T * float(d.RescaleSlope) + float(d.RescaleIntercept) for d in slices], axis=-1)
    return Source(data=data, affine=ras)


def oblique_source() -> Source:
    img = nib.load(OBLIQUE)
    return Source(data=np.asarray(img.dataobj)[..., 0], affine=img.affine)


# Source voxels of the points, off the voxel centres so a rounding or half-voxel slip shows.
CT_POINT = (5.3, 7.6, 2.0)
CT_POINT2 = (12.0, 3.0, 4.0)
OBLIQUE_POINT = (60.25, 40.5, 10.0)


def lps(ras: np.ndarray) -> list[float]:
    return [-float(ras[0]), -float(ras[1]), float(ras[2])]


@dataclass(frozen=True)
class Converted:
    store: Path
    manifest: dict[str, dict[str, str]]
    summary: dict[str, object]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, dask_client: object) -> Iterator[Converted]:
    root = tmp_path_factory.mktemp("annotated")
    raw = root / "raw"
    (raw / "case1").mkdir(parents=True)
    for p in CT5N:
        shutil.copyfile(p, raw / "case1" / p.name)
    shutil.copyfile(OBLIQUE, raw / "case2.nii.gz")
    ct, obl = ct_source(), oblique_source()
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Nodules"
    ws.append(HEADER)
    ws.append(["case1", *lps(ct.world(CT_POINT)), 3.0])         # row 2
    ws.append(["case1", *lps(ct.world(CT_POINT2)), 2.0])        # row 3
    ws.append(["case1", 500.0, -100.0, 3.0, 4.0])               # row 4: far outside the 8 mm wide CT
    ws.append(["case2", *lps(obl.world(OBLIQUE_POINT)), 10.0])  # row 5
    ws.append(["case2", -3.0, "n/a", 1.0, 5.0])                 # row 6: not a number
    ws.append(["case2", None, None, None, None])                # row 7: no annotation on this row
    wb.save(raw / "nodules.xlsx")
    spec_path = root / "delivery.toml"
    spec_path.write_text(
        f'[delivery]\nname = "nodules"\nraw = "{raw}"\nstore = "{root / "nodules.zarr"}"\n\n'
        '[labels]\nworkbook = "nodules.xlsx"\nid_column = "Case"\n'
        'annotations = { center = ["coordX", "coordY", "coordZ"], diameter = "diameter_mm", space = "LPS" }\n')
    result = execute(load_spec(spec_path, root=root), dask_client)
    rows = {r["item_id"]: r for r in read_manifest(result.manifest) if r["item_id"]}
    yield Converted(store=result.spec.delivery.store.local_path(), manifest=rows,
                    summary=json.loads(result.summary_path.read_text()))


def stored(c: Converted, item_id: str) -> tuple[tuple[Annotation, ...], Geometry, np.ndarray]:
    item = next(i for i in open_store(c.store).items if i.item_id == item_id)
    arr = zarr.open_array(zarr.storage.LocalStore(c.store), path=item.array, mode="r", zarr_format=3)
    attrs = VolumeAttrs.decode(arr.attrs.asdict(), where=item.array)
    geometry = Geometry(shape=tuple(item.shape[1:]), affine=attrs.affine,
                        source_orientation=attrs.source_orientation)
    assert [a["center"] for a in arr.attrs["annotations"]] == [list(a.center) for a in item.annotations]
    return item.annotations, geometry, arr[0]


@pytest.mark.parametrize(("item_id", "source", "points"), [
    pytest.param("case1", ct_source, (CT_POINT, CT_POINT2), id="dicom-ct5n"),
    pytest.param("case2", oblique_source, (OBLIQUE_POINT,), id="oblique-nifti"),
])
def test_lps_points_land_on_the_voxels_nibabel_computes(converted: Converted, item_id, source, points) -> None:
    annotations, _, image = stored(converted, item_id)
    src = source()
    assert len(annotations) == len(points)
    for a, ijk in zip(annotations, points):
        want = src.canonical_voxel(src.world(ijk))
        np.testing.assert_allclose(a.center, want, atol=1e-4)
        # The stored voxel there holds the source voxel's value: the grid, not only the numbers, agrees.
        near = tuple(int(round(v)) for v in a.center)
        assert float(image[near]) == src.canonical_value(tuple(int(round(v)) for v in ijk))


@pytest.mark.parametrize("space", ["RAS", "LPS", "voxel"])
@pytest.mark.parametrize(("item_id", "source", "ijk"), [
    pytest.param("case1", ct_source, CT_POINT, id="dicom-ct5n"),
    pytest.param("case2", oblique_source, OBLIQUE_POINT, id="oblique-nifti"),
])
def test_every_space_places_a_point_on_the_same_voxel(converted: Converted, space, item_id, source, ijk) -> None:
    _, geometry, _ = stored(converted, item_id)
    src = source()
    ras = src.world(ijk)
    given = {"RAS": list(ras), "LPS": lps(ras), "voxel": list(ijk)}[space]
    cells = AnnotationCells(center=tuple(LabelCell(repr(float(v)), f"S!{c}2")  # type: ignore[arg-type]
                                         for v, c in zip(given, "BCD")))
    spec = AnnotationsSpec(center=(ColumnRef("B"), ColumnRef("C"), ColumnRef("D")), space=space)
    placed = place(cells, spec, geometry)
    assert isinstance(placed, Annotation)
    np.testing.assert_allclose(placed.center, src.canonical_voxel(ras), atol=1e-4)
    assert placed.size == (0.0, 0.0, 0.0) and placed.source == "S!B2"


def test_a_diameter_becomes_the_extent_along_each_axis(converted: Converted) -> None:
    (first, second), geometry, _ = stored(converted, "case1")
    spacing = np.linalg.norm(np.array(geometry.affine)[:3, :3], axis=0)
    np.testing.assert_allclose(first.size, 3.0 / spacing, rtol=1e-5)
    np.testing.assert_allclose(second.size, 2.0 / spacing, rtol=1e-5)
    np.testing.assert_allclose(first.box, [*(np.array(first.center) - 1.5 / spacing),
                                           *(np.array(first.center) + 1.5 / spacing)], rtol=1e-5)
    # A sphere is a sphere in any rotation: on the oblique grid too its bound is diameter / spacing.
    (oblique,), geometry, _ = stored(converted, "case2")
    spacing = np.linalg.norm(np.array(geometry.affine)[:3, :3], axis=0)
    np.testing.assert_allclose(oblique.size, 10.0 / spacing, rtol=1e-5)


def test_a_world_box_on_an_oblique_grid_is_bounded_by_its_corners(converted: Converted) -> None:
    _, geometry, _ = stored(converted, "case2")
    src = oblique_source()
    ras = src.world(OBLIQUE_POINT)
    half = np.array([6.0, 4.0, 10.0])  # mm along L/R, P/A, I/S
    corners = np.array([ras + half * (2 * np.array(signs) - 1) for signs in np.ndindex(2, 2, 2)])
    voxels = np.array([src.canonical_voxel(c) for c in corners])
    spec = AnnotationsSpec(center=(ColumnRef("B"), ColumnRef("C"), ColumnRef("D")), space="LPS",
                           size=(ColumnRef("E"), ColumnRef("F"), ColumnRef("G")))
    values = [*lps(ras), *(2 * half)]
    cells = [LabelCell(repr(float(v)), f"S!{c}2") for v, c in zip(values, "BCDEFG")]
    placed = place(AnnotationCells(center=(cells[0], cells[1], cells[2]), extent=tuple(cells[3:])), spec, geometry)
    assert isinstance(placed, Annotation)
    np.testing.assert_allclose(placed.box, [*voxels.min(axis=0), *voxels.max(axis=0)], atol=1e-4)
    # Tilted: wider than the box's sides over the spacing along the axes the tilt mixes.
    spacing = np.linalg.norm(np.array(geometry.affine)[:3, :3], axis=0)
    assert placed.size[1] > 8.0 / spacing[1] and placed.size[2] > 20.0 / spacing[2]


def test_out_of_volume_and_unreadable_annotations_are_listed_never_dropped(converted: Converted) -> None:
    case1, case2 = converted.manifest["case1"], converted.manifest["case2"]
    assert (case1["status"], case2["status"]) == ("ok", "ok")
    # The line docs/spec.md quotes.
    assert case1["warnings"] == ("annotation_outside at Nodules!B4: centre (500, -100, 3) LPS is canonical voxel "
                                 "(-1157, -73.06, 1.695): x -1157 not in [-0.5, 15.5); y -73.06 not in [-0.5, 15.5) "
                                 "of shape 16x16x5")
    assert "bad_annotation at Nodules!B6: Nodules!C6 is 'n/a', not a number" in case2["warnings"]
    section = converted.summary["annotations"]
    assert isinstance(section, dict)
    assert (section["placed"], section["items"], section["space"], section["of_rejected_items"]) == (3, 2, "LPS", {})
    assert [(r["item_id"], r["cell"], r["reason"]) for r in section["rejected"]] == [
        ("case1", "Nodules!B4", Reason.ANNOTATION_OUTSIDE.value), ("case2", "Nodules!B6", Reason.BAD_ANNOTATION.value)]


def test_a_point_outside_a_small_volume_is_refused_with_the_numbers() -> None:
    geometry = Geometry(shape=(4, 5, 6), affine=tuple(tuple(r) for r in np.eye(4)), source_orientation="RAS")
    spec = AnnotationsSpec(center=(ColumnRef("B"), ColumnRef("C"), ColumnRef("D")), space="voxel")
    cells = AnnotationCells(center=(LabelCell("1", "S!B3"), LabelCell("4.6", "S!C3"), LabelCell("-1", "S!D3")))
    refused = place(cells, spec, geometry)
    assert refused == Refusal("S!B3", Reason.ANNOTATION_OUTSIDE,
                              "centre (1, 4.6, -1) voxel is canonical voxel (1, 4.6, -1): y 4.6 not in [-0.5, 4.5); "
                              "z -1 not in [-0.5, 5.5) of shape 4x5x6")


@pytest.mark.parametrize(("y", "inside"), [("-0.5", True), ("4.49", True), ("4.5", False), ("-0.51", False)])
def test_a_volume_holds_the_points_of_its_voxels_half_open(y: str, inside: bool) -> None:
    """Voxel n spans [n - 0.5, n + 0.5): the last voxel's far face is outside, as PatchDataset counts it."""
    geometry = Geometry(shape=(4, 5, 6), affine=tuple(tuple(r) for r in np.eye(4)), source_orientation="RAS")
    spec = AnnotationsSpec(center=(ColumnRef("B"), ColumnRef("C"), ColumnRef("D")), space="voxel")
    cells = AnnotationCells(center=(LabelCell("1", "S!B3"), LabelCell(y, "S!C3"), LabelCell("2", "S!D3")))
    assert isinstance(place(cells, spec, geometry), Annotation) is inside


@pytest.mark.parametrize(("shape", "values", "detail"), [
    pytest.param((64, 48), ("1", "2", ""), "the item is a 2D image; annotations place points in volumes only", id="2d"),
    pytest.param((4, 4, 4), ("1", "", "0"), "S!C3 is (blank), not a number", id="blank-cell"),
    pytest.param((4, 4, 4), ("1", "nan", "0"), "S!C3 is 'nan', not a finite number", id="nan"),
    pytest.param((4, 4, 4), ("1", "2", "0", "-3"), "S!E3 is -3, a negative extent", id="negative-diameter"),
])
def test_an_unplaceable_annotation_says_why(shape, values: tuple[str, ...], detail: str) -> None:
    geometry = Geometry(shape=shape, affine=tuple(tuple(r) for r in np.eye(4)), source_orientation="RAS")
    spec = AnnotationsSpec(center=(ColumnRef("B"), ColumnRef("C"), ColumnRef("D")), space="RAS",
                           diameter=ColumnRef("E") if len(values) == 4 else None)
    cells = [LabelCell(v, f"S!{c}3") for v, c in zip(values, "BCDE")]
    found = place(AnnotationCells(center=(cells[0], cells[1], cells[2]), extent=tuple(cells[3:])), spec, geometry)
    assert found == Refusal("S!B3", Reason.BAD_ANNOTATION, detail)


@pytest.mark.parametrize(("line", "match"), [
    ('annotations = { center = ["X", "Y", "Z"] }', r"\[labels.annotations\] space is missing"),
    ('annotations = { center = ["X", "Y"], space = "LPS" }', r"center = \['X', 'Y'\]: expected three columns"),
    ('annotations = { center = ["X", "Y", "Z"], space = "IJK" }', r'space = \'IJK\': allowed: "LPS"'),
    ('annotations = { center = ["X", "Y", "Z"], space = "RAS", diameter = "D", size = ["A", "B", "C"] }',
     "a diameter and a size both given"),
    ('annotations = { centre = ["X", "Y", "Z"], space = "RAS" }', r"\[labels.annotations\] center is missing"),
])
def test_a_bad_annotations_table_is_one_clear_error(tmp_path: Path, line: str, match: str) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "w.xlsx").touch()
    spec = tmp_path / "delivery.toml"
    spec.write_text(f'[delivery]\nname = "d"\nraw = "raw"\nstore = "s.zarr"\n\n[labels]\nworkbook = "w.xlsx"\n{line}\n')
    with pytest.raises(UsageError, match=match):
        load_spec(spec, root=tmp_path)


def test_a_rerun_is_byte_stable_and_a_corrected_workbook_moves_the_annotations(tmp_path: Path,
                                                                             dask_client: object) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    nib.save(nib.Nifti1Image(np.zeros((8, 8, 8), np.int16), np.eye(4)), raw / "case1.nii")

    def workbook(*rows: list[object]) -> None:
        wb = openpyxl.Workbook()
        wb.active.append(["Case", "i", "j", "k"])
        for r in rows:
            wb.active.append(r)
        wb.save(raw / "points.xlsx")

    workbook(["case1", 1, 2, 3], ["case1", 7, 7, 9])
    spec_path = tmp_path / "delivery.toml"
    spec_path.write_text(
        f'[delivery]\nname = "p"\nraw = "{raw}"\nstore = "{tmp_path / "p.zarr"}"\n\n[labels]\nworkbook = '
        '"points.xlsx"\nid_column = "Case"\nannotations = { center = ["i", "j", "k"], space = "voxel" }\n')
    first = execute(load_spec(spec_path, root=tmp_path), dask_client)
    committed = first.manifest.read_bytes(), first.summary_path.read_bytes()
    again = execute(load_spec(spec_path, root=tmp_path), dask_client)
    assert (again.converted, again.manifest.read_bytes(), again.summary_path.read_bytes()) == (0, *committed)
    (item,) = open_store(first.spec.delivery.store).items
    assert [a.center for a in item.annotations] == [(1.0, 2.0, 3.0)]
    assert [r["reason"] for r in json.loads(committed[1])["annotations"]["rejected"]] == ["annotation_outside"]
    workbook(["case1", 4, 4, 4])  # the outside one corrected (and moved), the first one gone
    execute(load_spec(spec_path, root=tmp_path), dask_client)
    (item,) = open_store(first.spec.delivery.store).items
    arr = zarr.open_array(zarr.storage.LocalStore(first.spec.delivery.store.local_path()), path=item.array,
                          mode="r", zarr_format=3)
    assert [a.center for a in item.annotations] == [(4.0, 4.0, 4.0)]
    assert arr.attrs["annotations"] == [{"center": [4.0, 4.0, 4.0], "size": [0.0, 0.0, 0.0], "source": "Sheet!B2"}]
    workbook(["case1"])  # none left: the attr goes too
    last = execute(load_spec(spec_path, root=tmp_path), dask_client)
    arr = zarr.open_array(zarr.storage.LocalStore(first.spec.delivery.store.local_path()), path=item.array,
                          mode="r", zarr_format=3)
    assert "annotations" not in arr.attrs.asdict()
    assert open_store(first.spec.delivery.store).items[0].annotations == ()
    assert json.loads(last.summary_path.read_text())["annotations"] == {
        "placed": 0, "items": 0, "space": "voxel", "rejected": [], "of_rejected_items": {}}
