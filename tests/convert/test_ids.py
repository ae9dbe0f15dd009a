from __future__ import annotations

import pytest

from labzarr.convert import normalize_id

ALL = ["strip", "casefold", "drop_separators", "strip_leading_zeros"]


@pytest.mark.parametrize(("raw", "steps", "want"), [
    (" CASE-007 ", ["strip"], "CASE-007"),
    ("CASE-007", ["casefold"], "case-007"),
    ("case-007", ["drop_separators"], "case007"),
    ("case_0_07", ["drop_separators"], "case007"),
    ("Case 007", ["drop_separators"], "Case007"),
    ("case\u2013007", ["drop_separators"], "case007"),  # en dash (Excel autocorrect)
    ("case\u2212007", ["drop_separators"], "case007"),  # minus sign
    ("case007", ["strip_leading_zeros"], "case7"),
    ("000", ["strip_leading_zeros"], "0"),
    ("a007b0010", ["strip_leading_zeros"], "a7b10"),
    ("\u00a0case_7\u00a0", ALL, "case7"),
    (" CASE-007 ", ALL, "case7"),
    ("Case 07", ALL, "case7"),
    ("007", ALL, "7"),
    ("Cafe\u0301", ["casefold"], "caf\u00e9"),  # NFC first: the decomposed e + accent is one letter
    (" CASE-007 ", [], " CASE-007 "),
])
def test_normalize_id(raw: str, steps: list[str], want: str) -> None:
    assert normalize_id(raw, steps) == want


def test_unknown_step_is_a_bug_not_a_silent_skip() -> None:
    with pytest.raises(ValueError, match="unknown id_normalize step 'upper'"):
        normalize_id("x", ["upper"])
