"""Intensity normalisation from a store's statistics: no pass over the data before training.

`Normalize` takes a `DatasetStats` (usually ``ds.stats(split="train")``, so
validation voxels never shape the normalisation) and turns it into fixed
per-channel constants; applying it is elementwise arithmetic on a sample's
image, in the DataLoader worker. Two schemes:

- ``"zscore"``: ``(x - mean) / std``.
- ``"ct"``: nnU-Net's CTNormalization -- clip to the ``lower``/``upper``
  percentiles, then ``(x - mean) / std``, all taken over the mask foreground
  (every class but 0 and the ignore labels) when the store has masks.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from labzarr.store import ChannelStats, DatasetStats

from ._sample import Sample

__all__ = ["Normalize", "Scheme"]

Scheme = Literal["zscore", "ct"]
_EPS = 1e-8  # nnU-Net's floor on the deviation: a constant channel maps to 0, not to NaN


@dataclass(frozen=True, slots=True)
class Normalize:
    """A transform normalising a sample's ``role`` tensor ``(C, *patch)`` channel by channel.

    Build it with `Normalize.of`; the fields are the constants it applies: ``(x - shift) / scale`` after
    clipping to ``clip`` (per channel; None: no clipping).
    """

    shift: tuple[float, ...]
    scale: tuple[float, ...]
    clip: tuple[tuple[float, float], ...] | None = None
    role: str = "image"

    @classmethod
    def of(cls, stats: DatasetStats, scheme: Scheme = "zscore", *, foreground: bool | None = None,
           ignore: Collection[int] = (), lower: float = 0.5, upper: float = 99.5, role: str = "image") -> Normalize:
        """The normalisation `scheme` describes, from `stats`.

        ``foreground``: take the statistics over the mask foreground (classes but 0 and `ignore`); default
        True for ``"ct"`` when the store has masks, else False. Raises ValueError when the statistics needed
        are missing (a store converted with ``[store] statistics = false``, or no masks for ``foreground``).
        """
        if scheme not in ("zscore", "ct"):
            raise ValueError(f"scheme = {scheme!r}; expected 'zscore' or 'ct'")
        if stats.missing:
            raise ValueError(f"{stats.missing} of {stats.items} items have no statistics (converted with "
                             "[store] statistics = false, or by an older labzarr); convert again to normalise "
                             "from the store")
        fg = stats.foreground(ignore=ignore)
        use_fg = (scheme == "ct" and bool(fg)) if foreground is None else foreground
        if use_fg and not fg:
            raise ValueError("foreground=True, but the store has no mask classes to take a foreground from")
        channels: Sequence[ChannelStats] = fg if use_fg else stats.channels
        if not channels or any(c.count == 0 for c in channels):
            raise ValueError("no voxels to take statistics from (an empty selection, or an empty foreground)")
        clip = tuple((c.percentile(lower), c.percentile(upper)) for c in channels) if scheme == "ct" else None
        return cls(shift=tuple(c.mean for c in channels), scale=tuple(max(c.std, _EPS) for c in channels),
                   clip=clip, role=role)

    def __call__(self, sample: Sample) -> Sample:
        x = sample[self.role]
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"Normalize: sample[{self.role!r}] is {type(x).__name__}, expected a tensor")
        if x.shape[0] != len(self.shift):
            raise ValueError(f"Normalize: sample[{self.role!r}] has {x.shape[0]} channels, the statistics "
                             f"{len(self.shift)}")
        view = (-1, *([1] * (x.dim() - 1)))
        out = x.to(torch.float32)
        if self.clip is not None:
            lo = torch.tensor([c[0] for c in self.clip], dtype=torch.float32).view(view)
            hi = torch.tensor([c[1] for c in self.clip], dtype=torch.float32).view(view)
            out = torch.clamp(out, lo, hi)
        shift = torch.tensor(self.shift, dtype=torch.float32).view(view)
        scale = torch.tensor(self.scale, dtype=torch.float32).view(view)
        return {**sample, self.role: (out - shift) / scale}
