"""Raw-format readers: sniff content, decode, validate, or raise `Rejected` with a measured detail.

`excel` is the one reader outside `READERS`: a label workbook is read once per delivery, not per item.
"""

from ._dicom_walk import DecodedValues
from ._head import Head, looks_like_text, read_head
from ._planar import check_plane
from .dicom import DicomHeader, DicomReader, SeriesRules, SeriesStack, read_dicom_header, read_series
from .excel import (
    ColumnRef,
    LabelCell,
    LabelRow,
    LabelSheet,
    WorkbookError,
    WorkbookLimits,
    read_label_sheet,
    sheet_names,
)
from .jpeg import JpegReader
from .nifti import NiftiReader, NiftiSource
from .png import PngReader
from .reasons import Reason, Rejected
from .records import ByFields, Limits, Plane, Slab, Volume, VolumeHeader
from .registry import READERS, LabelMapReader, PlanarReader, Reader, as_planar, load_reader, reader_for, readers_with
from .slabs import MemorySource, StreamingReader, VolumeSource, assemble, open_source
from .tiff import TiffReader

__all__ = [
    "ByFields",
    "ColumnRef",
    "DecodedValues",
    "DicomHeader",
    "DicomReader",
    "Head",
    "JpegReader",
    "LabelMapReader",
    "LabelCell",
    "LabelRow",
    "LabelSheet",
    "Limits",
    "MemorySource",
    "NiftiReader",
    "NiftiSource",
    "Plane",
    "PlanarReader",
    "PngReader",
    "READERS",
    "Reader",
    "Reason",
    "Rejected",
    "SeriesRules",
    "SeriesStack",
    "Slab",
    "StreamingReader",
    "TiffReader",
    "Volume",
    "VolumeHeader",
    "VolumeSource",
    "WorkbookError",
    "WorkbookLimits",
    "as_planar",
    "assemble",
    "check_plane",
    "looks_like_text",
    "load_reader",
    "open_source",
    "read_dicom_header",
    "read_head",
    "read_label_sheet",
    "sheet_names",
    "read_series",
    "reader_for",
    "readers_with",
]
