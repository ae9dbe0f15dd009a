"""Streaming NIfTI: slabs are chunk-aligned, cover the canonical array once, and equal nibabel's canonical voxels."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.readers import Limits, NiftiReader, Reason, Rejected, read_head

from ..conftest import nib_load

# Axis permutations and flips: on-disk z lands on canonical x, y or z, reversed or not.
AFFINES = {
    "ras": np.diag([1.0, 1.0, 1.0, 1.0]),
    "lps": np.diag([-0.8, -0.8, 2.5, 1.0]),
    "z-flipped": np.diag([1.0, 1.0, -3.0, 1.0]),
    "sagittal": np.array([[0, 0, -2.0, 0], [1.0, 0, 0, 0], [0, -1.0, 0, 0], [0, 0, 0, 1]]),
    "coronal": np.array([[1.0, 0, 0, 0], [0, 0, 1.5, 0], [0, -1.0, 0, 0], [0, 0, 0, 1]]),
}


def _write(tmp: Path, data: np.ndarray, affine: np.ndarray, *, gz: bool = True,
           scale: tuple[float, float] | None = None, dtype: str | None = None) -> Path:
    img = nib.Nifti1Image(data, affine)
    if dtype:
        img.header.set_data_dtype(np.dtype(dtype))
    if scale:
        img.header.set_slope_inter(*scale)
    blob = bytes(img.to_bytes())
    path = tmp / ("v.nii.gz" if gz else "v.nii")
    path.write_bytes(gzip.compress(blob, mtime=0) if gz else blob)
    return path


def _canonical(path: Path) -> np.ndarray:
    img = nib.as_closest_canonical(nib_load(path))
    data = np.asanyarray(img.dataobj)
    if data.dtype.names:
        data = np.stack([data[n] for n in data.dtype.names], axis=-1)
    spatial = data.shape[:3] + (1,) * (3 - min(3, data.ndim))
    return np.moveaxis(data.reshape(spatial + (-1,), order="F"), 3, 0)


def _stream(path: Path, chunks: tuple[int, ...]) -> tuple[np.ndarray, list[tuple[slice, ...]]]:
    source = NiftiReader().open(path, Limits(), read_head(path))
    h = source.header
    out = np.full(h.shape, 0, dtype=h.dtype)
    seen = np.zeros(h.shape, dtype=np.int8)
    regions = []
    for slab in source.slabs(chunks):
        assert slab.data.dtype == h.dtype and slab.data.shape == tuple(r.stop - r.start for r in slab.region)
        out[slab.region] = slab.data
        seen[slab.region] += 1
        regions.append(slab.region)
    assert (seen == 1).all(), "every voxel in exactly one slab"
    assert len(regions) == source.slab_count(chunks) * (3 if h.dtype == np.uint8 and h.shape[0] == 3 else 1)
    return out, regions


@pytest.mark.parametrize(("name", "dtype", "scale", "channels"), [
    pytest.param(name, dtype, scale, channels, id=f"{name}-{dtype}-{'scaled' if scale else 'raw'}-c{channels}")
    for name, (dtype, scale, channels) in itertools.product(AFFINES, [
        ("<i2", None, 1), (">i2", None, 2), ("<u1", (0.5, -3.0), 1), (">f4", (2.0, 1.0), 1), ("<f8", None, 3),
    ])
])
def test_slabs_equal_closest_canonical(tmp_path: Path, name: str, dtype: str, scale, channels: int) -> None:
    rng = np.random.default_rng(7)
    shape = (13, 11, 17) + ((channels,) if channels > 1 else ())
    path = _write(tmp_path, rng.integers(0, 200, shape).astype(dtype), AFFINES[name], scale=scale, dtype=dtype)
    chunks = (1, 4, 5, 3)
    got, regions = _stream(path, chunks)
    want = _canonical(path)
    assert got.dtype == (np.dtype(dtype).newbyteorder("=") if not scale else
                         np.float64 if np.dtype(dtype).itemsize == 8 else np.float32)
    np.testing.assert_array_equal(got, want.astype(got.dtype))
    source = NiftiReader().open(path, Limits(), read_head(path))
    axis = source.header.stream_axis
    assert axis == int(nib.orientations.io_orientation(AFFINES[name])[2, 0]) + 1
    for region in regions:  # chunk-aligned along the stream axis; whole extent elsewhere
        r = region[axis]
        assert r.start % chunks[axis] == 0 and (r.stop % chunks[axis] == 0 or r.stop == got.shape[axis])
        assert all(region[i] == slice(0, got.shape[i]) for i in range(1, 4) if i != axis)


def test_rgb24_fields_become_channels(tmp_path: Path) -> None:
    rgb = np.zeros((6, 5, 4), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1")])
    rng = np.random.default_rng(1)
    for f in "RGB":
        rgb[f] = rng.integers(0, 255, rgb.shape)
    path = _write(tmp_path, rgb, AFFINES["lps"], gz=False)
    got, _ = _stream(path, (1, 2, 2, 2))
    np.testing.assert_array_equal(got, _canonical(path))


def test_parts_cover_the_volume_and_only_the_last_validates_the_stream(tmp_path: Path) -> None:
    data = np.arange(12 * 10 * 16, dtype=np.int16).reshape(12, 10, 16)
    path = _write(tmp_path, data, AFFINES["z-flipped"])
    source = NiftiReader().open(path, Limits(), read_head(path))
    chunks = (1, 4, 4, 4)
    n = source.slab_count(chunks)
    assert n == 4
    whole = np.zeros(source.header.shape, np.int16)
    for part in ((0, 1), (1, 3), (3, None)):
        for slab in source.slabs(chunks, first=part[0], stop=part[1]):
            whole[slab.region] = slab.data
    np.testing.assert_array_equal(whole, _canonical(path))
    # Cut off the gzip trailer: the first part (which stops early) cannot tell, the last part rejects.
    path.write_bytes(path.read_bytes()[:-8])
    source = NiftiReader().open(path, Limits(), read_head(path))
    assert len(list(source.slabs(chunks, first=0, stop=2))) == 2
    with pytest.raises(Rejected) as info:
        list(source.slabs(chunks, first=2))
    assert info.value.reason is Reason.TRUNCATED
