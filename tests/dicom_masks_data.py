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


# RTSTRUCT ROIs on CT5N's 16x16 slices, as (i, j) voxel polygons per slice index (slices sorted along their normal):
# a tumour drawn on three slices, a lung ring (outer contour and a hole inside it), a point and an unmapped ROI.
ROI_SHAPES: dict[str, dict[int, list[list[tuple[float, float]]]]] = {
    "GTV": {k: [[(2.3, 2.6), (7.8, 3.1), (6.4, 8.7), (2.9, 6.2)]] for k in (1, 2, 3)},
    "Lung_L": {2: [[(9.2, 1.4), (14.6, 1.8), (14.3, 13.7), (8.8, 13.2)],
                   [(10.6, 5.3), (12.7, 5.1), (12.9, 9.6), (10.4, 9.8)]]},
    "Couch": {0: [[(0.5, 14.2), (15.4, 14.2), (15.4, 15.4), (0.5, 15.4)]]},
}
ROI_COLORS = {"GTV": (255, 0, 0), "Lung_L": (0, 128, 255), "Couch": (128, 128, 128), "Isocenter": (255, 255, 0)}


def roi_points(cts: Sequence[Dataset], k: int, ij: Sequence[tuple[float, float]]) -> np.ndarray:
    """(N, 3) LPS mm of the (i, j) voxel points on slice k (sorted along the normal) of the CT."""
    s = by_position(cts)[k]
    row, col = np.array(s.ImageOrientationPatient[:3], float), np.array(s.ImageOrientationPatient[3:], float)
    dr, dc = (float(v) for v in s.PixelSpacing)
    origin = np.array(s.ImagePositionPatient, float)
    return np.array([origin + i * dc * row + j * dr * col for i, j in ij])


def write_rtstruct(path: Path, cts: Sequence[Dataset], shapes: dict[str, dict[int, list[list[tuple[float, float]]]]]
                   = ROI_SHAPES, *, point: bool = True) -> Path:
    """An RT Structure Set on the CT series, its ROI Contour Sequence written element by element with pydicom."""
    first = cts[0]
    ds = Dataset()
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.481.3"
    ds.SOPInstanceUID = generate_uid(entropy_srcs=[str(path), "sop"])
    ds.Modality = "RTSTRUCT"
    ds.PatientID = first.PatientID
    ds.StudyInstanceUID = first.StudyInstanceUID
    ds.SeriesInstanceUID = generate_uid(entropy_srcs=[str(path), "series"])
    ds.SeriesNumber = 200
    ds.StructureSetLabel = "labzarr tests"
    frame_uid = str(first.get("FrameOfReferenceUID", "") or generate_uid(entropy_srcs=[str(path), "for"]))
    images = [Dataset() for _ in cts]
    for item, c in zip(images, cts):
        item.ReferencedSOPClassUID, item.ReferencedSOPInstanceUID = c.SOPClassUID, c.SOPInstanceUID
    series = Dataset()
    series.SeriesInstanceUID, series.ContourImageSequence = first.SeriesInstanceUID, images
    study = Dataset()
    study.ReferencedSOPClassUID = "1.2.840.10008.3.1.2.3.1"
    study.ReferencedSOPInstanceUID = first.StudyInstanceUID
    study.RTReferencedSeriesSequence = [series]
    frame = Dataset()
    frame.FrameOfReferenceUID, frame.RTReferencedStudySequence = frame_uid, [study]
    ds.ReferencedFrameOfReferenceSequence = [frame]
    rois, contours = [], []
    named = [*shapes, *(["Isocenter"] if point else [])]
    for number, name in enumerate(named, start=1):
        roi = Dataset()
        roi.ROINumber, roi.ReferencedFrameOfReferenceUID, roi.ROIName = number, frame_uid, name
        rois.append(roi)
        item = Dataset()
        item.ReferencedROINumber, item.ROIDisplayColor = number, list(ROI_COLORS[name])
        sequence = []
        if name == "Isocenter":
            c = Dataset()
            c.ContourGeometricType, c.NumberOfContourPoints = "POINT", 1
            c.ContourData = [f"{v:.6f}" for v in roi_points(cts, 2, [(8.0, 8.0)])[0]]
            sequence.append(c)
        for k, polygons in shapes.get(name, {}).items():
            for ij in polygons:
                c = Dataset()
                c.ContourGeometricType, c.NumberOfContourPoints = "CLOSED_PLANAR", len(ij)
                c.ContourData = [f"{v:.6f}" for v in roi_points(cts, k, ij).ravel()]
                sequence.append(c)
        item.ContourSequence = sequence
        contours.append(item)
    ds.StructureSetROISequence, ds.ROIContourSequence = rois, contours
    ds.file_meta = pydicom.dataset.FileMetaDataset()
    ds.file_meta.MediaStorageSOPClassUID, ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPClassUID, ds.SOPInstanceUID
    ds.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)
    return path
