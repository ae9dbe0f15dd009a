"""Raw-format readers: sniff content, decode, validate, or raise `Rejected` with a measured detail."""

from ._head import Head, looks_like_text, read_head
from .nifti import NiftiReader
from .reasons import Reason, Rejected
from .records import Limits, Volume
from .registry import READERS, Reader, reader_for

__all__ = [
    "Head",
    "Limits",
    "NiftiReader",
    "READERS",
    "Reader",
    "Reason",
    "Rejected",
    "Volume",
    "looks_like_text",
    "read_head",
    "reader_for",
]
