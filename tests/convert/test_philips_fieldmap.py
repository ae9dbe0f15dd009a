"""A Philips B0 fieldmap in Hz equals dcm2niix's voxels to float32 rounding, through a whole conversion.

dcm2niix writes Philips' precise values with scl_slope = P(1) - P(0) and scl_inter = P(0), P evaluated in
single precision (readers/_dicom_layout.py, `_precise_scale`). With the fieldmap's RS = 0.2442, RI = -500 and
SS = 4.095, that slope is 5.8e-6 (relative) off the exact 1 / SS, so the exact precise values differ from
dcm2niix's by up to 0.006 Hz; labzarr writes dcm2niix's. The file is dcm_qa_enh's own where its mirror is
beside the project, and one built with pydicom with the same scale always.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.loaders import open_store

from .. import qa_corpora
from ..dicom_vendors import HZ_FIELDMAP_SCALE, hz_fieldmap
from .test_dicom_vendors import reference

CORPUS_FILE = "In/Philips/IM_0027_fMAP.dcm"


def _corpus_file(dest: Path) -> Path:
    corpus = qa_corpora.find("dcm_qa_enh")
    if corpus is None or CORPUS_FILE not in {p for p, _, _ in corpus.files}:
        pytest.skip(f"dcm_qa_enh's {CORPUS_FILE} is not in {qa_corpora.DEFAULT_MIRRORS}: the built file covers it")
    dest.mkdir(parents=True)
    (dest / "IM_0027_fMAP.dcm").write_bytes(qa_corpora.read_blob(corpus, CORPUS_FILE))
    return dest / "IM_0027_fMAP.dcm"


def _exact_precise(path: Path) -> np.ndarray:
    """The fieldmap frames' exact precise values, (stored x RS + RI) / (RS x SS) in float64, as frames."""
    ds = pydicom.dcmread(path)
    rs, ri, ss = HZ_FIELDMAP_SCALE
    return (ds.pixel_array.astype(np.float64) * rs + ri) / (rs * ss)


@pytest.mark.parametrize("source", ["built", "corpus"])
def test_hz_fieldmap_equals_dcm2niix(tmp_path: Path, scheduler: str, source: str) -> None:
    folder = tmp_path / "raw" / "case_001"
    path = hz_fieldmap(folder) if source == "built" else _corpus_file(folder)
    spec = write_spec(tmp_path / "manifests" / "fmap" / "delivery.toml", raw=tmp_path / "raw",
                      store=tmp_path / "fmap.zarr", name="fmap", labels=False)
    result = convert_delivery(spec, scheduler=scheduler)
    ours = {r.source: r for r in result.rows}
    assert all(r.status == "ok" for r in ours.values()), [(r.source, r.reason, r.detail) for r in ours.values()]
    view = open_store(tmp_path / "fmap.zarr")
    stored = {i.source: np.asarray(view.array(i)[...]) for i in view.items}
    expected = reference(folder, tmp_path / "d2n")
    # One item per dcm2niix output: the built file is one series; the corpus file's magnitude (e1) and its
    # fieldmap in Hz (e2_fieldmaphz), matched by shape and content.
    assert len(stored) == len(expected)
    hz = [data for data in stored.values() if data.dtype == np.float32 and data.min() < -100 < 100 < data.max()]
    assert len(hz) == 1
    (ref,) = [r for r in expected.values() if r.shape == hz[0].shape and r.min() < -100 < 100 < r.max()]
    np.testing.assert_array_max_ulp(hz[0], ref.astype(np.float32), maxulp=1)
    # The exact precise values are not dcm2niix's: the comparison above tells the two scales apart.
    exact = np.sort(_exact_precise(path).ravel())
    hz_values = np.sort(hz[0].ravel().astype(np.float64))
    if exact.size == hz_values.size:  # the built file: every frame is the fieldmap
        assert np.abs(exact - hz_values).max() > 1e-3
