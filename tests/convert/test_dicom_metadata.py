"""Siemens timing metadata against dcm2niix's BIDS sidecar, on nibabel's real Siemens DWI mosaics.

`PhaseEncodingDirection`, `EffectiveEchoSpacing`, `TotalReadoutTime` and a mosaic's `SliceTiming` come from the
CSA image header; labzarr gives them along its stored (canonical RAS) axes, dcm2niix along its own NIfTI's. Both
are turned into world directions (the phase encoding) or matched by slice position (the slice times) before
they are compared.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import convert_delivery, read_manifest
from labzarr.convert.demo import write_spec
from labzarr.store import open_store

from ..dicom_data import DCM2NIIX, NICOM_DATA

FILES = {"case_001": "siemens_dwi_1000.dcm.gz", "case_002": "siemens_dwi_0.dcm.gz"}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("siemens")
    for case, name in FILES.items():
        (root / "raw" / case).mkdir(parents=True)
        (root / "raw" / case / "mosaic.dcm").write_bytes(gzip.decompress((NICOM_DATA / name).read_bytes()))
        # both files together: one series of two volumes, b = 0 and b = 1000 (b-value and gradient in CSA only)
        (root / "raw" / "case_003" / f"{case}.dcm").parent.mkdir(parents=True, exist_ok=True)
        (root / "raw" / "case_003" / f"{case}.dcm").write_bytes((root / "raw" / case / "mosaic.dcm").read_bytes())
    store = root / "store.zarr"
    columns = ["PhaseEncodingDirection", "TotalReadoutTime", "SliceTiming"]
    spec = write_spec(root / "manifests" / "s" / "delivery.toml", raw=root / "raw", store=store, name="s",
                      labels=False, extra=f"[manifest]\nmetadata = {json.dumps(columns)}\n")
    result = convert_delivery(spec, scheduler=scheduler)
    assert all(r.status == "ok" for r in result.rows), [(r.source, r.reason, r.detail) for r in result.rows]
    return root, store, result.manifest


def _sidecar(folder: Path, out: Path) -> tuple[dict[str, object], np.ndarray]:
    out.mkdir(parents=True)
    done = subprocess.run([str(DCM2NIIX), "-z", "n", "-b", "y", "-ba", "n", "-f", "x", "-o", str(out), str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "x.json").read_text()), nib.load(out / "x.nii").affine[:3, :3]


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=0)


def _direction(code: str, axes: np.ndarray) -> np.ndarray:
    """The world direction of a BIDS phase-encoding code (`j-`) given a frame's axis directions (columns)."""
    return _unit(axes)[:, "ijk".index(code[0])] * (-1.0 if code.endswith("-") else 1.0)


@pytest.mark.parametrize("case", list(FILES))
def test_siemens_timing_equals_dcm2niix(converted, tmp_path: Path, case: str) -> None:
    root, store, _ = converted
    theirs, their_axes = _sidecar(root / "raw" / case, tmp_path / "d2n")
    view = open_store(store)
    (item,) = [i for i in view.items if i.source.startswith(case)]
    ours = item.metadata
    our_axes = np.array(view.array(item).attrs["affine"], dtype=np.float64)[:3, :3]
    for name in ("EchoTime", "RepetitionTime", "EffectiveEchoSpacing", "TotalReadoutTime"):
        assert ours[name] == pytest.approx(theirs[name], rel=1e-5), name
    np.testing.assert_allclose(_direction(str(ours["PhaseEncodingDirection"]), our_axes),
                               _direction(str(theirs["PhaseEncodingDirection"]), their_axes), atol=1e-6)
    assert str(ours["PhaseEncodingDirection"])[0] == ours["PhaseEncodingAxis"]
    # Slice times follow the stored slice axis: dcm2niix's k, reversed where the two axes point apart.
    their_times = np.array(theirs["SliceTiming"], dtype=np.float64)
    k = _unit(their_axes)[:, 2]
    ours_k = int(np.argmax(np.abs(_unit(our_axes).T @ k)))
    same_way = float(_unit(our_axes)[:, ours_k] @ k) > 0
    assert len(ours["SliceTiming"]) == item.shape[1 + ours_k] == len(their_times)
    np.testing.assert_allclose(ours["SliceTiming"], their_times if same_way else their_times[::-1], atol=1e-4)
    assert len(set(np.round(their_times, 3))) > len(their_times) // 2  # real, mostly distinct times


def test_timing_columns_in_the_manifest(converted) -> None:
    _, store, manifest = converted
    rows = [r for r in read_manifest(manifest) if r["status"] == "ok"]
    view = open_store(store)
    by_source = {i.source: i for i in view.items}
    for r in rows:
        meta = by_source[r["source"]].metadata
        assert r["meta.PhaseEncodingDirection"] == meta["PhaseEncodingDirection"]
        assert float(r["meta.TotalReadoutTime"]) == pytest.approx(meta["TotalReadoutTime"])
        assert [float(v) for v in r["meta.SliceTiming"].split()] == pytest.approx(list(meta["SliceTiming"]))


def test_siemens_csa_diffusion_equals_dcm2niix_bval_bvec(converted, tmp_path: Path) -> None:
    """B_value and DiffusionGradientDirection live only in Siemens' CSA header here; as dcm2niix, the b = 0
    volume has no gradient. Both sides' b-vectors turned into world RAS, dcm2niix's FSL convention undone."""
    root, store, _ = converted
    out = tmp_path / "d2n"
    out.mkdir()
    done = subprocess.run([str(DCM2NIIX), "-z", "n", "-b", "n", "-f", "x", "-o", str(out),
                           str(root / "raw" / "case_003")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    bvals = np.loadtxt(out / "x.bval", ndmin=1)
    fsl = np.loadtxt(out / "x.bvec", ndmin=2)
    affine = nib.load(out / "x.nii").affine[:3, :3]
    if np.linalg.det(affine) > 0:
        fsl[0] = -fsl[0]
    theirs = _unit(affine) @ fsl
    view = open_store(store)
    (item,) = [i for i in view.items if i.source.startswith("case_003")]
    assert item.shape[0] == 2
    stored = np.array(view.array(item).attrs["affine"], dtype=np.float64)[:3, :3]
    ours = _unit(stored) @ np.array(item.metadata["bvecs"], dtype=np.float64).T
    np.testing.assert_allclose(item.metadata["bvals"], bvals)
    assert list(bvals) == [0.0, 1000.0]
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    assert np.linalg.norm(ours[:, 1]) == pytest.approx(1.0, abs=1e-3)
