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

__all__ = ["DIRECTIONS", "HZ_FIELDMAP_SCALE", "PHILIPS_MPRAGE", "hz_fieldmap", "philips_dwi", "philips_enhanced",
           "philips_series", "two_type_enhanced"]

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


# (RS, RI, SS) of the Philips B0 fieldmap in Hz in dcm_qa_enh (In/Philips/IM_0027_fMAP.dcm), as its frames store
# them: RS = 1000 / 4095 Hz a step with RI = -500 Hz maps 0..4095 onto -500..500 Hz, and SS = 4.095 (an FL).
HZ_FIELDMAP_SCALE = (0.24420024420024, -500.0, 4.095000267028809)


def hz_fieldmap(dest: Path, *, frames: int = 6, name: str = "fieldmap_hz.dcm") -> Path:
    """An enhanced Philips file scaled as dcm_qa_enh's fieldmap in Hz (`HZ_FIELDMAP_SCALE` on every frame): nibabel's
    real enhanced MPRAGE cut to `frames` frames, real MR pixels spread over 0..4095 so both ends of the Hz range
    occur. Stands in for the corpus file where its mirror is absent."""
    out = philips_enhanced(dest, frames=frames, name=name)
    ds = pydicom.dcmread(out)
    pixels = ds.pixel_array.astype(np.int64)
    ds.PixelData = (pixels * 4095 // max(1, int(pixels.max()))).astype(np.uint16).tobytes()
    rs, ri, ss = HZ_FIELDMAP_SCALE
    for item in ds.PerFrameFunctionalGroupsSequence:
        _frame_scale(item, rs=rs, ri=ri, ss=ss)
    return write(ds, out)


DIRECTIONS = ((1.0, 0.0, 0.0), (0.0, 0.70710678, 0.70710678), (0.0, 0.0, 1.0))


def philips_dwi(dest: Path, slices: Sequence[Path] = CT5N, *, directions: Sequence[tuple[float, float, float]]
                = DIRECTIONS, bvalue: float = 1000.0, trace: bool = True, name: str = "dwi") -> list[Path]:
    """A Philips DWI series, one file a slice: a b=0 volume, one volume per gradient direction and, with `trace`,
    the scanner's isotropic trace image last: b > 0 with gradient (0, 0, 0), ImageType ORIGINAL/PRIMARY as Philips
    writes it. b-values and gradients are in the public tags and in Philips' private ones (2001,1003; 2005,10B0-2)."""
    series = generate_uid(entropy_srcs=["philips_dwi", name, str(list(directions)), str(trace)])
    volumes: list[tuple[float, tuple[float, float, float]]] = [(0.0, (0.0, 0.0, 0.0))]
    volumes += [(bvalue, d) for d in directions]
    if trace:
        volumes.append((bvalue, (0.0, 0.0, 0.0)))
    out = []
    k = 0
    for t, (b, g) in enumerate(volumes):
        for s, src in enumerate(slices):
            ds = read(src)
            ds.SOPInstanceUID = generate_uid(entropy_srcs=[series, str(k)])
            ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
            ds.InstanceNumber = k + 1
            ds.Modality, ds.Manufacturer = "MR", "Philips Medical Systems"
            ds.ImageType = ["ORIGINAL", "PRIMARY", "DIFFUSION", "NONE"]
            ds.SeriesInstanceUID = series
            ds.SeriesDescription = "DWI"
            ds.AcquisitionNumber = 1
            ds.TemporalPositionIdentifier = t + 1
            ds.PixelRepresentation = 0
            ds.PixelData = np.clip(np.roll(ds.pixel_array.astype(np.int32), 3 * t, axis=1) + 1024, 0, 4095
                                   ).astype(np.uint16).tobytes()
            ds.add_new(0x00189087, "FD", b)  # DiffusionBValue
            ds.add_new(0x00189089, "FD", list(g))  # DiffusionGradientOrientation
            ds.private_block(0x2001, _PHILIPS_IMAGING, create=True).add_new(0x03, "FL", b)
            ds.private_block(0x2001, _PHILIPS_IMAGING).add_new(0x04, "CS", "I" if b and not any(g) else
                                                                ("O" if any(g) else ""))
            block = ds.private_block(0x2005, _PHILIPS, create=True)
            for e, v in zip((0xB0, 0xB1, 0xB2), g):
                block.add_new(e, "FL", v)
            out.append(write(ds, dest / f"{name}_{t + 1:02d}_{s + 1}.dcm"))
            k += 1
    return out


def two_type_enhanced(dest: Path, *, frames: int = 5, name: str = "fieldmap.dcm") -> Path:
    """A Philips enhanced field-map file as the issue describes: `frames` magnitude frames (TE 1.52 ms) then
    `frames` field-map frames at the same positions (FrameType ... B0 MAP, REAL, TE 0, their own rescale), built
    from nibabel's real enhanced MPRAGE headers and real MR pixels. dcm2niix writes the two as `` and `_real`."""
    ds = _mprage()
    keep = list(range(88 - frames // 2, 88 - frames // 2 + frames))
    magnitude = _mr_frames(frames)
    field = np.flip(magnitude, axis=2)  # other real content in the field-map frames
    out = _keep_frames(ds, keep + keep, np.concatenate([magnitude, field]))
    # A third dimension, the image type, as Philips indexes its field-map files.
    dimension = Dataset()
    dimension.DimensionIndexPointer = 0x00089208  # ComplexImageComponent
    dimension.FunctionalGroupPointer = 0x00189226  # in the MR Image Frame Type Sequence
    dimension.DimensionOrganizationUID = out.DimensionIndexSequence[0].get("DimensionOrganizationUID", "")
    out.DimensionIndexSequence = DicomSequence([*copy.deepcopy(list(out.DimensionIndexSequence)), dimension])
    for k, item in enumerate(out.PerFrameFunctionalGroupsSequence):
        fieldmap = k >= frames
        item.MREchoSequence[0].EffectiveEchoTime = 0.0 if fieldmap else 1.52
        frame_type = item.MRImageFrameTypeSequence[0]
        frame_type.FrameType = ["ORIGINAL", "PRIMARY", "B0 MAP" if fieldmap else "M_FFE", "NONE"]
        # Philips stores a B0 map as REAL frames; its private per-frame item holds the echo number.
        frame_type.ComplexImageComponent = "REAL" if fieldmap else "MAGNITUDE"
        private = item[0x2005140F].value[0]
        private.EchoNumbers = 2 if fieldmap else 1
        private.ImageType = ["ORIGINAL", "PRIMARY", "B0" if fieldmap else "M_FFE", "B0" if fieldmap else "M"]
        content = item.FrameContentSequence[0]
        content.InStackPositionNumber = k % frames + 1
        content.DimensionIndexValues = [1, k % frames + 1, 2 if fieldmap else 1]
        if fieldmap:  # the field map in Hz: its own rescale, centred on 0
            _frame_scale(item, rs=0.25, ri=-500.0, ss=4.0)
    return write(out, dest / name)
