"""Vendor-flavoured DICOM series built from pydicom's and nibabel's real files: Philips scaling, DWI with a
trace volume, enhanced multi-frame files holding two echoes or image types.

Every builder writes into a folder it is given and returns the paths it wrote. The pixels are the real
files' pixels (shifted or cropped), the headers theirs with the vendor's tags added where the case needs them.
"""

from __future__ import annotations

import copy
import gzip
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence as DicomSequence
from pydicom.uid import generate_uid

from .dicom_data import CT5N, NICOM_DATA, PYDICOM_DATA, read, write

__all__ = ["PHILIPS_MPRAGE", "philips_enhanced", "philips_series"]

PHILIPS_MPRAGE = NICOM_DATA / "philips_mprage.dcm.gz"  # a real Philips enhanced MR file: 176 frames, private SS
_PHILIPS = "Philips MR Imaging DD 001"
_PHILIPS_IMAGING = "Philips Imaging DD 001"


def _philips_scale(ds: Dataset, *, rs: float, ri: float, ss: float) -> None:
    ds.RescaleSlope, ds.RescaleIntercept = f"{rs:.10g}", f"{ri:.10g}"
    ds.private_block(0x2005, _PHILIPS, create=True).add_new(0x0E, "FL", ss)


def philips_series(dest: Path, slices: Sequence[Path] = CT5N, *, scales: Sequence[tuple[float, float, float]]
                   = ((2.5, -10.0, 0.0125),), volumes: int = 1, name: str = "philips") -> list[Path]:
    """A Philips MR series (one file a slice) from real slices with RescaleSlope/Intercept and the private scale
    slope (2005,100E): `scales[k % len(scales)]` = (RS, RI, SS) for file k."""
    series = generate_uid(entropy_srcs=["philips", name, str(scales), str(volumes)])
    out = []
    k = 0
    for t in range(volumes):
        for s, src in enumerate(slices):
            ds = read(src)
            ds.SOPInstanceUID = generate_uid(entropy_srcs=[series, str(k)])
            ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
            ds.InstanceNumber = k + 1
            ds.Modality, ds.Manufacturer = "MR", "Philips Medical Systems"
            ds.SeriesInstanceUID = series
            ds.AcquisitionNumber = t + 1
            ds.PixelRepresentation = 0  # Philips stores unsigned magnitudes
            ds.PixelData = np.clip(np.roll(ds.pixel_array.astype(np.int32), 2 * t, axis=0) + 1024, 0, 4095
                                   ).astype(np.uint16).tobytes()
            _philips_scale(ds, rs=scales[k % len(scales)][0], ri=scales[k % len(scales)][1],
                           ss=scales[k % len(scales)][2])
            out.append(write(ds, dest / f"{name}_{t + 1}_{s + 1}.dcm"))
            k += 1
    return out


def _mprage() -> Dataset:
    return pydicom.dcmread(io.BytesIO(gzip.decompress(PHILIPS_MPRAGE.read_bytes())))


def _mr_frames(n: int) -> np.ndarray:
    """`n` 64x64 frames of real MR pixels (pydicom's MR_small, shifted per frame), as unsigned 12-bit values:
    nibabel's MPRAGE ships with its pixels zeroed, so its headers get these."""
    mr = read(PYDICOM_DATA / "MR_small.dcm").pixel_array.astype(np.int32)
    return np.stack([np.clip(np.roll(mr, 3 * k, axis=1), 0, 4095) for k in range(n)]).astype(np.uint16)


def _keep_frames(ds: Dataset, keep: Sequence[int], pixels: np.ndarray) -> Dataset:
    """`ds` holding only frames `keep` (in that order), with `pixels` (frames, rows, columns) as their pixels."""
    out = copy.copy(ds)
    out.PerFrameFunctionalGroupsSequence = DicomSequence(
        [copy.deepcopy(ds.PerFrameFunctionalGroupsSequence[k]) for k in keep])
    out.NumberOfFrames = len(keep)
    if 0x20011018 in out:  # Philips' private slice count: dcm2niix sizes the volume by it
        out[0x20011018].value = len(keep)
    out.Rows, out.Columns = pixels.shape[1:]
    out.PixelData = np.ascontiguousarray(pixels.astype(np.uint16)).tobytes()
    out.SOPInstanceUID = generate_uid(entropy_srcs=[str(ds.SOPInstanceUID), str(list(keep)), str(pixels.sum())])
    out.file_meta.MediaStorageSOPInstanceUID = out.SOPInstanceUID
    return out


def _frame_scale(item: Dataset, *, rs: float | None = None, ri: float | None = None, ss: float | None = None) -> None:
    """Set one per-frame item's public rescale and its private (2005,140F) copy, as Philips writes both."""
    for where in (item.PixelValueTransformationSequence[0], item[0x2005140F].value[0]):
        if rs is not None:
            where.RescaleSlope = f"{rs:.10g}"
        if ri is not None:
            where.RescaleIntercept = f"{ri:.10g}"
    if ss is not None:
        item[0x2005140F].value[0][0x2005100E].value = ss


def philips_enhanced(dest: Path, *, frames: int = 6, vary: bool = False, name: str = "enhanced.dcm") -> Path:
    """nibabel's real Philips enhanced MPRAGE cut to its first `frames` frames; with `vary`, every other frame
    gets another RescaleSlope/Intercept and private scale slope (enhanced files rescale frame by frame)."""
    ds = _mprage()
    keep = list(range(88 - frames // 2, 88 - frames // 2 + frames))
    out = _keep_frames(ds, keep, _mr_frames(frames))
    if vary:
        for k, item in enumerate(out.PerFrameFunctionalGroupsSequence):
            if k % 2:
                _frame_scale(item, rs=3.25, ri=-7.0, ss=0.0004)
    return write(out, dest / name)
