"""The records a DICOM file's header is read into (`_dicom_header.py`): what the probe sends the driver and the
plan lays series out from.

Invariant: importing this module imports no DICOM library, so the driver, which only receives, plans and
submits these records, does not import pydicom (the workers read the headers).
"""

from __future__ import annotations

from dataclasses import dataclass

from .reasons import Reason
from .records import ByFields

__all__ = ["RTSTRUCT_CLASS", "SEG_CLASS", "Defect", "DicomHeader", "Frame"]

SEG_CLASS = "1.2.840.10008.5.1.4.1.1.66.4"  # Segmentation Storage
RTSTRUCT_CLASS = "1.2.840.10008.5.1.4.1.1.481.3"  # RT Structure Set Storage


@dataclass(frozen=True, slots=True)
class Defect(ByFields):
    """Why a file whose header was read still cannot be decoded: a reason and its measured detail."""

    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Frame(ByFields):
    """One 2D image of a file and where it lies.

    `position` is ImagePositionPatient (LPS mm) of its first pixel, `orientation` the
    six direction cosines of its rows and columns, `spacing` (row, column) spacing in
    mm; all three are None for an image without patient geometry (CR, DX, US, SC).
    `order` sorts repeated acquisitions of one position into time points.
    """

    index: int
    position: tuple[float, float, float] | None
    orientation: tuple[float, float, float, float, float, float] | None
    spacing: tuple[float, float] | None
    slope: float = 1.0
    intercept: float = 0.0
    echo: float | None = None
    order: tuple[float, ...] = ()
    # Philips' private scale slope (2005,100E): precise "float" values are (stored x slope + intercept) / (slope x
    # scale_slope), what dcm2niix writes by default; None for other vendors or when absent (or 0).
    scale_slope: float | None = None
    # What the frame is, for splitting a series as dcm2niix does: ImageType (an enhanced frame's FrameType),
    # upper-case; the complex component ("MAGNITUDE", "PHASE", "REAL", "IMAGINARY"; "" when not said); the
    # diffusion b-value (s/mm²) and gradient (LPS, unit length) where given, and the diffusion directionality
    # ("ISOTROPIC" for a scanner's trace image, from the enhanced MR Diffusion Sequence or Philips' 2001,1004 "I").
    image_type: tuple[str, ...] = ()
    component: str = ""
    bvalue: float | None = None
    gradient: tuple[float, float, float] | None = None
    directionality: str = ""


@dataclass(frozen=True, slots=True)
class DicomHeader(ByFields):
    """What planning needs from one DICOM file; `frames` is empty when it holds no pixel data."""

    sop_class: str
    sop_class_name: str
    modality: str
    study_uid: str
    series_uid: str
    series_number: int | None
    instance_number: int | None
    sop_instance: str
    transfer_syntax: str
    manufacturer: str = ""
    rows: int = 0
    columns: int = 0
    samples: int = 1
    bits_allocated: int = 0
    bits_stored: int = 0
    signed: bool = False
    float_pixels: bool = False
    photometric: str = ""
    frames: tuple[Frame, ...] = ()
    mosaic: int | None = None  # tiles per side of a Siemens mosaic; frames are its tiles
    spacing_2d: tuple[float, float] | None = None  # PixelSpacing or ImagerPixelSpacing of a projection image
    thickness: float | None = None  # SliceThickness: the slice axis of a single-slice volume
    palette_bits: int = 0  # PALETTE COLOR: bits of each lookup-table entry (8 or 16)
    # xxh3-128 of the encoded Pixel Data bytes: equal hashes, equal pixels. Not sha256: it only tells a slice's
    # duplicate from another slice (files are not adversarial), and it runs at memory speed; the manifest's
    # content hash is the file's sha256, taken apart.
    pixel_hash: str = ""
    defect: Defect | None = None
    gzipped: bool = False
    enhanced: bool = False  # frames from per-frame functional groups; their `echo` is an echo time (ms)
    # Where frame i's stored values lie in the file, at `native_at + i * frame_nbytes`, for native pixel data
    # read straight into the slab (readers/_dicom_pixels.py); a mosaic's tiles are cut from its one stored frame
    # there. -1 where pydicom must decode the element (encapsulated, deflated or gzipped streams, bit-packed,
    # palette, YBR or planar colour).
    native_at: int = -1
    big_endian: bool = False
    # The SeriesInstanceUIDs a segmentation (SEG) or structure set (RTSTRUCT) is drawn on, from its
    # Referenced Series Sequence (SEG) or its Referenced Frame of Reference Sequence (RTSTRUCT); () otherwise.
    references: tuple[str, ...] = ()

    @property
    def frame_nbytes(self) -> int:
        """Bytes of one stored frame of native pixel data."""
        return self.rows * self.columns * self.samples * self.bits_allocated // 8

    @property
    def stored_dtype(self) -> str:
        """The numpy dtype of native stored values, byte order included (`<u2`, `>i2`, `<f4`)."""
        kind = "f" if self.float_pixels else "i" if self.signed else "u"
        return f"{'>' if self.big_endian else '<'}{kind}{self.bits_allocated // 8}"

    @property
    def has_pixels(self) -> bool:
        """True for an image; False for SR, RT plans, DICOMDIR, presentation states, ..."""
        return bool(self.frames)

    @property
    def spatial(self) -> bool:
        """True when every frame has a patient position and orientation."""
        return bool(self.frames) and all(f.position is not None and f.orientation is not None for f in self.frames)
