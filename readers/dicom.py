"""DICOM: sniffing, header records, series layout and decoding into canonical volumes or 2D images.

A DICOM item is usually many files (one per slice), so reading happens in
three steps that the conversion runs in different places:

1. `read_dicom_header` on each file (dask workers, during probing): a small
   frozen `DicomHeader`, read with `stop_before_pixels`.
2. `layout_series` on the headers of one series (pure; planning on the driver):
   sort, deduplicate, split volumes, check the geometry, pick the dtype.
3. `open_series` on the resulting `SeriesStack` (a dask worker): a source of
   canonical RAS slabs (channels first), as dcm2niix + `as_closest_canonical`,
   decoded slice by slice; `read_series` assembles them in memory.

Sniffing: `DICM` at offset 128, or, for files without a preamble, the first
elements parse as a plausible DICOM dataset (known tags in ascending order
starting in group 0002 or 0008, VRs matching the dictionary); pydicom's
`force=True` alone would accept empty files and junk.
"""

from __future__ import annotations

import importlib
import io
import struct
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ._dicom_layout import Member, SeriesRules, SeriesStack, StackFrame, layout_series, output_dtype
from ._dicom_meta import ALLOWED, DESCRIPTORS, Descriptors, is_known_keyword
from ._dicom_records import RTSTRUCT_CLASS, SEG_CLASS, Defect, DicomHeader, Frame
from ._head import Head
from .reasons import Reason, Rejected
from .records import Limits, Volume

if TYPE_CHECKING:
    from ._dicom_header import read_dicom_header
    from ._dicom_pixels import DicomSource, open_series, read_series

__all__ = ["ALLOWED", "DESCRIPTORS", "RTSTRUCT_CLASS", "SEG_CLASS", "Defect", "Descriptors", "DicomHeader",
           "DicomReader", "DicomSource", "Frame", "Member", "SeriesRules", "SeriesStack", "StackFrame",
           "is_known_keyword", "layout_series", "looks_like_dicom", "open_series", "output_dtype", "read_dicom_header",
           "read_series"]

# Reading a header and decoding pixels need pydicom (and nibabel's orientation code): imported on first use, so the
# records, the layout and the allow-list above serve the spec, the plan and the driver without them.
_LAZY = {"read_dicom_header": "_dicom_header", "DicomSource": "_dicom_pixels", "open_series": "_dicom_pixels",
         "read_series": "_dicom_pixels"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__package__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MIN_ELEMENTS = 3  # a plausible preamble-less dataset starts with at least this many well-formed elements
_ENCODINGS = ((True, True), (False, True), (False, False))  # (implicit VR, little endian)


def looks_like_dicom(head: bytes) -> bool:
    """True for `DICM` at offset 128, or a preamble-less stream whose first elements are plausible DICOM."""
    if head[128:132] == b"DICM":
        return True
    return any(_plausible(head, implicit, little) for implicit, little in _ENCODINGS)


def _plausible(head: bytes, implicit: bool, little: bool) -> bool:
    if len(head) < 8:
        return False
    from pydicom.datadict import dictionary_has_tag, dictionary_VR
    from pydicom.filereader import data_element_generator

    group = struct.unpack("<H" if little else ">H", head[:2])[0]
    if group not in (0x0002, 0x0008):
        return False
    seen = 0
    last = -1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for elem in data_element_generator(io.BytesIO(head), implicit, little):
                tag = int(elem.tag)
                length = getattr(elem, "length", None)
                complete = elem.value is None or length == 0xFFFFFFFF or len(elem.value) == length
                if not complete:  # the element runs past the sniffed head: judge by what came before
                    break
                if tag <= last:
                    return False
                if elem.tag.group % 2 == 0:  # standard tags must be known, with their dictionary VR
                    if not dictionary_has_tag(tag):
                        return False
                    if not implicit and elem.VR not in dictionary_VR(tag).replace(" or ", " ").split() + ["UN"]:
                        return False
                last = tag
                seen += 1
                if seen >= _MIN_ELEMENTS:
                    return True
    except Exception:  # junk makes pydicom's element parser fail in many ways; any failure means "not DICOM"
        return False
    return False


class DicomReader:
    """Reads DICOM files; `read` handles one file as its own series, conversion uses `read_series`."""

    kind: ClassVar[str] = "dicom"

    def sniff(self, head: bytes) -> bool:
        """True for a DICOM stream (with or without the 128-byte preamble)."""
        return looks_like_dicom(head)

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Read one file as a whole series (a 2D image, a multi-frame object, a mosaic, or a single slice)."""
        from ._dicom_header import read_dicom_header
        from ._dicom_pixels import read_series

        header = read_dicom_header(path, head)
        if not header.has_pixels:
            raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{header.sop_class_name}: no pixel data, not an image")
        stack = layout_series([Member(str(path), path.name, header)], SeriesRules(min_slices=1))
        return read_series(stack, limits)
