"""StratifiedSampler: class-balanced epochs, the same on every rank, split into equal DDP shards.

Invariant: an epoch's global sequence is a pure function of `(seed, epoch)` and
the dataset's labels; rank `r` of `R` takes positions `r, r + R, r + 2R, ...` of
it, so the shards of one epoch partition it exactly and have equal lengths. The
sampler yields `(epoch, index)` keys, so DataLoader workers that outlive an
epoch (`persistent_workers=True`) still read that epoch's patches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import Sampler

if TYPE_CHECKING:
    from .dataset import PatchDataset

__all__ = ["StratifiedSampler"]

_STREAM = 0x5A3  # separates the sampler's random stream from the patch origins' (seed, epoch, i)


class StratifiedSampler(Sampler[tuple[int, int]]):
    """Each epoch draws every class equally often (counts differ by at most one), then shuffles.

    Parameters
    ----------
    dataset:
        The PatchDataset to sample; its epoch (`ds.set_epoch` or this sampler's `set_epoch`) selects the epoch.
    label:
        The label to balance (default: the dataset's `label`).
    replacement:
        False: within an epoch, the samples of a class are drawn equally often (to within one): a small
        class is cycled through, a large one subsampled afresh each epoch. True: independent draws.
    num_samples:
        Draws per epoch over all ranks (default ``len(dataset)``), rounded up to a multiple of `num_replicas`.
    num_replicas, rank:
        The DDP world size and this process's rank (default: from ``torch.distributed`` when initialised,
        else 1 and 0).
    seed:
        The sampler's seed (default: the dataset's).
    """

    def __init__(self, dataset: PatchDataset, label: str | None = None, *, replacement: bool = False,
                 num_samples: int | None = None, num_replicas: int | None = None, rank: int | None = None,
                 seed: int | None = None) -> None:
        label = label if label is not None else dataset.label
        if label is None:
            raise ValueError("stratified_sampler needs a label: pass one, or build the PatchDataset with label=...")
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank = {rank}, num_replicas = {num_replicas}; expected 0 <= rank < num_replicas")
        total = len(dataset) if num_samples is None else num_samples
        if total < 1:
            raise ValueError(f"num_samples = {num_samples}; expected >= 1")
        self.dataset, self.label, self.replacement = dataset, label, replacement
        self.num_replicas, self.rank = num_replicas, rank
        self.seed = dataset.seed if seed is None else seed
        self.total = -(-total // num_replicas) * num_replicas  # equal shards: round up to a multiple of R
        self.classes, item_targets = dataset.encode(label) if label != dataset.label else \
            (dataset.classes, dataset.targets)
        targets = np.asarray(item_targets, dtype=np.int64)[dataset.item_positions()]
        # Sample indexes of each class that has any; an absent class cannot be drawn.
        self.pools: tuple[npt.NDArray[np.int64], ...] = tuple(
            np.flatnonzero(targets == c) for c in range(len(self.classes)) if (targets == c).any())

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (sets the dataset's epoch too: one epoch for both)."""
        self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        return self.total // self.num_replicas

    def epoch_indices(self, epoch: int | None = None) -> npt.NDArray[np.int64]:
        """The whole epoch's sample indexes over all ranks, in order (the same on every rank)."""
        epoch = self.epoch if epoch is None else epoch
        rng = np.random.default_rng([self.seed, epoch, _STREAM])
        n = len(self.pools)
        counts = np.full(n, self.total // n, dtype=np.int64)
        counts[rng.permutation(n)[: self.total % n]] += 1  # which classes get the remainder rotates by epoch
        parts = [self._draw(rng, pool, int(c)) for pool, c in zip(self.pools, counts)]
        out = np.concatenate(parts)
        rng.shuffle(out)
        return out

    def _draw(self, rng: np.random.Generator, pool: npt.NDArray[np.int64], count: int) -> npt.NDArray[np.int64]:
        if self.replacement:
            return rng.choice(pool, size=count, replace=True)
        cycles = -(-count // len(pool))
        return np.concatenate([rng.permutation(pool) for _ in range(cycles)])[:count]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        shard = self.epoch_indices(epoch)[self.rank :: self.num_replicas]
        return iter([(epoch, int(i)) for i in shard])

    def __repr__(self) -> str:
        return (f"StratifiedSampler(label={self.label!r}, classes={len(self.classes)}, len={len(self)}, "
                f"rank={self.rank}/{self.num_replicas}, replacement={self.replacement}, epoch={self.epoch})")
