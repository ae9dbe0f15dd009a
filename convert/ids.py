"""Item-ID normalisation: one function, applied to file-derived IDs and workbook IDs alike.

An item's ID (from its path, by `[items] id_pattern`) and a workbook's ID cell
match when both normalise to the same text. Steps, applied in the spec's order
(`[items] id_normalize`); the text is put in Unicode NFC first:

- ``strip``: outer whitespace, incl. no-break spaces (`" CASE-007 "` -> `"CASE-007"`)
- ``casefold``: case-insensitive (`"CASE-007"` -> `"case-007"`)
- ``drop_separators``: remove `-`, `_`, `.`, whitespace and Unicode dashes such as the en dash
  Excel's autocorrect types (`"case-007"`, `"case_007"`, `"Case 007"`, `"case–007"` -> `"case007"`)
- ``strip_leading_zeros``: in every digit run (`"case007"` -> `"case7"`, `"000"` -> `"0"`)

With all four, `case_7`, ` CASE-007 `, `Case 07` and `case–007` all become `case7`; a
workbook cell holding the number 7 formatted `000` reads as `"007"` and becomes `"7"`,
which matches a file named `007.nii.gz` (id_pattern `(?P<id>\\d+)`) but not `case_007`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

__all__ = ["PART", "base_id", "normalize_id"]

# Joins an item ID and the part of its acquisition an item holds apart (`case1~trace`, a DICOM series' trace
# volume, convert/plan/series.py); normalised IDs never hold it (drop_separators aside, it is not a separator).
PART = "~"


def base_id(item_id: str) -> str:
    """The ID an item's labels and split group come from: `case1` for `case1~trace`."""
    return item_id.split(PART, 1)[0]

_SEPARATORS = re.compile(r"[-_.\s\u2010-\u2015\u2212]+")  # ASCII separators, Unicode dashes, minus sign
_LEADING_ZEROS = re.compile(r"(?<!\d)0+(?=\d)")


def normalize_id(raw: str, steps: Sequence[str]) -> str:
    """Normalise one ID by `steps` (see module docstring); always NFC first."""
    value = unicodedata.normalize("NFC", raw)
    for step in steps:
        if step == "strip":
            value = value.strip()
        elif step == "casefold":
            value = value.casefold()
        elif step == "drop_separators":
            value = _SEPARATORS.sub("", value)
        elif step == "strip_leading_zeros":
            value = _LEADING_ZEROS.sub("", value)
        else:
            raise ValueError(f"unknown id_normalize step {step!r}")  # the spec parser refuses these first
    return value
