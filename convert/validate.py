"""Validation policy applied to decoded items, beyond what a reader checks about its format."""

from __future__ import annotations

from typing import Literal

import numpy as np

from labzarr.readers import Reason, Rejected, Volume

__all__ = ["check_finite"]


def check_finite(volume: Volume, policy: Literal["reject", "warn"]) -> tuple[str, ...]:
    """Raise `non_finite` (policy reject) or return a warning (policy warn) when voxels are NaN/Inf."""
    data = volume.data
    if data.dtype.kind != "f":
        return ()
    finite = np.isfinite(data)
    if finite.all():
        return ()
    bad = int(data.size - np.count_nonzero(finite))
    first = tuple(int(v) for v in np.argwhere(~finite)[0])
    detail = (f"{bad:,} of {data.size:,} voxels are NaN/Inf (first at (c,x,y,z) = {first}); "
              f"expected 0 ([validate] non_finite = \"{policy}\")")
    if policy == "reject":
        raise Rejected(Reason.NON_FINITE, detail)
    return (f"non_finite: {detail}",)
