"""A reader a lab might plug in through `[run] readers`: NumPy `.npy` arrays as volumes (masks saved from Python).

`.npy` carries no geometry, so the volume gets 1 mm voxels at the origin (identity affine): the test pairs it
with a NIfTI image saved with that affine. Workers import this module by name (`tests.plugin_readers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from labzarr.readers import Head, Limits, Reason, Rejected, Volume

NPY_MAGIC = b"\x93NUMPY"
PLUGINS = ["tests.plugin_readers:NpyReader"]


class NpyReader:
    """A 3D `.npy` array as a one-channel volume in RAS order with an identity affine."""

    kind: ClassVar[str] = "npy"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(NPY_MAGIC)

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise Rejected(Reason.CORRUPT_DATA, f"numpy could not load it: {exc}") from exc
        if data.ndim != 3:
            raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{data.ndim}D array, expected 3D (x, y, z)")
        eye = tuple(tuple(float(i == j) for j in range(4)) for i in range(4))
        return Volume(kind=self.kind, data=data[np.newaxis], spacing=(1.0, 1.0, 1.0), affine=eye, orientation="RAS")
