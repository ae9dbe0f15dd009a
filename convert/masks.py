"""Label maps, slab by slab: class voxel counts, value checks, the stored dtype, and seeded class locations.

Invariant: a mask is never in memory whole. `MaskScan` (first pass over the
source's slabs) counts every class and checks the values; `ClassLocator`
(second pass, while the mask is written) keeps at most `cap` voxel locations
per class, drawn uniformly without replacement: the ranks to keep are drawn
up front from the first pass's counts, seeded by the mask's sha256, so the
same file and chunk plan give the same locations on any worker, in any run. Both
passes walk each slab in pieces of at most `PIECE` voxels, which bounds every
temporary (the boolean class map, the flat indexes) independently of the slab.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from labzarr.readers import Reason, Rejected, Slab

__all__ = ["PIECE", "ClassLocator", "MaskScan", "MaskSummary", "as_classes", "pieces", "smallest_int"]

PIECE = 1 << 20  # voxels per piece: 1 MiB of booleans, 8 MiB of flat indexes at worst
_BINCOUNT_MAX = 1 << 16  # class values below this are counted by bincount, others by unique


def pieces(data: npt.NDArray[Any]) -> Iterator[tuple[tuple[int, ...], npt.NDArray[Any]]]:
    """(offset, view) pieces of `data` of at most `PIECE` voxels, split along its largest axis."""
    axis = int(np.argmax(data.shape))
    per = max(1, data.size // max(1, data.shape[axis]))
    step = max(1, PIECE // per)
    for lo in range(0, data.shape[axis], step):
        sel = [slice(None)] * data.ndim
        sel[axis] = slice(lo, lo + step)
        offset = [0] * data.ndim
        offset[axis] = lo
        yield tuple(offset), data[tuple(sel)]


def _count(values: npt.NDArray[Any]) -> dict[int, int]:
    """Voxels per integer value in `values`."""
    if values.size == 0:
        return {}
    lo, hi = int(values.min()), int(values.max())
    if lo >= 0 and hi < _BINCOUNT_MAX:
        counts = np.bincount(values.ravel(), minlength=hi + 1)
        nz = np.flatnonzero(counts)
        return {int(v): int(counts[v]) for v in nz}
    uniq, counts = np.unique(values, return_counts=True)
    return {int(v): int(n) for v, n in zip(uniq, counts)}


def as_classes(piece: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A piece's class values as integers: float voxels rounded to the nearest integer."""
    if piece.dtype.kind == "f":
        rounded: npt.NDArray[Any] = np.rint(piece).astype(np.int64)
        return rounded
    if piece.dtype.kind in "iub":
        return piece if piece.dtype.kind != "b" else piece.astype(np.uint8)
    raise Rejected(Reason.UNSUPPORTED_FORMAT, f"mask voxels are {piece.dtype}; expected integer class values")


def smallest_int(lo: int, hi: int) -> np.dtype[Any]:
    """The smallest integer dtype holding lo..hi: unsigned when lo >= 0."""
    kinds = (np.uint8, np.uint16, np.uint32, np.uint64) if lo >= 0 else (np.int8, np.int16, np.int32, np.int64)
    for kind in kinds:
        info = np.iinfo(kind)
        if info.min <= lo and hi <= info.max:
            return np.dtype(kind)
    raise Rejected(Reason.UNSUPPORTED_FORMAT, f"mask classes {lo}..{hi} fit no integer dtype")


@dataclass(frozen=True, slots=True)
class MaskSummary:
    """What the first pass found: voxels per class (ascending), the stored dtype, and warnings."""

    counts: tuple[tuple[int, int], ...]
    dtype: np.dtype[Any]
    warnings: tuple[str, ...]


class MaskScan:
    """First pass: counts voxels per class and checks values are finite integers of the allowed classes."""

    def __init__(self, *, classes: Sequence[int] | None, policy: Literal["reject", "warn"]) -> None:
        self._classes, self._policy = (None if classes is None else frozenset(classes)), policy
        self.counts: Counter[int] = Counter()
        self.non_integer = 0
        self.non_finite = 0
        self._first: tuple[float, tuple[int, ...]] | None = None  # first non-integer value and where
        self.voxels = 0

    def update(self, slab: Slab) -> None:
        """Count one slab's classes, piece by piece."""
        starts = tuple(r.start for r in slab.region)
        for offset, piece in pieces(slab.data):
            self.voxels += piece.size
            if piece.dtype.kind == "f":
                finite = np.isfinite(piece)
                self.non_finite += int(piece.size - np.count_nonzero(finite))
                rounded = np.rint(np.where(finite, piece, 0))
                off = (rounded != piece) & finite
                n = int(np.count_nonzero(off))
                if n:
                    local = np.unravel_index(int(np.argmax(off)), off.shape)
                    where = tuple(int(s + o + i) for s, o, i in zip(starts, offset, local))
                    if self._first is None or where < self._first[1]:
                        self._first = (float(piece[local]), where)
                    self.non_integer += n
                values = rounded.astype(np.int64)
            else:
                values = as_classes(piece)
            self.counts.update(_count(values))

    def outcome(self) -> MaskSummary:
        """The counts and the smallest integer dtype that holds every class; raises or warns by policy."""
        if self.non_finite:
            raise Rejected(Reason.NON_FINITE, f"{self.non_finite:,} of {self.voxels:,} mask voxels are NaN/Inf; "
                                              "a label map needs a class at every voxel")
        warnings: list[str] = []
        if self.non_integer:
            assert self._first is not None
            value, where = self._first
            detail = (f"{self.non_integer:,} of {self.voxels:,} mask voxels are not integers "
                      f"(first {value:g} at {'(c,x,y,z)' if len(where) == 4 else '(c,y,x)'} = {where}); "
                      "expected integer class values")
            if self._policy == "reject":
                raise Rejected(Reason.CORRUPT_DATA, detail + ' ([masks] policy = "reject")')
            warnings.append(f"mask values: {detail}; rounded to the nearest integer ([masks] policy = \"warn\")")
        if self._classes is not None:
            unexpected = sorted(set(self.counts) - self._classes)
            if unexpected:
                found = ", ".join(f"{v} ({self.counts[v]:,} voxels)" for v in unexpected)
                detail = f"mask holds classes {found} not in [masks] classes {sorted(self._classes)}"
                if self._policy == "reject":
                    raise Rejected(Reason.CORRUPT_DATA, detail + ' ([masks] policy = "reject")')
                warnings.append(f"mask classes: {detail}; kept ([masks] policy = \"warn\")")
        present = sorted(self.counts) or [0]
        return MaskSummary(counts=tuple(sorted(self.counts.items())), dtype=smallest_int(present[0], present[-1]),
                           warnings=tuple(warnings))


class ClassLocator:
    """Second pass: keeps the voxels of each class whose rank (in slab/piece/C order) was drawn up front."""

    def __init__(self, counts: Sequence[tuple[int, int]], *, cap: int, seed: int, axes: int = 3) -> None:
        self._axes = axes  # spatial axes: a location's columns (3 for a volume, 2 for a 2D image)
        self._chosen: dict[int, npt.NDArray[np.int64]] = {}
        for i, (value, n) in enumerate(counts):
            rng = np.random.default_rng([seed, i])
            k = min(cap, n)
            self._chosen[value] = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
        self._seen: Counter[int] = Counter()
        self._found: dict[int, list[npt.NDArray[np.int64]]] = {v: [] for v in self._chosen}

    def update(self, slab: Slab) -> None:
        """Record the chosen voxels of one slab of class values (spatial coordinates, channel dropped)."""
        starts = tuple(r.start for r in slab.region)
        for offset, piece in pieces(slab.data):
            values = as_classes(piece)
            for value, m in _count(values).items():
                seen = self._seen[value]
                chosen = self._chosen.get(value)
                self._seen[value] = seen + m
                if chosen is None:
                    continue
                lo, hi = np.searchsorted(chosen, [seen, seen + m])
                if lo == hi:
                    continue
                flat = np.flatnonzero(values == value)[chosen[lo:hi] - seen]
                coords = np.stack(np.unravel_index(flat, piece.shape), axis=1)
                coords += np.asarray(starts, dtype=np.int64) + np.asarray(offset, dtype=np.int64)
                self._found[value].append(coords[:, 1:])

    def locations(self) -> tuple[npt.NDArray[np.int32], list[tuple[int, int, int, int]]]:
        """All kept locations (N, axes) int32 grouped by class ascending, each class sorted; and per class
        (value, voxels, start, stop) rows into that array."""
        blocks, ranges, at = [], [], 0
        for value in sorted(self._chosen):
            found = self._found[value]
            block = np.concatenate(found) if found else np.empty((0, self._axes), dtype=np.int64)
            block = block[np.lexsort(block.T[::-1])] if len(block) else block
            blocks.append(block.astype(np.int32))
            ranges.append((value, int(self._seen[value]), at, at + len(block)))
            at += len(block)
        out = np.concatenate(blocks) if blocks else np.empty((0, self._axes), dtype=np.int32)
        return out, ranges
