"""The bad-input corpus: one table of distinct bad inputs, each with the exact outcome it must get.

An entry is `pytest.param(build, expected, id=...)`: `build(raw, slot, seed)` writes the bad input
under `raw` (in the folder `slot`, whose name gives it a unique item ID, unless the entry is about
names), using `seed` for unique content, and returns its manifest `source`; `expected` is a `Reason`
(status `rejected`) or `"ignored"`.
Every entry's bytes are unique, so no entry turns into another's `duplicate_content`.
`GOOD` lists items the same delivery must convert intact, with a function giving their expected array.
`WORKBOOK` lists label workbooks that cannot be used: `build(raw)` writes one and returns its path for
`[labels] workbook`; the run must stop before converting anything, with a usage error matching the pattern.
"""

from __future__ import annotations

from .dicom import DICOM, DICOM_GOOD
from .generic import GENERIC
from .nifti import NIFTI, NIFTI_GOOD
from .paths import PATHS, PATHS_GOOD
from .planar import PLANAR, PLANAR_GOOD
from .workbook import WORKBOOK

CORPUS = [*NIFTI, *DICOM, *PLANAR, *GENERIC, *PATHS]
GOOD = [*NIFTI_GOOD, *DICOM_GOOD, *PLANAR_GOOD, *PATHS_GOOD]

__all__ = ["CORPUS", "GOOD", "WORKBOOK"]
