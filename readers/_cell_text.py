"""A cell's value as the text a person sees in Excel, for IDs and labels.

- integral numbers lose their float tail: ``7.0`` -> ``"7"``
- zero-padded formats keep their padding: ``7`` formatted ``000`` -> ``"007"``; quoted literals
  around the zeros are kept too: ``7`` formatted ``"CASE-"000`` -> ``"CASE-007"``
- any other format (``General``, ``#,##0``, ``0.00``) gives the plain number: ``1234`` -> ``"1234"``
- other numbers: the shortest text that reads back the same float (``0.1`` -> ``"0.1"``)
- dates become ISO 8601: ``2026-11-03``; with a time of day ``2026-11-03T14:30:00``
- booleans: ``TRUE`` / ``FALSE``; text is returned unchanged (no stripping here)
"""

from __future__ import annotations

import datetime as dt
import re

__all__ = ["cell_text"]

# One format section: optional literals, a run of zeros, optional literals ("CASE-"000, \C000, 000).
_LITERAL = r'(?:"[^"]*"|\\.)*'
_ZERO_PADDED = re.compile(rf"({_LITERAL})(0+)({_LITERAL})")
_LITERAL_PART = re.compile(r'"([^"]*)"|\\(.)')


def cell_text(value: object, number_format: str | None) -> str:
    """The displayed text of a cell value read by openpyxl with ``data_only=True``; '' for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dt.datetime):
        if value.time() == dt.time() and value.tzinfo is None:
            return value.date().isoformat()
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, int):
        return _integer(value, number_format)
    if isinstance(value, float):
        return _integer(int(value), number_format) if value.is_integer() else repr(value)
    return str(value)


def _integer(n: int, number_format: str | None) -> str:
    section = _first_section(number_format or "General")
    m = _ZERO_PADDED.fullmatch(section)
    if not m:
        return str(n)
    digits = str(abs(n)).zfill(len(m.group(2)))
    return _literal(m.group(1)) + ("-" if n < 0 else "") + digits + _literal(m.group(3))


def _first_section(fmt: str) -> str:
    # Sections are split by ';' outside quotes: positive;negative;zero;text. A colour or condition
    # prefix ([Red], [>100]) makes the format something other than plain zero padding.
    out, quoted = [], False
    for ch in fmt:
        if ch == '"':
            quoted = not quoted
        elif ch == ";" and not quoted:
            break
        out.append(ch)
    return "".join(out)


def _literal(part: str) -> str:
    return "".join(a or b for a, b in _LITERAL_PART.findall(part))
