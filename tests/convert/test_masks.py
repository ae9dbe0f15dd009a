"""The mask index (counts, dtype, seeded locations) on real streamed NIfTI slabs, and its memory bound."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert.masks import ClassLocator, MaskScan
from labzarr.readers import Limits, NiftiReader, Reason, Rejected, open_source, read_head

MiB = 1 << 20


def _nifti(path: Path, data: np.ndarray, affine: np.ndarray | None = None) -> Path:
    path.write_bytes(gzip.compress(nib.Nifti1Image(data, np.eye(4) if affine is None else affine).to_bytes(),
                                   compresslevel=1, mtime=0))
    return path


def _index(path: Path, chunks: tuple[int, ...], *, cap: int = 10_000, classes=None, policy="reject"):
    source = open_source(NiftiReader(), path, Limits(), read_head(path))
    scan = MaskScan(classes=classes, policy=policy)
    for slab in source.slabs(chunks):
        scan.update(slab)
    summary = scan.outcome()
    locator = ClassLocator(summary.counts, cap=cap, seed=7)
    for slab in source.slabs(chunks):
        locator.update(type(slab)(region=slab.region, data=slab.data.astype(summary.dtype)))
    return summary, *locator.locations()


def test_counts_dtype_and_locations_match_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    mask = rng.choice([0, 1, 2, 900], size=(30, 20, 17), p=[0.9, 0.07, 0.029, 0.001]).astype(np.int32)
    # stored LPS: canonical RAS flips x and y, so locations are checked against the canonical voxels
    path = _nifti(tmp_path / "m.nii.gz", mask, np.diag([-1.0, -1.0, 1.0, 1.0]))
    canon = np.asarray(nib.as_closest_canonical(nib.load(path)).dataobj)
    summary, locations, ranges = _index(path, (1, 30, 20, 4), cap=50)
    values, counts = np.unique(canon, return_counts=True)
    assert summary.counts == tuple(zip(values.tolist(), counts.tolist()))
    assert summary.dtype == np.uint16  # 900 needs 16 bits; no negative class
    for value, voxels, start, stop in ranges:
        block = locations[start:stop]
        assert len(block) == min(voxels, 50)
        assert (canon[block[:, 0], block[:, 1], block[:, 2]] == value).all()


@pytest.mark.parametrize(("data", "kwargs", "reason", "text"), [
    pytest.param(np.full((4, 4, 4), 0.25, np.float32), {}, Reason.CORRUPT_DATA, "64 of 64 mask voxels are not integers",
                 id="fractional"),
    pytest.param(np.full((4, 4, 4), np.nan, np.float32), {}, Reason.NON_FINITE, "64 of 64 mask voxels are NaN/Inf",
                 id="nan"),
    pytest.param(np.full((4, 4, 4), 5, np.uint8), {"classes": [0, 1]}, Reason.CORRUPT_DATA,
                 "classes 5 (64 voxels) not in [masks] classes [0, 1]", id="unexpected"),
])
def test_bad_mask_values(tmp_path: Path, data, kwargs, reason, text) -> None:
    with pytest.raises(Rejected) as err:
        _index(_nifti(tmp_path / "m.nii.gz", data), (1, 4, 4, 4), **kwargs)
    assert err.value.reason == reason and text in err.value.detail


def test_negative_classes_get_a_signed_dtype(tmp_path: Path) -> None:
    data = np.zeros((4, 4, 4), np.int16)
    data[0] = -1  # an "ignore" label
    summary, _, _ = _index(_nifti(tmp_path / "m.nii.gz", data), (1, 4, 4, 4))
    assert summary.dtype == np.int8 and dict(summary.counts) == {-1: 16, 0: 48}


def test_peak_memory_while_indexing_a_large_mask_is_bounded(tmp_path: Path) -> None:
    """A 512x512x256 uint8 mask (64 MiB) indexed in slabs of 16 planes (4 MiB): Python/numpy peak stays < 32 MiB.

    tracemalloc sees every numpy buffer and the stream's bytearrays; the bound is half the mask, so
    holding it whole even once (or one int64 copy of a slab) would fail.
    """
    mask = np.zeros((512, 512, 256), np.uint8)
    mask[100:300, 200:260, 50:200] = 1  # a large structure, ~1.8 M voxels
    mask[400:402, 10:12, 5:7] = 2  # and a tiny one
    path = _nifti(tmp_path / "big.nii.gz", mask)
    voxels = {0: int((mask == 0).sum()), 1: int((mask == 1).sum()), 2: 8}
    del mask
    tracemalloc.start()
    try:
        summary, locations, ranges = _index(path, (1, 64, 64, 16))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dict(summary.counts) == voxels
    assert [(v, n, b - a) for v, n, a, b in ranges] == [(0, voxels[0], 10_000), (1, voxels[1], 10_000), (2, 8, 8)]
    assert peak < 32 * MiB, f"peak {peak / MiB:.1f} MiB"
