"""The closed vocabulary of reasons an item is rejected, and the one exception that carries it.

Readers are the first stage of the data flow, so the vocabulary lives here and
every later stage (convert, manifest) imports it from here.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Reason", "Rejected"]


class Reason(StrEnum):
    """Why an item is not `ok`. Closed: a new code is a design change, not a string."""

    EMPTY_FILE = "empty_file"
    TRUNCATED = "truncated"
    CORRUPT_DATA = "corrupt_data"
    BAD_HEADER = "bad_header"
    UNSUPPORTED_FORMAT = "unsupported_format"
    TOO_LARGE = "too_large"
    DECODER_MISSING = "decoder_missing"
    DECODER_CRASH = "decoder_crash"
    TIMEOUT = "timeout"
    NON_FINITE = "non_finite"
    SERIES_MISSING_SLICES = "series_missing_slices"
    SERIES_INCONSISTENT_GEOMETRY = "series_inconsistent_geometry"
    SERIES_TOO_SHORT = "series_too_short"
    MIXED_SERIES = "mixed_series"
    DUPLICATE_CONTENT = "duplicate_content"
    ID_UNMATCHED = "id_unmatched"
    NO_LABEL = "no_label"
    LABEL_CONFLICT = "label_conflict"
    PATH_OUTSIDE_RAW = "path_outside_raw"
    MISSING_ROLE = "missing_role"
    GEOMETRY_MISMATCH = "geometry_mismatch"
    SPLIT_LEAKAGE = "split_leakage"
    # Of one annotation (a workbook row of `[labels] annotations`), never of an item: the item stays ok.
    ANNOTATION_OUTSIDE = "annotation_outside"
    BAD_ANNOTATION = "bad_annotation"


class Rejected(Exception):
    """Bad data: the item gets a `rejected` manifest row with `reason` and a measured `detail`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type[Rejected], tuple[Reason, str]]:
        # Rejected crosses process boundaries (dask workers); keep both fields.
        return (Rejected, (self.reason, self.detail))
