"""DICOM SEG and RTSTRUCT objects drawn on real CT slices (pydicom's CT5N, as `dicom_data.ct_series` copies them).

SEGs are written by highdicom itself, RTSTRUCTs element by element with pydicom (the ROI Contour Sequence
of a real structure set); nothing here reaches the network.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.sr.codedict import codes
from pydicom.uid import generate_uid

from .dicom_data import ct_series

SEG_LABELS = ("liver", "lesion")


def ct(dest: Path, patient: str) -> list[Dataset]:
    """CT5N's slices as `patient`'s series under `dest`, read back (pixels included) in file-name order."""
    return [pydicom.dcmread(p) for p in ct_series(dest, patient)]


def by_position(cts: Sequence[Dataset]) -> list[Dataset]:
    """The slices sorted along their normal (what highdicom's `source_images` order does not need to be)."""
    return sorted(cts, key=lambda d: float(d.ImagePositionPatient[2]))


def seg_arrays(cts: Sequence[Dataset], seed: int = 0) -> np.ndarray:
    """(slices, rows, columns, 2) in `by_position` order: a fractional "liver" (random probabilities) and a
    binary box "lesion" that overlaps it."""
    n = len(cts)
    rng = np.random.default_rng(seed)
    arr = np.zeros((n, 16, 16, 2), dtype=np.float32)
    arr[..., 0] = np.round(rng.random((n, 16, 16)) * 255) / 255  # exact in 8 bits: highdicom stores value x 255
    arr[1:4, 4:10, 5:12, 1] = 1.0
    return arr


def write_seg(path: Path, cts: Sequence[Dataset], arr: np.ndarray, *, kind: str,
              colors: Sequence[tuple[int, int, int]] = ((0, 0, 255), (255, 0, 0))) -> hd.seg.Segmentation:
    """A highdicom SEG of `arr` ((slices, rows, columns, segments) in `by_position(cts)` order) on `cts`."""
    descriptions = [
        hd.seg.SegmentDescription(
            segment_number=i + 1, segment_label=SEG_LABELS[i], segmented_property_category=codes.SCT.Tissue,
            segmented_property_type=codes.SCT.Tissue, algorithm_type=hd.seg.SegmentAlgorithmTypeValues.MANUAL,
            display_color=hd.color.CIELabColor.from_rgb(*colors[i]))
        for i in range(arr.shape[-1])]
    data = arr if kind == "FRACTIONAL" else (arr >= 0.5)
    seg = hd.seg.Segmentation(
        source_images=by_position(cts), pixel_array=data, segmentation_type=kind,
        segment_descriptions=descriptions, series_instance_uid=generate_uid(entropy_srcs=[str(path), "series"]),
        series_number=100, sop_instance_uid=generate_uid(entropy_srcs=[str(path), "sop"]), instance_number=1,
        manufacturer="labzarr tests", manufacturer_model_name="highdicom", software_versions=hd.__version__,
        device_serial_number="1", max_fractional_value=255)
    path.parent.mkdir(parents=True, exist_ok=True)
    seg.save_as(path)
    return seg


def shuffled_frames(src: Path, dest: Path, seed: int = 1) -> Path:
    """The same SEG with its frames (pixel data and per-frame groups together) in another order."""
    ds = pydicom.dcmread(src)
    frames = ds.pixel_array
    if frames.ndim == 2:
        frames = frames[np.newaxis]
    order = np.random.default_rng(seed).permutation(len(frames))
    assert (order != np.arange(len(frames))).any()
    groups = list(ds.PerFrameFunctionalGroupsSequence)
    ds.PerFrameFunctionalGroupsSequence = [groups[i] for i in order]
    reordered = frames[order]
    if int(ds.BitsAllocated) == 1:
        ds.PixelData = pydicom.pixels.pack_bits(reordered.ravel())
    else:
        ds.PixelData = reordered.astype(np.uint8).tobytes()
    ds.SOPInstanceUID = generate_uid(entropy_srcs=[str(dest)])
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    dest.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(dest, enforce_file_format=True)
    return dest


def moved_frame(src: Path, dest: Path, *, frame: int = 0, shift_mm: float = 1.25) -> Path:
    """The same SEG with one frame's Plane Position moved along the slice normal, off its referenced slice."""
    ds = pydicom.dcmread(src)
    pos = ds.PerFrameFunctionalGroupsSequence[frame].PlanePositionSequence[0]
    x, y, z = (float(v) for v in pos.ImagePositionPatient)
    pos.ImagePositionPatient = [x, y, z + shift_mm]
    ds.SOPInstanceUID = generate_uid(entropy_srcs=[str(dest)])
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    dest.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(dest, enforce_file_format=True)
    return dest
