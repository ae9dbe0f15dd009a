"""Raw-format readers: sniff content, decode, validate, or raise `Rejected` with a measured detail.

`excel` is the one reader outside `READERS`: a label workbook is read once per delivery, not per item.
"""

from ._head import Head, looks_like_text, read_head
from .excel import ColumnRef, LabelCell, LabelRow, LabelSheet, WorkbookError, WorkbookLimits, read_label_sheet
from .nifti import NiftiReader, NiftiSource
from .reasons import Reason, Rejected
from .records import Limits, Slab, Volume, VolumeHeader
from .registry import READERS, Reader, reader_for
from .slabs import MemorySource, StreamingReader, VolumeSource, assemble, open_source

__all__ = [
    "ColumnRef",
    "Head",
    "LabelCell",
    "LabelRow",
    "LabelSheet",
    "Limits",
    "MemorySource",
    "NiftiReader",
    "NiftiSource",
    "READERS",
    "Reader",
    "Reason",
    "Rejected",
    "Slab",
    "StreamingReader",
    "Volume",
    "VolumeHeader",
    "VolumeSource",
    "WorkbookError",
    "WorkbookLimits",
    "assemble",
    "looks_like_text",
    "open_source",
    "read_head",
    "read_label_sheet",
    "reader_for",
]
