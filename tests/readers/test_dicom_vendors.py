"""Vendor conventions in DICOM decoding, checked against the dcm2niix binary on series built from real files.

Philips scaling: dcm2niix's default (-p y) writes precise "float" values through the private scale slope
(2005,100E); -p n writes the public rescale's "display" values. labzarr's `philips_scaling` is the same switch.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pydicom
import pytest

from labzarr.readers import Limits, SeriesRules, read_head
from labzarr.readers.dicom import Member, SeriesStack, Volume, layout_series, read_dicom_header, read_series

from ..dicom_data import DCM2NIIX, canonical
from ..dicom_vendors import philips_enhanced, philips_series

VARYING = ((2.5, -10.0, 0.0125), (3.0, 5.0, 0.02))  # (RS, RI, SS) alternating slice by slice


def convert(folder: Path, **rules: object) -> tuple[Volume, SeriesStack]:
    files = sorted(p for p in folder.iterdir() if p.suffix == ".dcm")
    members = [Member(str(p), p.name, read_dicom_header(p, read_head(p))) for p in files]
    stack = layout_series(members, SeriesRules(**rules))  # type: ignore[arg-type]
    return read_series(stack, Limits()), stack


def reference(folder: Path, out: Path, *flags: str) -> np.ndarray:
    """dcm2niix's voxels for `folder` (canonical, (C, X, Y, Z)), with `flags`."""
    out.mkdir(parents=True)
    done = subprocess.run([str(DCM2NIIX), *flags, "-z", "n", "-b", "n", "-o", str(out), str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    (nii,) = out.glob("*.nii")
    return canonical(nii)[0]


@pytest.mark.parametrize("build", [
    pytest.param(lambda d: philips_series(d), id="classic"),
    pytest.param(lambda d: philips_enhanced(d), id="enhanced"),
])
def test_philips_float_and_display_equal_dcm2niix(tmp_path: Path, build) -> None:
    build(tmp_path / "in")
    precise, stack = convert(tmp_path / "in")
    display, _ = convert(tmp_path / "in", philips_scaling="display")
    np.testing.assert_allclose(precise.data, reference(tmp_path / "in", tmp_path / "y"), rtol=1e-6)
    np.testing.assert_allclose(display.data, reference(tmp_path / "in", tmp_path / "n", "-p", "n"), rtol=1e-6)
    meta = dict(stack.metadata)
    assert meta["UsePhilipsFloatNotDisplayScaling"] == 1 and meta["PhilipsScaleSlope"] > 0
    assert dict(display.metadata)["UsePhilipsFloatNotDisplayScaling"] == 0
    # The two conventions differ by the constant factor RS x SS (precise = display / (RS x SS)).
    factor = meta["PhilipsRescaleSlope"] * meta["PhilipsScaleSlope"]
    assert display.data.any() and factor != 1
    np.testing.assert_allclose(display.data, precise.data * factor, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("build, scales", [
    pytest.param(lambda d: philips_series(d, scales=VARYING), [VARYING[k % 2] for k in range(5)], id="classic"),
    pytest.param(lambda d: philips_enhanced(d, vary=True), None, id="enhanced"),
])
def test_rescale_varying_frame_by_frame(tmp_path: Path, build, scales) -> None:
    """Display values equal dcm2niix -p n frame by frame; precise values are each frame's display value over its
    own RS x SS. (dcm2niix's default falls back to display values when the scale varies within an enhanced file,
    and scales a varying classic series twice; labzarr keeps each frame's precise scale.)"""
    out = build(tmp_path / "in")
    display, _ = convert(tmp_path / "in", philips_scaling="display")
    precise, _ = convert(tmp_path / "in")
    np.testing.assert_allclose(display.data, reference(tmp_path / "in", tmp_path / "n", "-p", "n"), rtol=1e-6)
    if scales is None:  # the enhanced file's own per-frame functional groups
        ds = pydicom.dcmread(out)
        scales = [(float(i.PixelValueTransformationSequence[0].RescaleSlope), 0.0,
                   float(i[0x2005140F].value[0][0x2005100E].value)) for i in ds.PerFrameFunctionalGroupsSequence]
    factor = np.array([rs * ss for rs, _, ss in scales])
    assert len(set(factor.tolist())) == 2
    # Slices run along canonical z in both series (axial classic slices; the enhanced file's sagittal frames
    # along x), in acquisition order.
    axis = 3 if display.data.shape[3] == len(scales) else 1
    shape = [1, 1, 1, 1]
    shape[axis] = len(scales)
    np.testing.assert_allclose(precise.data, display.data / factor.reshape(shape), rtol=1e-5)


def test_other_vendors_ignore_the_private_slope(tmp_path: Path) -> None:
    """2005,100E means a scale slope only on Philips files (dcm2niix reads it only for them)."""
    philips_series(tmp_path / "in")
    for p in (tmp_path / "in").iterdir():
        ds = pydicom.dcmread(p)
        ds.Manufacturer = "SIEMENS"
        ds.save_as(p)
    precise, stack = convert(tmp_path / "in")
    display, _ = convert(tmp_path / "in", philips_scaling="display")
    np.testing.assert_array_equal(precise.data, display.data)
    assert stack.metadata == ()
