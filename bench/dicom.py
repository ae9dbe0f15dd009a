"""DICOM series conversion: labzarr (1 and 2 workers) against dcm2niix and the straightforward pydicom path.

Input (generated once, cached under WORKDIR/dicom/): one CT series of 400
slices, 512x512, 12 bits stored in uint16 with RescaleIntercept -1024 (200 MB
of pixels), one file per slice as scanners write it, in shuffled file order.

Rows (pixel MB per wall second, one run, compare ratios):
- dcm2niix: the C converter everyone compares with, writing an uncompressed
  NIfTI (the baseline);
- straightforward: one process, pydicom `dcmread` of every file, sort by
  position, stack, canonical flip, one zarr write with the same codecs;
- labzarr with 1 and 2 workers (a ready LocalCluster: `execute`, which also
  hashes every file, reads every header on the workers and writes the manifest);
- header probing only (files/s): `read_dicom_header` on every file, one process;
- peak RSS of the largest labzarr worker above its baseline, next to the
  straightforward path's: slices stream in chunk-row slabs.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pydicom
from common import Result
from pydicom.uid import generate_uid

from labzarr.readers import read_dicom_header, read_head

NAME = "DICOM series: pixel MB/s, 400 slices of 512x512 uint16 CT (200 MB), 64^3 blosc-zstd-5 + crc32c"
SLICES, SIZE = 400, 512
MB = 1e6
TEMPLATE = Path(pydicom.__file__).parent / "data" / "test_files" / "CT_small.dcm"


def _series(root: Path) -> Path:
    folder = root / "raw" / "case_001" / "ct"
    if folder.exists() and len(list(folder.iterdir())) == SLICES:
        return folder.parent.parent
    shutil.rmtree(root / "raw", ignore_errors=True)
    folder.mkdir(parents=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from convert import _ct_planes  # the conversion section's CT-like planes

    template = pydicom.dcmread(TEMPLATE)
    series = generate_uid(entropy_srcs=["bench-dicom"])
    names = [f"IM{i:05d}" for i in range(SLICES)]
    random.Random(0).shuffle(names)  # file names say nothing about slice order, as on many PACS exports
    for z0 in range(0, SLICES, 32):
        planes = _ct_planes((SIZE, SIZE, SLICES), 1, z0, min(SLICES, z0 + 32))
        for dz in range(planes.shape[2]):
            k = z0 + dz
            ds = template.copy()
            ds.SeriesInstanceUID = series
            ds.SOPInstanceUID = generate_uid(entropy_srcs=["bench-dicom", str(k)])
            ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
            ds.InstanceNumber = k + 1
            ds.Rows = ds.Columns = SIZE
            ds.PixelSpacing = [0.7, 0.7]
            ds.ImagePositionPatient = [-179.2, -179.2, -250.0 + 1.25 * k]
            ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
            ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
            ds.PixelData = (np.clip(planes[:, :, dz].T.astype(np.int32) + 1024, 0, 4095)).astype(np.uint16).tobytes()
            ds.save_as(folder / names[k], enforce_file_format=True)
    return folder.parent.parent


def _dcm2niix(folder: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "dcm2niix"), "-z", "n", "-b", "n", "-o", str(out), str(folder)],
                   check=True, capture_output=True)
    return time.perf_counter() - t


def _straightforward(folder: Path, store: Path) -> float:
    """pydicom dcmread of every file, sort, stack, flip to canonical, one zarr write: wall seconds."""
    import zarr

    from labzarr.convert.spec import StoreSpec
    from labzarr.convert.write.arrays import codecs

    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    dss = sorted((pydicom.dcmread(p) for p in folder.iterdir()), key=lambda d: float(d.ImagePositionPatient[2]))
    vol = np.stack([d.pixel_array.astype(np.int16) - 1024 for d in dss], axis=-1)  # (rows, cols, z)
    data = np.ascontiguousarray(vol.transpose(1, 0, 2)[::-1, ::-1, :])[np.newaxis]  # LPS -> RAS: x, y flip
    spec = StoreSpec(chunks=(64, 64, 64), compressor="blosc-zstd", level=5, checksum=True)
    arr = zarr.create_array(zarr.storage.LocalStore(store), name="v", shape=data.shape, dtype=data.dtype,
                            chunks=(1, 64, 64, 64), compressors=codecs(spec), fill_value=0, overwrite=True)
    arr[...] = data
    return time.perf_counter() - t


def _straightforward_peak_rss(folder: Path, store: Path) -> float:
    """Peak RSS (B) above baseline of a fresh process running the straightforward path.

    VmHWM after a reset, not ru_maxrss: Linux carries ru_maxrss over from the parent into a
    forked child, so a child of a large parent would report the parent's peak.
    """
    code = (
        "import sys; sys.path.insert(0, 'bench'); import convert as c, dicom as d; from pathlib import Path;"
        "base = c._reset_peak();"
        f"d._straightforward(Path({str(folder)!r}), Path({str(store)!r}));"
        "print(base, c._worker_rss('VmHWM'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    base, peak = map(int, out.stdout.split()[-2:])
    return float(peak - base)


def _probe(folder: Path) -> float:
    files = sorted(folder.iterdir())
    t = time.perf_counter()
    for p in files:
        read_dicom_header(p, read_head(p))
    return len(files) / (time.perf_counter() - t)


def run(workdir: Path) -> list[Result]:
    from convert import _labzarr  # the conversion section's LocalCluster run with peak-RSS accounting

    root = workdir / "dicom"
    raw = _series(root)
    folder = raw / "case_001" / "ct"
    total = SLICES * SIZE * SIZE * 2 / MB
    out = [Result("dcm2niix (C, uncompressed .nii)", total / _dcm2niix(folder, root / "d2n"), "MB/s", baseline=True)]
    out.append(Result("straightforward: pydicom read all + stack + zarr write", total / _straightforward(
        folder, root / "straight.zarr"), "MB/s"))
    peak = 0.0
    for workers in (1, 2):
        wall, _, peak_w, _ = _labzarr(raw, root, workers)
        peak = max(peak, peak_w)
        out.append(Result(f"labzarr, {workers} worker{'s' if workers > 1 else ''} (incl. sha256, headers, manifest)",
                          total / wall, "MB/s"))
    out.append(Result("header probing only, 1 process", _probe(folder), "files/s", note="read_dicom_header"))
    out.append(Result("labzarr peak RSS above baseline (largest worker)", peak / MB, "MB", higher_is_better=False,
                      note=f"slab streaming; series is {total:.0f} MB"))
    out.append(Result("straightforward peak RSS above baseline", _straightforward_peak_rss(
        folder, root / "straight-rss.zarr") / MB, "MB", higher_is_better=False))
    for p in root.glob("store-*"):
        shutil.rmtree(p, ignore_errors=True)
    return out
