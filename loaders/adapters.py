"""Adapters that seed MONAI and TorchIO transforms from the sample's key, so they stay pure functions of it.

Invariant: an adapter leaves no global random state behind. MONAI's randomizable transforms keep
their own `numpy.random.RandomState`, which `MonaiTransform` resets from the key before each call;
TorchIO draws from torch's global generator, which `TorchioTransform` seeds from the key inside
`torch.random.fork_rng`, so the caller's generator state is restored afterwards. Neither library
is a dependency of labzarr: MONAI needs no import here at all, and TorchIO is imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .augment import Sample, SeededTransform

__all__ = ["MonaiTransform", "TorchioTransform"]


def _plain(value: object) -> object:
    """A tensor subclass (MONAI's MetaTensor, ...) as a plain tensor: what labzarr's samples hold."""
    return value.as_subclass(torch.Tensor) if isinstance(value, torch.Tensor) else value


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31))


class MonaiTransform(SeededTransform):
    """A MONAI dictionary transform (``RandFlipd(keys=["image"], ...)``, a ``Compose`` of them) seeded by the key.

    A randomizable transform (one with ``set_random_state``; MONAI's ``Compose`` passes it on to its
    members) gets a fresh random state drawn from the key's generator before each call; others are called
    as they are. Tensors come back as plain tensors. One adapter serves one dataset: the state it sets lives
    in the transform object, so do not call it from two threads at once.
    """

    def __init__(self, transform: Callable[[Sample], Any]) -> None:
        if not callable(transform):
            raise TypeError(f"MonaiTransform({transform!r}): expected a MONAI dictionary transform")
        self.transform = transform

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        seed = _seed(rng)
        set_state = getattr(self.transform, "set_random_state", None)
        if set_state is not None:
            set_state(seed=seed)
        out = self.transform(dict(sample))
        if not isinstance(out, dict):
            raise TypeError(f"MonaiTransform: {self.transform!r} returned {type(out).__name__}; expected a "
                            "dictionary transform (the 'd' variants: RandFlipd, not RandFlip)")
        return {k: _plain(v) for k, v in out.items()}

    def __repr__(self) -> str:
        return f"MonaiTransform({self.transform!r})"


class TorchioTransform(SeededTransform):
    """A TorchIO transform (``tio.RandomFlip(...)``, a ``tio.Compose``) applied to a sample's roles, seeded by
    the key.

    Each of `images` becomes a ``ScalarImage`` and each of `labels` a ``LabelMap`` of one ``Subject``, with
    an identity affine (so millimetre arguments are voxels); a 2D ``(C, H, W)`` sample gets a trailing axis of
    one voxel for TorchIO and loses it again. Torch's global generator is seeded from the key inside
    ``torch.random.fork_rng``: the caller's generator state is unchanged afterwards.
    """

    def __init__(self, transform: Callable[[Any], Any], *, images: Sequence[str] = ("image",),
                 labels: Sequence[str] = ()) -> None:
        if not callable(transform):
            raise TypeError(f"TorchioTransform({transform!r}): expected a TorchIO transform")
        if isinstance(images, str) or isinstance(labels, str):
            raise TypeError("TorchioTransform: images= and labels= take sequences of role names, e.g. ('image',)")
        self.transform, self.images, self.labels = transform, tuple(images), tuple(labels)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        tio = importlib.import_module("torchio")  # optional: only a dataset using this adapter needs it
        seed = _seed(rng)
        flat = {role: sample[role].ndim == 3 for role in (*self.images, *self.labels)}
        def image(role: str, cls: Any) -> Any:
            x = sample[role]
            return cls(tensor=x.unsqueeze(-1) if flat[role] else x, affine=np.eye(4))
        subject = tio.Subject({**{r: image(r, tio.ScalarImage) for r in self.images},
                               **{r: image(r, tio.LabelMap) for r in self.labels}})
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self.transform(subject)
        result = dict(sample)
        for role in flat:
            x = out[role].data
            result[role] = _plain(x.squeeze(-1) if flat[role] else x)
        return result

    def __repr__(self) -> str:
        return f"TorchioTransform({self.transform!r}, images={self.images!r}, labels={self.labels!r})"
