"""Patch geometry, pure and I/O-free: where a patch lies in an item, and which part of it holds data.

Invariant: a patch of `size` at `origin` (which may be negative, or reach past the
item, only when the item is smaller than the patch along that axis) always has
`size`; the voxels outside the item are padding, and `valid` names the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

__all__ = ["Region", "Walk", "around", "centered_origin", "grid_axis", "grid_origins", "random_origin", "region",
           "walk_origin"]


@dataclass(frozen=True, slots=True)
class Region:
    """A patch of `size` at `origin`; `source` slices the item, `valid` the patch, both the same extent."""

    origin: tuple[int, ...]
    size: tuple[int, ...]
    source: tuple[slice, ...]
    valid: tuple[slice, ...]

    @property
    def padded(self) -> bool:
        """True when part of the patch lies outside the item."""
        return any(v.stop - v.start != s for v, s in zip(self.valid, self.size))


def region(shape: Sequence[int], origin: Sequence[int], size: Sequence[int]) -> Region:
    """The overlap of a patch (`origin`, `size`) with an item of spatial `shape`."""
    source, valid = [], []
    for n, o, p in zip(shape, origin, size):
        lo, hi = max(o, 0), min(o + p, n)
        if hi <= lo:  # no overlap on this axis: an empty, all-padding patch
            lo = hi = min(max(o, 0), n)
        source.append(slice(lo, hi))
        valid.append(slice(lo - o, lo - o + (hi - lo)))
    return Region(origin=tuple(int(o) for o in origin), size=tuple(int(p) for p in size), source=tuple(source),
                  valid=tuple(valid))


def centered_origin(n: int, p: int) -> int:
    """Where a patch of `p` starts so an axis of `n < p` voxels sits in its middle (negative: padding before)."""
    return -((p - n) // 2)


def random_origin(rng: np.random.Generator, shape: Sequence[int], size: Sequence[int]) -> tuple[int, ...]:
    """A uniform origin that keeps the patch inside the item; centred on axes shorter than the patch."""
    return tuple(int(rng.integers(0, n - p + 1)) if n >= p else centered_origin(n, p) for n, p in zip(shape, size))


def around(rng: np.random.Generator, voxel: Sequence[int], shape: Sequence[int],
           size: Sequence[int]) -> tuple[int, ...]:
    """An origin that puts `voxel` near the patch centre, jittered by up to a quarter patch (nnU-Net's
    foreground oversampling); the voxel stays inside the patch, which stays inside the item where it fits."""
    origin = []
    for v, p, n in zip(voxel, size, shape):
        jitter = int(rng.integers(-(p // 4), p // 4 + 1))
        origin.append(int(np.clip(int(v) - p // 2 + jitter, 0, n - p)) if n >= p else centered_origin(n, p))
    return tuple(origin)


@dataclass(frozen=True, slots=True)
class Walk:
    """A walk over every origin `random_origin` can give in an item, without repeats (see `walk_origin`)."""

    shape: tuple[int, ...]
    size: tuple[int, ...]
    extents: tuple[int, ...]
    start: int
    stride: int

    @classmethod
    def draw(cls, rng: np.random.Generator, shape: Sequence[int], size: Sequence[int]) -> Walk:
        """The walk `rng` fixes: a uniform start and a stride coprime to the number of origins."""
        extents = tuple(n - p + 1 if n >= p else 1 for n, p in zip(shape, size))
        total = math.prod(extents)
        start = int(rng.integers(total))
        stride = 1
        if total > 2:
            while True:  # a stride coprime to total is what makes the walk visit every origin once
                stride = int(rng.integers(1, total))
                if math.gcd(stride, total) == 1:
                    break
        return cls(tuple(shape), tuple(size), extents, start, stride)

    def origin(self, step: int) -> tuple[int, ...]:
        """The walk's `step`-th origin."""
        flat = (self.start + step * self.stride) % math.prod(self.extents)  # Python ints: no overflow
        pos = np.unravel_index(flat, self.extents)
        return tuple(int(q) if n >= p else centered_origin(n, p) for q, n, p in zip(pos, self.shape, self.size))


def walk_origin(rng: np.random.Generator, shape: Sequence[int], size: Sequence[int], step: int) -> tuple[int, ...]:
    """The `step`-th origin of a walk over every origin `random_origin` can give, without repeats.

    `rng` (the same state for every step) fixes a uniform start and a stride coprime to the number of
    origins, so steps ``0 .. n_origins - 1`` are distinct origins and each one alone is uniform; later
    steps cycle. Oversampling an item draws each repeat from the next step: a repeat is a new patch
    while the item has one left.
    """
    return Walk.draw(rng, shape, size).origin(step)


def grid_axis(n: int, p: int, overlap: int) -> tuple[int, ...]:
    """Tile starts along one axis: every `p - overlap` voxels, the last tile shifted back to end at the border.

    Like MONAI's sliding window and nnU-Net's tiling, tiles stay inside the item (no padding) unless the
    item is shorter than the patch, where one centred tile covers it.
    """
    if n <= p:
        return (centered_origin(n, p),)
    starts = list(range(0, n - p + 1, p - overlap))
    if starts[-1] + p < n:
        starts.append(n - p)
    return tuple(starts)


def grid_origins(shape: Sequence[int], size: Sequence[int], overlap: Sequence[int]) -> list[tuple[int, ...]]:
    """Every tile origin of an item, in C order (last axis fastest)."""
    axes = [grid_axis(n, p, o) for n, p, o in zip(shape, size, overlap)]
    return [tuple(t) for t in product(*axes)]
