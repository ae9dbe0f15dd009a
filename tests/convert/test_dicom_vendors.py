"""Vendor DICOM through a whole conversion, against the dcm2niix binary: Philips scaling, a DWI's trace volume
kept apart (or dropped), and an enhanced file holding two image types split into two items.

One small delivery, converted twice on the session's cluster: with the defaults, and with
`philips_scaling = "display"` and `derived = "drop"`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import RunResult, convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.loaders import open_store

from ..dicom_data import DCM2NIIX, canonical
from ..dicom_vendors import philips_dwi, philips_series, two_type_enhanced


def build(raw: Path) -> Path:
    philips_series(raw / "case_001" / "t1")
    philips_dwi(raw / "case_002" / "dwi")
    two_type_enhanced(raw / "case_003")
    return raw


def reference(folder: Path, out: Path, *flags: str) -> dict[str, np.ndarray]:
    """dcm2niix's outputs for `folder` by file-name suffix after the series name ("" for the main file)."""
    out.mkdir(parents=True)
    done = subprocess.run([str(DCM2NIIX), *flags, "-z", "n", "-b", "n", "-f", "s", "-o", str(out), str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return {p.stem[1:]: canonical(p)[0] for p in sorted(out.glob("*.nii"))}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> Iterator[dict[str, tuple[RunResult, Path]]]:
    root = tmp_path_factory.mktemp("vendors")
    raw = build(root / "raw")
    out = {}
    # "default": every default but the descriptors, kept so the sidecar comparison covers them too
    for name, extra in (("default", '\n[dicom]\ndescriptors = "keep"\n'),
                        ("other", '\n[dicom]\nphilips_scaling = "display"\nderived = "drop"\n')):
        store = root / "stores" / f"{name}.zarr"
        spec = write_spec(root / "manifests" / name / "delivery.toml", raw=raw, store=store, name=name,
                          labels=False, extra=extra)
        out[name] = (convert_delivery(spec, scheduler=scheduler), store)
    out["raw"] = (out["default"][0], raw)
    yield out


def arrays(store: Path) -> dict[str, np.ndarray]:
    """The stored voxels of every item in the store's index, by source."""
    view = open_store(store)
    return {i.source: np.asarray(view.array(i)[...]) for i in view.items}


def attrs_of(store: Path, source: str) -> dict[str, object]:
    view = open_store(store)
    (item,) = [i for i in view.items if i.source == source]
    return dict(view.array(item).attrs)


def test_philips_values_and_attributes_as_dcm2niix(converted, tmp_path: Path) -> None:
    raw = converted["raw"][1]
    store, other_store = converted["default"][1], converted["other"][1]
    folder = raw / "case_001" / "t1"
    source = "case_001/t1/ (series 5)"
    np.testing.assert_allclose(arrays(store)[source], reference(folder, tmp_path / "y")[""], rtol=1e-6)
    np.testing.assert_allclose(arrays(other_store)[source], reference(folder, tmp_path / "n", "-p", "n")[""],
                               rtol=1e-6)
    for path, flag in ((store, 1), (other_store, 0)):
        attrs = attrs_of(path, source)
        assert attrs["metadata"]["UsePhilipsFloatNotDisplayScaling"] == flag
        assert attrs["metadata"]["PhilipsScaleSlope"] == pytest.approx(0.0125)


def test_trace_volume_is_its_own_item_as_dcm2niix_removes_it(converted, tmp_path: Path) -> None:
    raw = converted["raw"][1]
    default, store = converted["default"]
    ref = reference(raw / "case_002" / "dwi", tmp_path / "dwi", "-i", "n")
    ours = arrays(store)
    rows = {r.item_id: r for r in default.rows if r.source.startswith("case_002/")}
    assert sorted(rows) == ["case2", "case2~trace"] and all(r.status == "ok" for r in rows.values())
    # The 4D equals dcm2niix's; the trace equals the volume its _ADC file holds beyond the 4D.
    np.testing.assert_array_equal(ours[rows["case2"].source], ref[""])
    assert ref["_ADC"].shape[0] == ref[""].shape[0] + 1
    np.testing.assert_array_equal(ours[rows["case2~trace"].source], ref["_ADC"][-1:])
    assert rows["case2"].shape[0] == 4 and rows["case2~trace"].source == "case_002/dwi/ (series 5, trace)"
    assert any("appear to be a trace" in w and "case2~trace" in w for w in rows["case2"].warnings)
    assert rows["case2"].n_files + rows["case2~trace"].n_files == 25


def test_derived_drop_leaves_the_trace_out(converted, tmp_path: Path) -> None:
    other, store = converted["other"]
    (row,) = [r for r in other.rows if r.source.startswith("case_002/")]
    assert (row.item_id, row.status, row.shape[0], row.n_files) == ("case2", "ok", 4, 25)
    assert any('left out ([dicom] derived = "drop")' in w for w in row.warnings)
    ref = reference(converted["raw"][1] / "case_002" / "dwi", tmp_path / "dwi", "-i", "y")
    np.testing.assert_array_equal(arrays(store)[row.source], ref[""])


def test_an_enhanced_file_of_two_types_is_two_items(converted, tmp_path: Path) -> None:
    """Each part equals dcm2niix's file for it (`` and `_real`), each with its own rescale: precise values as
    dcm2niix's default, display values as -p n."""
    raw = converted["raw"][1]
    sources = ["case_003/fieldmap.dcm (series 301, echo 1)", "case_003/fieldmap.dcm (series 301, echo 2, fieldmap)"]
    for (result, store), flags in ((converted["default"], ()), (converted["other"], ("-p", "n"))):
        rows = [r for r in result.rows if r.source.startswith("case_003/")]
        assert [(r.source, r.status) for r in rows] == [(s, "ok") for s in sources]
        assert all(r.members == ("case_003/fieldmap.dcm",) for r in rows) and rows[0].sha256 != rows[1].sha256
        assert any("split into 2 parts by echo and image type" in w for w in rows[0].warnings)
        ref = reference(raw / "case_003", tmp_path / "-".join(("fm", *flags)), *flags)
        ours = arrays(store)
        for source, theirs in zip(sources, (ref[""], ref["_real"])):
            np.testing.assert_allclose(ours[source], theirs, rtol=1e-6)


def test_bvals_and_bvecs_equal_dcm2niix_after_the_canonical_rotation(converted, tmp_path: Path) -> None:
    """dcm2niix's .bvec is along its own NIfTI's voxel axes in FSL's convention (the first component negated
    when the affine's determinant is positive); labzarr's `bvecs` are along the stored canonical axes. Both are
    turned into world (RAS) directions and compared, as are the b-values, volume by volume."""
    default, store = converted["default"]
    out = tmp_path / "bvec"
    out.mkdir()
    done = subprocess.run([str(DCM2NIIX), "-z", "n", "-b", "n", "-f", "s", "-o", str(out),
                           str(converted["raw"][1] / "case_002" / "dwi")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    (nii,) = [p for p in out.glob("*.nii") if p.with_suffix(".bvec").exists()]
    bvals = np.loadtxt(nii.with_suffix(".bval"), ndmin=1)
    bvecs = np.loadtxt(nii.with_suffix(".bvec"), ndmin=2)  # 3 rows, one column per volume
    affine = nib.load(nii).affine[:3, :3]
    fsl = bvecs.copy()
    if np.linalg.det(affine) > 0:
        fsl[0] = -fsl[0]
    theirs = (affine / np.linalg.norm(affine, axis=0)) @ fsl  # world RAS, one column per volume

    (row,) = [r for r in default.rows if r.item_id == "case2"]
    view = open_store(store)
    (item,) = [i for i in view.items if i.item_id == "case2"]
    stored = np.array(view.array(item).attrs["affine"], dtype=np.float64)[:3, :3]
    ours = (stored / np.linalg.norm(stored, axis=0)) @ np.array(item.metadata["bvecs"], dtype=np.float64).T
    np.testing.assert_allclose(np.array(item.metadata["bvals"]), bvals, atol=1e-6)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    assert np.abs(ours).max() > 0.5 and not np.allclose(ours[:, 1:], ours[:, 1:2])  # real, distinct directions
    assert list(dict(row.metadata)["bvals"]) == list(item.metadata["bvals"])  # the row says what the index says


SIDECAR = ("Modality", "Manufacturer", "ManufacturersModelName", "MagneticFieldStrength", "SeriesDescription",
           "ProtocolName", "ImageType", "EchoTime", "RepetitionTime", "InversionTime", "FlipAngle", "SliceThickness")


@pytest.mark.parametrize("folder", ["case_001/t1", "case_002/dwi"])
def test_acquisition_metadata_equals_dcm2niix_sidecar(converted, tmp_path: Path, folder: str) -> None:
    """Every allow-listed name labzarr and dcm2niix's BIDS sidecar both give has the same value (units: s, deg).
    Manufacturer is kept as the file says it; dcm2niix shortens it to the vendor's name, a prefix of it."""
    default, store = converted["default"]
    out = tmp_path / "json"
    out.mkdir()
    done = subprocess.run([str(DCM2NIIX), "-z", "n", "-b", "y", "-ba", "n", "-f", "s%s_e%e", "-o", str(out),
                           str(converted["raw"][1] / folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    sidecars = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    view = open_store(store)
    items = [i for i in view.items if i.source.startswith(folder.rstrip("/") + "/") or i.source == folder]
    assert items and sidecars
    compared: set[str] = set()
    for item in items:
        meta = item.metadata
        # the sidecar of the same echo and image type as the item (an enhanced file's parts differ in both)
        same = [s for s in sidecars if s.get("EchoTime") == meta.get("EchoTime")
                and [t.upper() for t in s.get("ImageType", [])][:2] == list(meta.get("ImageType", ()))[:2]]
        assert same, (item.source, meta, [(s.get("EchoTime"), s.get("ImageType")) for s in sidecars])
        for name in SIDECAR:
            if name in meta and name in same[0]:
                want = same[0][name]
                got = meta[name]
                if name == "Manufacturer":
                    assert str(got).upper().startswith(str(want).upper()), (item.source, got, want)
                elif isinstance(want, float | int) and not isinstance(want, bool):
                    assert got == pytest.approx(want, rel=1e-6), (item.source, name)
                elif isinstance(want, list):
                    assert [str(v).upper() for v in got] == [str(v).upper() for v in want], (item.source, name)
                else:
                    assert str(got) == str(want), (item.source, name)
                compared.add(name)
    # series built from real CT slices: what they carry of the sidecar's names
    assert {"Modality", "Manufacturer", "ManufacturersModelName", "ImageType", "SeriesDescription"} <= compared
