"""Raw-format readers: sniff content, decode, validate, or raise `Rejected` with a measured detail.

`excel` is the one reader outside `READERS`: a label workbook is read once per delivery, not per item.

Every name is imported on first use (PEP 562): a process that needs only the readers' records and vocabulary (the
spec, the plan, the conversion driver, which only walks, plans and submits) does not import pydicom, nibabel,
Pillow or libjpeg-turbo; a worker imports them with the reader that uses them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from .registry import (
        READERS,
        LabelMapReader,
        PlanarReader,
        Reader,
        as_planar,
        load_reader,
        reader_for,
        readers_with,
    )
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

_WHERE = {
    "ByFields": "records",
    "ColumnRef": "excel",
    "DecodedValues": "_dicom_walk",
    "DicomHeader": "dicom",
    "DicomReader": "dicom",
    "Head": "_head",
    "JpegReader": "jpeg",
    "LabelCell": "excel",
    "LabelMapReader": "registry",
    "LabelRow": "excel",
    "LabelSheet": "excel",
    "Limits": "records",
    "MemorySource": "slabs",
    "NiftiReader": "nifti",
    "NiftiSource": "nifti",
    "PlanarReader": "registry",
    "Plane": "records",
    "PngReader": "png",
    "READERS": "registry",
    "Reader": "registry",
    "Reason": "reasons",
    "Rejected": "reasons",
    "SeriesRules": "dicom",
    "SeriesStack": "dicom",
    "Slab": "records",
    "StreamingReader": "slabs",
    "TiffReader": "tiff",
    "Volume": "records",
    "VolumeHeader": "records",
    "VolumeSource": "slabs",
    "WorkbookError": "excel",
    "WorkbookLimits": "excel",
    "as_planar": "registry",
    "assemble": "slabs",
    "check_plane": "_planar",
    "load_reader": "registry",
    "looks_like_text": "_head",
    "open_source": "slabs",
    "read_dicom_header": "dicom",
    "read_head": "_head",
    "read_label_sheet": "excel",
    "read_series": "dicom",
    "reader_for": "registry",
    "readers_with": "registry",
    "sheet_names": "excel",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
