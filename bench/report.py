"""QC report thumbnails: three mid-planes read from the store against decoding the whole volume first.

Input (generated once, cached under WORKDIR/report/): one 512x512x300 int16
CT-like volume (157 MB decoded) as a labzarr-style array `(1, X, Y, Z)`, 64^3
chunks, blosc-zstd level 5 + crc32c. Rows are milliseconds per thumbnail
(median of 5): the straightforward path reads the whole array and slices it
(the baseline), labzarr's `thumbnail` reads only the chunks the three
mid-planes cross. Both then window and resize the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from common import Result, median_p90, time_calls

from labzarr.convert.qc.thumbs import thumbnail, volume_thumbnail
from labzarr.convert.spec import StoreSpec
from labzarr.convert.write.arrays import codecs

NAME = "report thumbnails: ms per 512x512x300 int16 volume (64^3 chunks, blosc-zstd-5 + crc32c)"
SHAPE = (512, 512, 300)
SPACING = (0.7, 0.7, 1.5)


def _volume(workdir: Path) -> zarr.Array:
    path = workdir / "report" / "ct.zarr"
    if (path / "zarr.json").exists():
        return zarr.open_array(path, mode="r")
    spec = StoreSpec(chunks=(64, 64, 64), compressor="blosc-zstd", level=5, checksum=True)
    arr = zarr.create_array(path, shape=(1, *SHAPE), dtype=np.int16, chunks=(1, 64, 64, 64),
                            compressors=codecs(spec), overwrite=True)
    X, Y, Z = SHAPE
    for z0 in range(0, Z, 64):
        z1 = min(Z, z0 + 64)
        x, y, z = np.ogrid[:X, :Y, z0:z1]
        body = ((x - X / 2) / (0.4 * X)) ** 2 + ((y - Y / 2) / (0.3 * Y)) ** 2 + ((z - Z / 2) / (0.47 * Z)) ** 2 < 1
        noise = np.random.default_rng(z0).normal(0, 20, body.shape)
        arr[0, :, :, z0:z1] = (np.where(body, 40, -1000) + noise).astype(np.int16)
    return arr


class _InMemory:
    """The whole volume decoded into memory, sliced like a zarr array (what a naive thumbnailer does)."""

    def __init__(self, data: np.ndarray) -> None:
        self.data, self.shape, self.ndim = data, data.shape, data.ndim

    def __getitem__(self, key: object) -> np.ndarray:
        return self.data[key]  # type: ignore[index]


def run(workdir: Path) -> list[Result]:
    arr = _volume(workdir)
    full = time_calls(lambda: volume_thumbnail(_InMemory(arr[...]), SPACING), 5)  # type: ignore[arg-type]
    planes = time_calls(lambda: thumbnail(arr, slot=None, spacing=SPACING), 5)
    (f_med, f_p90), (p_med, p_p90) = median_p90(full), median_p90(planes)
    return [
        Result("decode whole volume, then three mid-planes", f_med * 1e3, "ms", higher_is_better=False, baseline=True,
               note=f"p90 {f_p90 * 1e3:.0f} ms"),
        Result("labzarr thumbnail: read three mid-planes from the store", p_med * 1e3, "ms", higher_is_better=False,
               note=f"p90 {p_p90 * 1e3:.0f} ms"),
    ]
