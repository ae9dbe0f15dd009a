"""What each rejection reason means and what to do about it, in words a reviewer reads on the QC page."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from labzarr.readers import Reason, SeriesRules

__all__ = ["EXPLAIN"]

EXPLAIN: Mapping[Reason, str] = MappingProxyType({
    Reason.EMPTY_FILE: "the file is 0 bytes; ask for it again",
    Reason.TRUNCATED: "the file ends before its data does (an interrupted copy); ask for it again",
    Reason.CORRUPT_DATA: "the bytes do not decode (flipped bits, broken compression); ask for it again",
    Reason.BAD_HEADER: "the header contradicts itself or the data; ask how the file was exported",
    Reason.UNSUPPORTED_FORMAT: "named like an image, but no reader recognises its content; check what it is",
    Reason.TOO_LARGE: "decoded size above the spec's cap; raise [validate] max_bytes if it is genuine",
    Reason.DECODER_MISSING: "the format needs a decoder that is not installed here",
    Reason.DECODER_CRASH: "the decoder failed or its worker died on this file; see the detail",
    Reason.TIMEOUT: "decoding took longer than the per-item limit",
    Reason.NON_FINITE: "NaN or Inf voxels; set [validate] non_finite = \"warn\" to keep such items",
    Reason.SERIES_MISSING_SLICES: "a DICOM series has gaps between slices; ask for the missing files",
    Reason.SERIES_INCONSISTENT_GEOMETRY: "slices of one series disagree on orientation, size or spacing",
    Reason.SERIES_TOO_SHORT: (f"fewer slice positions than [dicom] min_slices (default {SeriesRules().min_slices}): "
                              "usually a localizer or scout; lower min_slices in the spec to keep such series"),
    Reason.MIXED_SERIES: "files of several series are mixed in a way that cannot be split safely",
    Reason.DUPLICATE_CONTENT: "the same bytes as an earlier item; only the first is kept",
    Reason.ID_UNMATCHED: "no item ID found in the path; fix [items] id_pattern or rename the file",
    Reason.NO_LABEL: "the workbook has no row for this item while [labels] required = true",
    Reason.LABEL_CONFLICT: "the workbook gives this ID two different values; fix the workbook",
    Reason.PATH_OUTSIDE_RAW: "a symlink that leaves the delivery folder; never read",
    Reason.MISSING_ROLE: "an image without its mask, or a mask without its image",
    Reason.GEOMETRY_MISMATCH: "image and mask disagree on shape or position",
    Reason.SPLIT_LEAKAGE: "a copy or group member that would put the same data in two splits",
    Reason.ANNOTATION_OUTSIDE: ("an annotation whose centre falls outside its item's volume: check the "
                                "[labels] annotations space (LPS or RAS) and the item ID"),
    Reason.BAD_ANNOTATION: "an annotation cell that is not a number, or a negative extent; fix the workbook",
})
