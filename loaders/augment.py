"""Seeded augmentation: random transforms that stay a pure function of the sample's key.

Invariant: a `SeededTransform` draws every random number from the generator it is handed, never
from numpy's, torch's or Python's global state. `PatchDataset` hands each sample a
`numpy.random.Generator` keyed by `(seed, epoch, i)` (and the repeat, see `PatchDataset.locate`),
from a stream of its own apart from the patch origin's, so a flipped, rotated or noised sample is
the same in every worker, under every start method, and after a resume.

The protocol is a marker class, not a guess from the signature: a transform that is an instance of
`SeededTransform` is called as ``transform(sample, rng)``; any other callable as ``transform(sample)``.
Wrap a plain ``fn(sample, rng)`` with `seeded`. Geometric transforms (`RandomFlip`, `RandomRot90`)
move every tensor of the sample alike (``image``, ``mask``, ...: a sample's tensors are its roles);
intensity transforms change one role (``image`` by default) and return float32.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Compose", "GaussianNoise", "RandomFlip", "RandomIntensity", "RandomRot90", "SeededTransform", "seeded"]

Sample = dict[str, Any]


class SeededTransform(ABC):
    """A transform that takes the sample and a generator keyed by the sample (see the module docstring)."""

    @abstractmethod
    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        """The transformed sample; every random draw comes from `rng`."""


@dataclass(frozen=True, slots=True)
class _Wrapped(SeededTransform):
    fn: Callable[[Sample, np.random.Generator], Sample]

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        return self.fn(sample, rng)


def seeded(fn: Callable[[Sample, np.random.Generator], Sample]) -> SeededTransform:
    """Mark a plain ``fn(sample, rng)`` as a seeded transform, so `PatchDataset` hands it the generator."""
    if not callable(fn):
        raise TypeError(f"seeded({fn!r}): expected a callable fn(sample, rng)")
    return _Wrapped(fn)


def apply(transform: Callable[..., Sample], sample: Sample, rng: Callable[[], np.random.Generator]) -> Sample:
    """Call `transform` by the protocol: with a generator (made by `rng`, only when needed) if it is seeded."""
    return transform(sample, rng()) if isinstance(transform, SeededTransform) else transform(sample)


@dataclass(frozen=True, slots=True, init=False)
class Compose(SeededTransform):
    """Transforms applied in order, seeded or not, drawing in turn from the one generator."""

    transforms: tuple[Callable[..., Sample], ...]

    def __init__(self, *transforms: Callable[..., Sample]) -> None:
        for t in transforms:
            if not callable(t):
                raise TypeError(f"Compose: {t!r} is not a transform (expected a callable)")
        object.__setattr__(self, "transforms", tuple(transforms))

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        for t in self.transforms:
            sample = apply(t, sample, lambda: rng)
        return sample


def _tensors(sample: Sample) -> list[str]:
    return [k for k, v in sample.items() if isinstance(v, torch.Tensor)]


def _spatial_axes(sample: Sample, axes: Sequence[int] | None) -> tuple[int, ...]:
    keys = _tensors(sample)
    if not keys:
        raise ValueError("the sample holds no tensor to transform")
    n = sample[keys[0]].ndim - 1
    chosen = tuple(range(n)) if axes is None else tuple(axes)
    if any(not 0 <= a < n for a in chosen):
        raise ValueError(f"axes = {axes!r}; the sample's tensors have {n} spatial axes (0..{n - 1})")
    return chosen


def _check_p(name: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: p = {p}; expected a probability in [0, 1]")


@dataclass(frozen=True, slots=True)
class RandomFlip(SeededTransform):
    """Flip each of `axes` (spatial axes, 0-based; default all) with probability `p`, every tensor alike."""

    axes: tuple[int, ...] | None = None
    p: float = 0.5

    def __post_init__(self) -> None:
        _check_p("RandomFlip", self.p)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        axes = _spatial_axes(sample, self.axes)
        dims = [a + 1 for a, u in zip(axes, rng.random(len(axes))) if u < self.p]
        if dims:
            sample = {**sample, **{k: torch.flip(sample[k], dims) for k in _tensors(sample)}}
        return sample


@dataclass(frozen=True, slots=True)
class RandomRot90(SeededTransform):
    """With probability `p`, rotate the plane of two spatial `axes` by 90, 180 or 270 degrees, every tensor
    alike. A patch that is not square in that plane changes shape; keep those sides equal to batch it."""

    axes: tuple[int, int] = (0, 1)
    p: float = 0.5

    def __post_init__(self) -> None:
        _check_p("RandomRot90", self.p)
        if len(self.axes) != 2 or self.axes[0] == self.axes[1]:
            raise ValueError(f"RandomRot90: axes = {self.axes!r}; expected two different spatial axes, e.g. (0, 1)")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        a, b = _spatial_axes(sample, self.axes)
        turn, k = rng.random(), int(rng.integers(1, 4))  # both drawn always: the stream does not depend on p
        if turn < self.p:
            sample = {**sample, **{key: torch.rot90(sample[key], k, (a + 1, b + 1)) for key in _tensors(sample)}}
        return sample


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.float32)


@dataclass(frozen=True, slots=True)
class RandomIntensity(SeededTransform):
    """``x * s + t`` on `role` with `s` and `t` drawn uniformly from `scale` and `shift`, per channel (after
    `Normalize`, where the shift is in standard deviations); with probability `p`, else unchanged."""

    scale: tuple[float, float] = (0.9, 1.1)
    shift: tuple[float, float] = (-0.1, 0.1)
    p: float = 1.0
    role: str = "image"

    def __post_init__(self) -> None:
        _check_p("RandomIntensity", self.p)
        for name, (lo, hi) in (("scale", self.scale), ("shift", self.shift)):
            if not lo <= hi:
                raise ValueError(f"RandomIntensity: {name} = {(lo, hi)}; expected (low, high) with low <= high")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        x = sample[self.role]
        c = x.shape[0]
        turn, s, t = rng.random(), rng.uniform(*self.scale, size=c), rng.uniform(*self.shift, size=c)
        if turn >= self.p:
            return sample
        view = (c,) + (1,) * (x.ndim - 1)
        scale, shift = (torch.from_numpy(v.astype(np.float32)).view(view) for v in (s, t))
        return {**sample, self.role: _float(x) * scale + shift}


@dataclass(frozen=True, slots=True)
class GaussianNoise(SeededTransform):
    """Add zero-mean Gaussian noise of deviation `std` to `role`, with probability `p`."""

    std: float = 0.1
    p: float = 0.5
    role: str = "image"

    def __post_init__(self) -> None:
        _check_p("GaussianNoise", self.p)
        if self.std < 0:
            raise ValueError(f"GaussianNoise: std = {self.std}; expected >= 0")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return sample
        x = sample[self.role]
        noise = rng.normal(0.0, self.std, size=tuple(x.shape)).astype(np.float32)
        return {**sample, self.role: _float(x) + torch.from_numpy(noise)}
