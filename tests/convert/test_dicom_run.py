"""A messy DICOM delivery converted on a real dask cluster: every file's fate, and the dcm2niix contract.

The contract: for every multi-slice series the store holds, the array equals what the dcm2niix binary writes
for the same files, after `as_closest_canonical` on both sides: voxels exactly, affine and spacing within
1e-3 mm. Where dcm2niix and labzarr knowingly differ, the test says so and checks the difference itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pydicom
import pytest

from labzarr.convert import Row, RunResult, convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.loaders import open_store

from ..dicom_data import DCM2NIIX, DICOMDIR_TESTS, PYDICOM_DATA, canonical, dcm2niix, write_delivery


@pytest.fixture(scope="module")
def delivery(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> Iterator[tuple[Path, Path, RunResult]]:
    root = tmp_path_factory.mktemp("dicom")
    raw = write_delivery(root / "raw")
    store = root / "stores" / "dicom.zarr"
    spec = write_spec(root / "manifests" / "dicom" / "delivery.toml", raw=raw, store=store, name="dicom",
                      labels=False)
    yield raw, store, convert_delivery(spec, scheduler=scheduler)


def files_of(row: Row) -> tuple[str, ...]:
    return row.members or (row.source,)


def test_every_file_is_in_exactly_one_row(delivery: tuple[Path, Path, RunResult]) -> None:
    raw, _, result = delivery
    on_disk = sorted(p.relative_to(raw).as_posix() for p in raw.rglob("*") if p.is_file())
    listed = [f for r in result.rows for f in files_of(r)]
    assert sorted(listed) == on_disk
    assert all(r.n_files == len(files_of(r)) for r in result.rows)
    assert result.summary["counts"]["files"] == len(on_disk)


# (source pattern, status, reason, how many rows). Sources of DICOM series are "<folder>/ (series N[, part])",
# or "<file> (series N)" for a series of one file.
EXPECTED = [
    # pydicom's dicomdirtests, as delivered
    (r"case_001/77654033/CR\d/\d+", "ok", "", 3),  # radiographs: 2D items
    (r"case_001/77654033/CT2/ \(series 2\)", "rejected", "series_missing_slices", 1),  # 202.5 mm gap = 161 slices
    (r"case_001/98892001/CT2N/ \(series 4\)", "rejected", "series_too_short", 1),  # a 2-plane localizer: one row
    (r"case_001/98892001/CT5N/ \(series 5\)", "ok", "", 1),
    (r"case_001/98892003/MR1/\d+ \(series 1\)", "rejected", "series_too_short", 3),  # three one-file series
    (r"case_001/98892003/MR2/(15970 \(series 2\)| \(series 2 [\d.]+\))", "rejected", "series_too_short", 3),
    (r"case_001/98892003/MR700/ \(series 700\)", "rejected", "series_too_short", 1),
    (r"case_001/(TINY_ALPHA/)?DICOMDIR(-\w+)?(\.dcm)?", "ignored", "", 8),
    (r"case_001/TINY_ALPHA/PT000000/ST000000/SE000000/IM\w+", "ignored", "", 50),  # CT objects without pixels
    (r"case_001/(TINY_ALPHA/README|README\.txt)", "ignored", "", 2),
    # series built from real slices, and nibabel's files
    (r"case_002/fmri/ \(series 5\)", "ok", "", 1),
    (r"case_003/mosaic_1\.dcm \(series 5\)", "ok", "", 1),
    (r"case_004/bold/ \(series 5\)", "ok", "", 1),
    (r"case_005/ \(series 5, echo [12]\)", "ok", "", 2),
    (r"case_006/rtdose\.dcm \(series 1\)|case_007/rtdose_rle\.dcm \(series 1\)", "ok", "", 2),
    (r"case_008/dwi/ \(series 12\)", "ok", "", 1),
    (r"case_009/philips_mprage\.dcm \(series 301\)", "ok", "", 1),
    (r"case_010/[01]\.dcm", "rejected", "bad_header", 2),  # nibabel's 256x256 "mosaics" of 7x7 tiles
    (r"case_011/SC_rgb_rle_2frame\.dcm", "ok", "", 1),
    (r"case_012/rle/ \(series 5\)", "ok", "", 1),
    (r"case_01[34]/ \(series 5\)", "ok", "", 2),
    # messy
    (r"case_020/ \(series 5\)", "rejected", "series_missing_slices", 1),
    (r"case_021/ \(series 5\)", "rejected", "truncated", 1),
    (r"case_022/ \(series 5 [\d.]+\)", "ok", "", 2),
    (r"case_023/ \(series 5\)", "ok", "", 1),
    (r"case_024/ \(series 5\)", "rejected", "mixed_series", 1),
    (r"case_025/ \(series 5\)", "ok", "", 1),
    (r"case_025/junk\.dcm", "rejected", "unsupported_format", 1),
    (r"case_025/empty\.dcm", "rejected", "empty_file", 1),
    (r"case_025/notes\.txt", "ignored", "", 1),
    (r"case_026/ \(series 5\)", "ok", "", 1),
    (r"case_026/DICOMDIR", "ignored", "", 1),
    (r"case_027/ \(series 5\)", "ok", "", 1),
    (r"case_028/ \(series 5\)", "ok", "", 1),
    (r"case_029/ \(series 5\)", "rejected", "decoder_missing", 1),
    (r"case_030/ \(series 5\)", "rejected", "series_inconsistent_geometry", 1),
    (r"case_031/MR_truncated\.dcm \(series 1\)", "rejected", "truncated", 1),  # MR_truncated.dcm
    (r"case_031/no_meta\.dcm", "rejected", "unsupported_format", 1),  # a stray byte before its first element
    (r"case_031/badVR\.dcm", "rejected", "bad_header", 1),
    (r"case_031/(rtplan|test-SR)\.dcm", "ignored", "", 2),
    (r"case_032/ \(series 5\)", "rejected", "duplicate_content", 1),  # case_001's CT5N once more
]


def test_each_file_has_its_documented_outcome(delivery: tuple[Path, Path, RunResult]) -> None:
    _, _, result = delivery
    matched: Counter[int] = Counter()
    for row in result.rows:
        hits = [i for i, (pattern, *_) in enumerate(EXPECTED) if re.fullmatch(pattern, row.source)]
        assert len(hits) == 1, f"{row.source}: matches {len(hits)} expectations"
        _, status, reason, _ = EXPECTED[hits[0]]
        assert (row.status, row.reason.value if row.reason else "") == (status, reason), (row.source, row.detail)
        if row.status != "ok":
            assert row.detail, row.source
        matched[hits[0]] += 1
    assert [matched[i] for i in range(len(EXPECTED))] == [n for *_, n in EXPECTED]


def row(result: RunResult, source: str) -> Row:
    (found,) = [r for r in result.rows if r.source == source]
    return found


@pytest.mark.parametrize(("source", "detail"), [
    ("case_001/77654033/CT2/ (series 2)",
     r"gap 202 mm between slice 0 and 1 .* expected 1\.25 .* 161 slice\(s\) missing"),
    ("case_020/ (series 5)", r"gap 5 mm between slice 1 and 2 .* expected 2\.5 ± 0\.23 mm: 1 slice\(s\) missing"),
    ("case_021/ (series 5)", r"member case_021/3023: pixel data ends after 312 of its 512 B"),
    ("case_024/ (series 5)", r"holds 2 different images \(case_024/2392, case_024/reexported\.dcm\)"),
    ("case_029/ (series 5)", r"no pixel decoder exists for transfer syntax 1\.2\.840\.10008\.1\.2\.4\.100"),
    ("case_030/ (series 5)", r"gantry tilt 15\.00°"),
    ("case_001/98892003/MR700/ (series 700)",
     r"split by image plane into 7 parts of 1, 1, 1, 1, 1, 1, 1 slice position\(s\), each fewer than "
     r"\[dicom\] min_slices = 4: a localizer or scout"),
    ("case_001/98892003/MR1/5641 (series 1)",
     r"^1 slice position\(s\), fewer than \[dicom\] min_slices = 4$"),
])
def test_rejections_say_what_was_measured(delivery: tuple[Path, Path, RunResult], source: str, detail: str) -> None:
    found = row(delivery[2], source)
    assert re.search(detail, found.detail), found.detail


def test_duplicates_and_splits_are_reported_as_warnings(delivery: tuple[Path, Path, RunResult]) -> None:
    result = delivery[2]
    assert "case_023/copy_of_slice.dcm = case_023/2392" in "; ".join(row(result, "case_023/ (series 5)").warnings)
    assert row(result, "case_023/ (series 5)").n_files == 6  # the copy is a member of the item it duplicates
    for echo in (1, 2):
        assert ("series split into 2 parts by echo (as dcm2niix)"
                in row(result, f"case_005/ (series 5, echo {echo})").warnings)


def stored(delivery: tuple[Path, Path, RunResult], source: str) -> tuple[np.ndarray, dict]:
    view = open_store(delivery[1])
    (item,) = [i for i in view.items if i.source == source]
    arr = view.array(item)
    return arr[...], dict(arr.attrs)


def their(delivery: tuple[Path, Path, RunResult], source: str, tmp: Path) -> list[Path]:
    """dcm2niix's NIfTI files for exactly the member files of one item (its derived _Eq/_Tilt copies left out)."""
    raw, _, result = delivery
    folder = tmp / "in"
    folder.mkdir()
    for m in files_of(row(result, source)):
        shutil.copyfile(raw / m, folder / m.replace("/", "_"))
    return [p for p in dcm2niix(folder, tmp / "out") if not re.search(r"_(Eq|Tilt|ROI)\d*_\d+\.nii$", p.name)]


CONTRACT = [
    "case_001/98892001/CT5N/ (series 5)",  # pydicom's multi-slice CT
    "case_002/fmri/ (series 5)",  # 4D: 3 time points x 5 slices
    "case_003/mosaic_1.dcm (series 5)",  # Siemens mosaic, one volume
    "case_004/bold/ (series 5)",  # Siemens mosaics, 3 volumes
    "case_005/ (series 5, echo 1)", "case_005/ (series 5, echo 2)",  # dcm2niix's _e1 / _e2 files
    "case_008/dwi/ (series 12)",  # nibabel's Siemens DWI mosaics, b=0 and b=1000
    "case_009/philips_mprage.dcm (series 301)",  # nibabel's Philips enhanced multi-frame MPRAGE
    "case_012/rle/ (series 5)",  # RLE-compressed slices
    "case_013/ (series 5)",  # slice normal pointing down: the slice axis flips into canonical z
    "case_014/ (series 5)",  # sagittal slices: the slice axis is canonical x
    "case_023/ (series 5)",  # with a duplicated slice
    "case_027/ (series 5)",  # spread over two folders
    "case_028/ (series 5)",  # without preamble or File Meta
]


@pytest.mark.parametrize("source", CONTRACT)
def test_store_equals_dcm2niix(delivery: tuple[Path, Path, RunResult], source: str, tmp_path: Path) -> None:
    ours, attrs = stored(delivery, source)
    (nifti,) = their(delivery, source, tmp_path)
    theirs, affine = canonical(nifti)
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(ours.astype(np.float64), theirs.astype(np.float64))
    np.testing.assert_allclose(np.array(attrs["affine"]), affine, atol=1e-3)
    np.testing.assert_allclose(attrs["spacing"], np.sqrt((affine[:3, :3] ** 2).sum(axis=0)), atol=1e-3)
    assert attrs["orientation"] == "RAS"


def test_rt_dose_differs_from_dcm2niix_only_where_dcm2niix_ignores_the_dose_grid(
        delivery: tuple[Path, Path, RunResult], tmp_path: Path) -> None:
    # dcm2niix ("Unable to determine slice thickness") stacks RT Dose frames 1 mm apart and keeps raw integers;
    # the GridFrameOffsetVector says 5 mm and DoseGridScaling turns the integers into Gy.
    ours, attrs = stored(delivery, "case_006/rtdose.dcm (series 1)")
    (nifti,) = their(delivery, "case_006/rtdose.dcm (series 1)", tmp_path)
    theirs, affine = canonical(nifti)
    scaling = float(pydicom.dcmread(PYDICOM_DATA / "rtdose.dcm", stop_before_pixels=True).DoseGridScaling)
    np.testing.assert_allclose(ours, theirs * scaling, rtol=1e-6)
    np.testing.assert_allclose(np.array(attrs["affine"])[:3, :2], affine[:3, :2], atol=1e-3)  # in-plane agrees
    assert attrs["spacing"][2] == pytest.approx(5.0) and np.linalg.norm(affine[:3, 2]) == pytest.approx(1.0)


def test_frames_without_geometry_have_dcm2niix_voxels(delivery: tuple[Path, Path, RunResult], tmp_path: Path) -> None:
    ours, attrs = stored(delivery, "case_011/SC_rgb_rle_2frame.dcm")
    (nifti,) = their(delivery, "case_011/SC_rgb_rle_2frame.dcm", tmp_path)
    theirs, _ = canonical(nifti)  # dcm2niix: "Bogus spatial matrix"; only the voxel order is comparable
    np.testing.assert_array_equal(ours, theirs)


def test_encodings_of_one_series_store_the_same_array(delivery: tuple[Path, Path, RunResult]) -> None:
    plain, attrs = stored(delivery, "case_001/98892001/CT5N/ (series 5)")
    for source in ("case_012/rle/ (series 5)", "case_028/ (series 5)", "case_027/ (series 5)"):
        other, other_attrs = stored(delivery, source)
        np.testing.assert_array_equal(other, plain)
        assert other_attrs["affine"] == attrs["affine"]


def test_radiographs_are_2d_images_in_one_stack(delivery: tuple[Path, Path, RunResult]) -> None:
    rows = [r for r in delivery[2].rows if r.source.startswith("case_001/77654033/CR")]
    assert len(rows) == 3 and {r.array for r in rows} == {"stacks/1x16x16_float32"}  # issue 5's (N, C, H, W) stacks
    assert sorted(r.slot for r in rows) == [0, 1, 2] and all(r.spacing == (0.1, 0.1) for r in rows)
    view = open_store(delivery[1])
    for r in rows:
        (item,) = [i for i in view.items if i.source == r.source]
        image = view.array(item)[item.slot]
        path = delivery[0] / r.source
        ds = pydicom.dcmread(path)
        np.testing.assert_allclose(image[0], pydicom.pixels.apply_modality_lut(ds.pixel_array, ds), rtol=1e-6)
        assert any(w.startswith("MONOCHROME1") for w in r.warnings)


def test_every_pydicom_dicomdirtests_series_equals_dcm2niix_with_min_slices_1(tmp_path: Path, scheduler: str) -> None:
    """The contract on each of pydicom's dicomdirtests series, not only CT5N: with `[dicom] min_slices = 1` the
    localizers (rejected `series_too_short` by default) are stored too, and every stored volume equals dcm2niix
    on exactly its member files. CT2 stays rejected: dcm2niix converts it, but says the result is not a volume."""
    raw = tmp_path / "raw"
    shutil.copytree(DICOMDIR_TESTS, raw / "case_001")
    store = tmp_path / "stores" / "ddt.zarr"
    spec = write_spec(tmp_path / "manifests" / "ddt" / "delivery.toml", raw=raw, store=store, name="ddt",
                      labels=False, extra="\n[dicom]\nmin_slices = 1\n")
    result = convert_delivery(spec, scheduler=scheduler)
    volumes = [r for r in result.rows if r.status == "ok" and r.members]
    # CT5N, CT2N's two planes, MR1's three series, MR2's seven single slices, MR700's seven planes
    assert len(volumes) == 20
    assert {r.source.split("/")[2] for r in volumes} == {"CT5N", "CT2N", "MR1", "MR2", "MR700"}
    for r in volumes:
        ours, attrs = stored((raw, store, result), r.source)
        work = tmp_path / "cmp" / re.sub(r"\W+", "_", r.source)
        work.mkdir(parents=True)
        (nifti,) = their((raw, store, result), r.source, work)
        theirs, affine = canonical(nifti)
        assert ours.shape == theirs.shape, r.source
        np.testing.assert_array_equal(ours.astype(np.float64), theirs.astype(np.float64), err_msg=r.source)
        np.testing.assert_allclose(np.array(attrs["affine"]), affine, atol=1e-3, err_msg=r.source)
    (ct2,) = [r for r in result.rows if r.source.startswith("case_001/77654033/CT2/")]
    assert (ct2.status, ct2.reason) == ("rejected", "series_missing_slices")
    said = subprocess.run([str(DCM2NIIX), "-z", "n", "-b", "n", "-o", str(tmp_path),
                           str(raw / "case_001/77654033/CT2")],
                          capture_output=True, text=True, timeout=120)
    assert "Interslice distance varies" in said.stdout  # dcm2niix's own warning: the slices are not equidistant
