"""Item-ID normalisation: one function, applied to file-derived IDs and workbook IDs alike.

Steps, applied in the spec's order (`[items] id_normalize`):

- ``strip``: outer whitespace (`" CASE-007 "` -> `"CASE-007"`)
- ``casefold``: case-insensitive (`"CASE-007"` -> `"case-007"`)
- ``drop_separators``: remove `-`, `_`, `.` and spaces (`"case-007"` -> `"case007"`)
- ``strip_leading_zeros``: in every digit run (`"case007"` -> `"case7"`, `"000"` -> `"0"`)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

__all__ = ["normalize_id"]

_SEPARATORS = re.compile(r"[-_.\s]+")
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
