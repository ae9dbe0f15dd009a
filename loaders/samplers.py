"""Samplers: class-balanced (`StratifiedSampler`) or plain shuffled (`ShuffleSampler`) epochs, the same on every
rank, split into DDP shards, and resumable mid-epoch on the same or another world size.

Invariant: an epoch's global sequence is a pure function of `(seed, epoch)` and the dataset's
labels. Its positions are dealt to the ranks: by sample, rank `r` of `R` takes every `R`-th
position from `r` (a fresh epoch's length is rounded up to a multiple of `R`, so the shards have
equal lengths); by group (`shard_by="group"`), whole groups (a patient: `IndexItem.split_group`)
go to the rank with the fewest samples so far, in an order keyed by `(seed, epoch)`. The
sampler yields `(epoch, index)` keys, so DataLoader workers that outlive an epoch
(`persistent_workers=True`) still read that epoch's patches.

Resuming: a state (`state_dict`) holds the epoch and the history of what was consumed in it,
as (world size, samples each rank's training loop took) segments. Replaying the history over
the epoch's sequence is pure: deal the remaining positions to that world size, drop what each
rank took, repeat; what is left is dealt to the current world size. So a run killed at any step
and resumed on any number of ranks sees every position of the epoch exactly once.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import Sampler

if TYPE_CHECKING:
    from .dataset import PatchDataset

__all__ = ["ShardBy", "ShuffleSampler", "StratifiedSampler"]

ShardBy = Literal["sample", "group"]
STATE_FORMAT = "labzarr.sampler/1"
_STREAM = 0x5A3  # separates the sampler's random stream from the patch origins' (seed, epoch, i)
_GROUP_STREAM = 0x5A4  # the order groups are dealt to ranks in
_SHUFFLE_STREAM = 0x5A5

History = tuple[tuple[int, tuple[int, ...]], ...]


class _EpochSampler(Sampler[tuple[int, int]]):
    """What both samplers share: the DDP deal, by sample or by group, and resuming mid-epoch."""

    def __init__(self, dataset: PatchDataset, *, num_samples: int | None, num_replicas: int | None,
                 rank: int | None, seed: int | None, shard_by: ShardBy) -> None:
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank = {rank}, num_replicas = {num_replicas}; expected 0 <= rank < num_replicas")
        if shard_by not in ("sample", "group"):
            raise ValueError(f"shard_by = {shard_by!r}; expected 'sample' or 'group'")
        total = len(dataset) if num_samples is None else num_samples
        if total < 1:
            raise ValueError(f"num_samples = {num_samples}; expected >= 1")
        self.dataset, self.num_replicas, self.rank, self.shard_by = dataset, num_replicas, rank, shard_by
        self.seed = dataset.seed if seed is None else seed
        # Equal shards by sample: round up to a multiple of R (group shards differ in length anyway).
        self.total = -(-total // num_replicas) * num_replicas if shard_by == "sample" else total
        self._resume: tuple[int, int, History] | None = None  # (epoch, its length, consumed segments)
        group_keys = [dataset.items[k].split_group for k in dataset.item_positions()]
        self._group_names, codes = np.unique(np.asarray(group_keys, dtype=object), return_inverse=True)
        self._group_of: npt.NDArray[np.int64] = np.asarray(codes, dtype=np.int64)  # group code of each sample

    # -- the epoch -----------------------------------------------------------------------------------------

    def epoch_indices(self, epoch: int | None = None) -> npt.NDArray[np.int64]:
        """The whole epoch's sample indexes over all ranks, in order (the same on every rank)."""
        epoch = self.epoch if epoch is None else epoch
        return self._sequence(epoch, self._length(epoch))

    def _sequence(self, epoch: int, total: int) -> npt.NDArray[np.int64]:
        raise NotImplementedError

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (sets the dataset's epoch too: one epoch for both). A resumed epoch's history is kept
        while the epoch is the one it belongs to."""
        self.dataset.set_epoch(epoch)

    def _length(self, epoch: int) -> int:
        return self._resume[1] if self._resume is not None and self._resume[0] == epoch else self.total

    def _history(self, epoch: int) -> History:
        return self._resume[2] if self._resume is not None and self._resume[0] == epoch else ()

    # -- dealing positions to ranks ------------------------------------------------------------------------

    def _deal(self, positions: npt.NDArray[np.int64], sequence: npt.NDArray[np.int64], replicas: int,
              epoch: int) -> list[npt.NDArray[np.int64]]:
        """Each rank's positions (in epoch order) of `positions`, among `replicas` ranks."""
        if self.shard_by == "sample":
            return [positions[r::replicas] for r in range(replicas)]
        groups = self._group_of[sequence[positions]]
        present, sizes = np.unique(groups, return_counts=True)
        order = np.random.default_rng([self.seed, epoch, _GROUP_STREAM]).permutation(len(present))
        loads = [(0, r) for r in range(replicas)]  # (samples so far, rank): the lightest, then the lowest rank
        owner = np.empty(len(self._group_names), dtype=np.int64)
        for g in order:
            load, r = heapq.heappop(loads)
            owner[present[g]] = r
            heapq.heappush(loads, (load + int(sizes[g]), r))
        ranks = owner[groups]
        return [positions[ranks == r] for r in range(replicas)]

    def _remaining(self, epoch: int, sequence: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The epoch's positions no segment of its history consumed, in epoch order."""
        remaining = np.arange(len(sequence), dtype=np.int64)
        for replicas, taken in self._history(epoch):
            shares = self._deal(remaining, sequence, replicas, epoch)
            done = np.concatenate([s[:k] for s, k in zip(shares, taken)])
            remaining = remaining[~np.isin(remaining, done)]
        return remaining

    def _shares(self, epoch: int) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[np.int64]]]:
        sequence = self._sequence(epoch, self._length(epoch))
        return sequence, self._deal(self._remaining(epoch, sequence), sequence, self.num_replicas, epoch)

    def __len__(self) -> int:
        return len(self._shares(self.epoch)[1][self.rank])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        sequence, shares = self._shares(epoch)
        return iter([(epoch, int(i)) for i in sequence[shares[self.rank]]])

    # -- resuming ------------------------------------------------------------------------------------------

    def state_dict(self, consumed: int | Sequence[int]) -> dict[str, Any]:
        """The state to save with a checkpoint, to resume this epoch where the training loop is.

        `consumed` is how many samples this rank's training loop has taken this epoch (batches done x batch
        size: not what the sampler yielded, which DataLoader workers prefetch ahead), as an int, gathered from
        every rank over `torch.distributed` (a collective: every rank calls it), or every rank's count as a
        sequence (no communication). An epoch consumed whole gives the next epoch's start.
        """
        taken = self._gather(consumed)
        epoch = self.epoch
        _, shares = self._shares(epoch)
        for r, (k, share) in enumerate(zip(taken, shares)):
            if not 0 <= k <= len(share):
                raise ValueError(f"consumed = {k} on rank {r}; its share of epoch {epoch} has {len(share)} samples")
        history = (*self._history(epoch), (self.num_replicas, tuple(taken)))
        state: dict[str, Any] = {"format": STATE_FORMAT, "sampler": type(self).__name__, "seed": self.seed,
                                 "shard_by": self.shard_by, "dataset_len": len(self.dataset), "epoch": epoch,
                                 "length": self._length(epoch), "history": [[r, list(k)] for r, k in history]}
        if sum(taken) == sum(len(s) for s in shares):  # the epoch is done: resume at the next one's start
            state.update(epoch=epoch + 1, length=self.total, history=[])
        return state

    def _gather(self, consumed: int | Sequence[int]) -> list[int]:
        if isinstance(consumed, bool):
            raise ValueError(f"consumed = {consumed!r}; expected a count of samples, or one per rank")
        if isinstance(consumed, int | np.integer):
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                if dist.get_world_size() != self.num_replicas:
                    raise ValueError(f"the process group has {dist.get_world_size()} ranks, this sampler "
                                     f"num_replicas = {self.num_replicas}")
                counts: list[object] = [None] * self.num_replicas
                dist.all_gather_object(counts, int(consumed))
                return [int(c) for c in counts]  # type: ignore[call-overload]
            if self.num_replicas > 1:
                raise ValueError(f"consumed = {consumed}: with num_replicas = {self.num_replicas} and no "
                                 "torch.distributed process group, pass every rank's count as a list")
            return [int(consumed)]
        counts_given = [int(c) for c in consumed]
        if len(counts_given) != self.num_replicas:
            raise ValueError(f"consumed has {len(counts_given)} counts; expected one per rank "
                             f"(num_replicas = {self.num_replicas})")
        return counts_given

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a `state_dict` (saved on this or another world size): sets the dataset's epoch; that
        epoch yields only what the checkpoint's training loop had not taken, dealt to this world size."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a labzarr sampler state (format {state.get('format')!r}, expected "
                             f"{STATE_FORMAT!r})")
        mine = {"sampler": type(self).__name__, "seed": self.seed, "shard_by": self.shard_by,
                "dataset_len": len(self.dataset)}
        for key, value in mine.items():
            if state.get(key) != value:
                raise ValueError(f"the state is of a sampler with {key} = {state.get(key)!r}; this one has "
                                 f"{key} = {value!r}")
        history: History = tuple((int(r), tuple(int(k) for k in ks)) for r, ks in state["history"])
        epoch = int(state["epoch"])
        self._resume = (epoch, int(state["length"]), history) if history else None
        self.dataset.set_epoch(epoch)


class StratifiedSampler(_EpochSampler):
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
        Draws per epoch over all ranks (default ``len(dataset)``), rounded up to a multiple of `num_replicas`
        when sharding by sample.
    num_replicas, rank:
        The DDP world size and this process's rank (default: from ``torch.distributed`` when initialised,
        else 1 and 0).
    seed:
        The sampler's seed (default: the dataset's).
    shard_by:
        ``"sample"`` (equal shards) or ``"group"``: each rank gets whole groups (patients: the items'
        `split_group`), so shards may differ in length.
    """

    def __init__(self, dataset: PatchDataset, label: str | None = None, *, replacement: bool = False,
                 num_samples: int | None = None, num_replicas: int | None = None, rank: int | None = None,
                 seed: int | None = None, shard_by: ShardBy = "sample") -> None:
        label = label if label is not None else dataset.label
        if label is None:
            raise ValueError("stratified_sampler needs a label: pass one, or build the PatchDataset with label=...")
        super().__init__(dataset, num_samples=num_samples, num_replicas=num_replicas, rank=rank, seed=seed,
                         shard_by=shard_by)
        self.label, self.replacement = label, replacement
        self.classes, item_targets = dataset.encode(label) if label != dataset.label else \
            (dataset.classes, dataset.targets)
        targets = np.asarray(item_targets, dtype=np.int64)[dataset.item_positions()]
        # Sample indexes of each class that has any; an absent class cannot be drawn.
        self.pools: tuple[npt.NDArray[np.int64], ...] = tuple(
            np.flatnonzero(targets == c) for c in range(len(self.classes)) if (targets == c).any())

    def _sequence(self, epoch: int, total: int) -> npt.NDArray[np.int64]:
        rng = np.random.default_rng([self.seed, epoch, _STREAM])
        n = len(self.pools)
        counts = np.full(n, total // n, dtype=np.int64)
        counts[rng.permutation(n)[: total % n]] += 1  # which classes get the remainder rotates by epoch
        parts = [self._draw(rng, pool, int(c)) for pool, c in zip(self.pools, counts)]
        out = np.concatenate(parts)
        rng.shuffle(out)
        return out

    def _draw(self, rng: np.random.Generator, pool: npt.NDArray[np.int64], count: int) -> npt.NDArray[np.int64]:
        if self.replacement:
            return rng.choice(pool, size=count, replace=True)
        cycles = -(-count // len(pool))
        return np.concatenate([rng.permutation(pool) for _ in range(cycles)])[:count]

    def __repr__(self) -> str:
        return (f"StratifiedSampler(label={self.label!r}, classes={len(self.classes)}, len={len(self)}, "
                f"rank={self.rank}/{self.num_replicas}, replacement={self.replacement}, shard_by={self.shard_by!r}, "
                f"epoch={self.epoch})")


class ShuffleSampler(_EpochSampler):
    """Each epoch is a fresh permutation of the dataset's samples (cycled or cut to `num_samples`).

    Parameters are those of `StratifiedSampler` without the label: `num_samples`, `num_replicas`, `rank`,
    `seed` and `shard_by`.
    """

    def __init__(self, dataset: PatchDataset, *, num_samples: int | None = None, num_replicas: int | None = None,
                 rank: int | None = None, seed: int | None = None, shard_by: ShardBy = "sample") -> None:
        super().__init__(dataset, num_samples=num_samples, num_replicas=num_replicas, rank=rank, seed=seed,
                         shard_by=shard_by)

    def _sequence(self, epoch: int, total: int) -> npt.NDArray[np.int64]:
        rng = np.random.default_rng([self.seed, epoch, _SHUFFLE_STREAM])
        n = len(self.dataset)
        return np.concatenate([rng.permutation(n) for _ in range(-(-total // n))])[:total].astype(np.int64)

    def __repr__(self) -> str:
        return (f"ShuffleSampler(len={len(self)}, rank={self.rank}/{self.num_replicas}, shard_by={self.shard_by!r}, "
                f"epoch={self.epoch})")
