"""Validation policy applied to decoded items, beyond what a reader checks about its format.

`FiniteCheck` sees a volume slab by slab: it counts NaN/Inf voxels and keeps
the first one in canonical (c, x, y, z) order, so the detail is the same
whatever order or size the slabs came in, and whichever workers saw them.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from labzarr.readers import MemorySource, Reason, Rejected, Slab, Volume, VolumeHeader

__all__ = ["FiniteCheck", "check_finite"]


class FiniteCheck:
    """Accumulates NaN/Inf counts over slabs; `outcome()` raises `non_finite` or returns warnings."""

    def __init__(self, header: VolumeHeader, policy: Literal["reject", "warn"]) -> None:
        self._policy = policy
        self._applies = np.dtype(header.dtype).kind == "f"
        self._size = int(np.prod(header.shape, dtype=np.int64))
        self.bad = 0
        self._first: tuple[int, ...] | None = None

    @property
    def rejecting(self) -> bool:
        """True once the item is sure to be rejected: its voxels need not be written."""
        return self.bad > 0 and self._policy == "reject"

    def update(self, slab: Slab) -> None:
        """Count the slab's non-finite voxels."""
        if not self._applies:
            return
        nonfinite: np.ndarray[Any, np.dtype[np.bool_]] = ~np.isfinite(slab.data)
        n = int(np.count_nonzero(nonfinite))
        if not n:
            return
        self.bad += n
        local = np.unravel_index(int(np.argmax(nonfinite)), nonfinite.shape)
        first = tuple(int(i) + r.start for i, r in zip(local, slab.region))
        if self._first is None or first < self._first:
            self._first = first

    def tally(self) -> tuple[int, tuple[int, ...] | None]:
        """(non-finite voxels counted, the first one's (c, x, y, z) or None): what `absorb` takes."""
        return self.bad, self._first

    def absorb(self, bad: int, first: tuple[int, ...] | None) -> None:
        """Add another check's `tally` over other slabs of the same volume (the parts of a volume written in parts)."""
        self.bad += bad
        if first is not None and (self._first is None or first < self._first):
            self._first = first

    def outcome(self) -> tuple[str, ...]:
        """Raise `non_finite` (policy reject) or return a warning (policy warn) when voxels were NaN/Inf."""
        if not self.bad:
            return ()
        detail = (f"{self.bad:,} of {self._size:,} voxels are NaN/Inf (first at (c,x,y,z) = {self._first}); "
                  f"expected 0 ([validate] non_finite = \"{self._policy}\")")
        if self._policy == "reject":
            raise Rejected(Reason.NON_FINITE, detail)
        return (f"non_finite: {detail}",)


def check_finite(volume: Volume, policy: Literal["reject", "warn"]) -> tuple[str, ...]:
    """`FiniteCheck` over a whole in-memory volume."""
    source = MemorySource(volume)
    check = FiniteCheck(source.header, policy)
    for slab in source.slabs(volume.data.shape):
        check.update(slab)
    return check.outcome()
