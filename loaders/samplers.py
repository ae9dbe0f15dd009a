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

Oversampling: an item drawn more often than it has samples within an epoch (a small class
cycled, draws with replacement, `num_samples` above the dataset's length) has its n-th draw keyed
`(epoch, its sample n % patches_per_item, repeat n // patches_per_item)` (`draws`), counted over
the epoch's global sequence: every draw reads its own patch (the dataset walks the item's
origins) and no key reaches two ranks. A state also records the store's index hash and the dataset's selection
(`resume.Population`): a resume on a changed store is refused, or with ``strict=False`` remapped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import Sampler

from .resume import Population, StoreChangedError, entries_hash, index_hash

if TYPE_CHECKING:
    from .dataset import PatchDataset

__all__ = ["ShardBy", "ShuffleSampler", "StoreChangedError", "StratifiedSampler"]

ShardBy = Literal["sample", "group"]
STATE_FORMAT = "labzarr.sampler/2"
_OLD_FORMAT = "labzarr.sampler/1"  # no index hash nor selection: resumed as before, unchecked
_STREAM = 0x5A3  # separates the sampler's random stream from the patch origins' (seed, epoch, i)
_GROUP_STREAM = 0x5A4  # the order groups are dealt to ranks in
_SHUFFLE_STREAM = 0x5A5

History = tuple[tuple[int, tuple[int, ...]], ...]
Key = tuple[int, int] | tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class _Resume:
    """A resumed epoch: its length and consumed segments, or (remapped over a changed store) the sample indexes
    and repeats still to take, in epoch order."""

    epoch: int
    length: int
    history: History
    left: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None


def repeats(sequence: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """For each position, how many earlier positions of `sequence` hold the same value (0 for a first draw)."""
    order = np.argsort(sequence, kind="stable")
    ranked = sequence[order]
    first = np.r_[True, ranked[1:] != ranked[:-1]] if len(ranked) else np.zeros(0, dtype=bool)
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(ranked)), 0))
    out = np.empty(len(sequence), dtype=np.int64)
    out[order] = np.arange(len(ranked)) - run_start
    return out


def draws(sequence: npt.NDArray[np.int64], population: Population, *, by_item: bool
          ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The key `(index, repeat)` of each position of an epoch's `sequence`.

    `by_item` (random patches: an item's samples are interchangeable): the n-th draw of an item in the epoch
    becomes its sample ``n % count`` with repeat ``n // count``, so the draws of one item are the steps
    0, 1, 2, ... of the dataset's walk over its origins, each a new patch while the item has one left.
    Otherwise (grid tiles) the index stays and the repeat counts its earlier draws.
    """
    if not by_item:
        return sequence, repeats(sequence)
    item = population.sample_items()[sequence]
    n = repeats(item)
    counts = np.asarray(population.counts, dtype=np.int64)[item]
    return population.starts()[item] + n % counts, n // counts


class _EpochSampler(Sampler[Key]):
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
        self._resume: _Resume | None = None

    def _targets(self) -> tuple[int, ...] | None:
        """The class of each item the sequence balances (None: a sampler without a label)."""
        return None

    @cached_property
    def _index_hash(self) -> str:
        """The hash of the store's index as this dataset read it (at its construction)."""
        return index_hash(self.dataset.store_items)

    @cached_property
    def _population(self) -> Population:
        """The dataset's selection as this sampler's epochs depend on it (recorded in a state)."""
        counts = np.bincount(self.dataset.item_positions(), minlength=len(self.dataset.items))
        return Population.of(self.dataset.items, counts.tolist(), self._targets())

    # -- the epoch -----------------------------------------------------------------------------------------

    def epoch_indices(self, epoch: int | None = None) -> npt.NDArray[np.int64]:
        """The whole epoch's sample indexes over all ranks, in order (the same on every rank)."""
        epoch = self.epoch if epoch is None else epoch
        return self._keys(self._sequence(epoch, self._length(epoch), self._population), self._population)[0]

    def _keys(self, sequence: npt.NDArray[np.int64], population: Population
              ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        return draws(sequence, population, by_item=self.dataset.mode == "random")

    def _sequence(self, epoch: int, total: int, population: Population) -> npt.NDArray[np.int64]:
        raise NotImplementedError

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (sets the dataset's epoch too: one epoch for both). A resumed epoch's history is kept
        while the epoch is the one it belongs to."""
        self.dataset.set_epoch(epoch)

    def _resumed(self, epoch: int) -> _Resume | None:
        return self._resume if self._resume is not None and self._resume.epoch == epoch else None

    def _length(self, epoch: int) -> int:
        r = self._resumed(epoch)
        return r.length if r is not None else self.total

    # -- dealing positions to ranks ------------------------------------------------------------------------

    def _deal(self, positions: npt.NDArray[np.int64], sequence: npt.NDArray[np.int64], replicas: int,
              epoch: int, population: Population) -> list[npt.NDArray[np.int64]]:
        """Each rank's positions (in epoch order) of `positions`, among `replicas` ranks."""
        if self.shard_by == "sample":
            return [positions[r::replicas] for r in range(replicas)]
        n_groups, group_of = population.sample_groups()
        groups = group_of[sequence[positions]]
        present, sizes = np.unique(groups, return_counts=True)
        order = np.random.default_rng([self.seed, epoch, _GROUP_STREAM]).permutation(len(present))
        loads = [(0, r) for r in range(replicas)]  # (samples so far, rank): the lightest, then the lowest rank
        owner = np.empty(n_groups, dtype=np.int64)
        for g in order:
            load, r = heapq.heappop(loads)
            owner[present[g]] = r
            heapq.heappush(loads, (load + int(sizes[g]), r))
        ranks = owner[groups]
        return [positions[ranks == r] for r in range(replicas)]

    def _remaining(self, epoch: int, sequence: npt.NDArray[np.int64], history: History,
                   population: Population) -> npt.NDArray[np.int64]:
        """The epoch's positions no segment of `history` consumed, in epoch order."""
        remaining = np.arange(len(sequence), dtype=np.int64)
        for replicas, taken in history:
            shares = self._deal(remaining, sequence, replicas, epoch, population)
            done = np.concatenate([s[:k] for s, k in zip(shares, taken)])
            remaining = remaining[~np.isin(remaining, done)]
        return remaining

    def _left(self, epoch: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The epoch's sample indexes and their repeats still to take (all of a fresh epoch), in epoch order."""
        r = self._resumed(epoch)
        if r is not None and r.left is not None:
            return r.left
        sequence = self._sequence(epoch, self._length(epoch), self._population)
        left = self._remaining(epoch, sequence, r.history if r is not None else (), self._population)
        indexes, reps = self._keys(sequence, self._population)
        return indexes[left], reps[left]

    def _shares(self, epoch: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                           list[npt.NDArray[np.int64]]]:
        indexes, reps = self._left(epoch)
        positions = np.arange(len(indexes), dtype=np.int64)
        return indexes, reps, self._deal(positions, indexes, self.num_replicas, epoch, self._population)

    def __len__(self) -> int:
        return len(self._shares(self.epoch)[2][self.rank])

    def __iter__(self) -> Iterator[Key]:
        epoch = self.epoch
        indexes, reps, shares = self._shares(epoch)
        mine = shares[self.rank]
        return iter([(epoch, i) if not r else (epoch, i, r)
                     for i, r in zip(indexes[mine].tolist(), reps[mine].tolist())])

    # -- resuming ------------------------------------------------------------------------------------------

    def state_dict(self, consumed: int | Sequence[int]) -> dict[str, Any]:
        """The state to save with a checkpoint, to resume this epoch where the training loop is.

        `consumed` is how many samples this rank's training loop has taken this epoch (batches done x batch
        size: not what the sampler yielded, which DataLoader workers prefetch ahead), as an int, gathered from
        every rank over `torch.distributed` (a collective: every rank calls it), or every rank's count as a
        sequence (no communication). An epoch consumed whole gives the next epoch's start. The state records
        the store's index hash and this dataset's selection, which `load_state_dict` checks.
        """
        taken = self._gather(consumed)
        epoch = self.epoch
        indexes, reps, shares = self._shares(epoch)
        for r, (k, share) in enumerate(zip(taken, shares)):
            if not 0 <= k <= len(share):
                raise ValueError(f"consumed = {k} on rank {r}; its share of epoch {epoch} has {len(share)} samples")
        state: dict[str, Any] = {"format": STATE_FORMAT, "sampler": type(self).__name__, "seed": self.seed,
                                 "shard_by": self.shard_by, "dataset_len": len(self.dataset),
                                 "index": self._index_hash,
                                 "selection": self._population.encode(), "epoch": epoch}
        resumed = self._resumed(epoch)
        if sum(taken) == sum(len(s) for s in shares):  # the epoch is done: resume at the next one's start
            state.update(epoch=epoch + 1, length=self.total, history=[])
        elif resumed is not None and resumed.left is not None:  # a remapped epoch: what is left, listed
            done = np.concatenate([s[:k] for s, k in zip(shares, taken)])
            keep = np.setdiff1d(np.arange(len(indexes)), done)
            state.update(length=len(keep), history=[], left=[indexes[keep].tolist(), reps[keep].tolist()])
        else:
            history = (*(resumed.history if resumed is not None else ()), (self.num_replicas, tuple(taken)))
            state.update(length=self._length(epoch), history=[[r, list(k)] for r, k in history])
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

    def load_state_dict(self, state: Mapping[str, Any], *, strict: bool = True) -> None:
        """Resume from a `state_dict` (saved on this or another world size): sets the dataset's epoch; that
        epoch yields only what the checkpoint's training loop had not taken, dealt to this world size.

        Raises `StoreChangedError` (a ValueError naming the items added, removed or changed) when the store's
        index is not the one the state was taken on. With ``strict=False`` the epoch goes on over the items
        still selected: what the checkpoint had left of it, less the samples of items that are gone.
        """
        fmt = state.get("format")
        if fmt not in (STATE_FORMAT, _OLD_FORMAT):
            raise ValueError(f"not a labzarr sampler state (format {fmt!r}, expected {STATE_FORMAT!r})")
        mine = {"sampler": type(self).__name__, "seed": self.seed, "shard_by": self.shard_by}
        for key, value in mine.items():
            if state.get(key) != value:
                raise ValueError(f"the state is of a sampler with {key} = {state.get(key)!r}; this one has "
                                 f"{key} = {value!r}")
        then = Population.decode(state["selection"]) if fmt == STATE_FORMAT else None
        same = state["index"] == self._index_hash or state["index"] == entries_hash(self.dataset.store_items)
        if then is None or same:  # the same store: same data (a checkpoint taken before the table's digest: once)
            if state.get("dataset_len") != len(self.dataset):
                raise ValueError(f"the state is of a sampler with dataset_len = {state.get('dataset_len')!r}; this "
                                 f"one has dataset_len = {len(self.dataset)}")
            if then is not None and then != self._population:
                raise ValueError("the state is of a sampler over another selection of this store (other items, "
                                 "labels or patches per item); build the dataset and sampler as the checkpoint's were")
        elif strict:
            raise then.change(self._population, where=f"{type(self).__name__}.load_state_dict")
        history: History = tuple((int(r), tuple(int(k) for k in ks)) for r, ks in state["history"])
        epoch, length = int(state["epoch"]), int(state["length"])
        left = state.get("left")
        if then is None or then == self._population:  # the selection is as it was: its positions still hold
            self._resume = (_Resume(epoch, length, history) if history else None) if left is None else \
                _Resume(epoch, length, (), (np.asarray(left[0], dtype=np.int64), np.asarray(left[1], dtype=np.int64)))
        elif history or left is not None:
            assert then is not None
            self._resume = self._remapped(epoch, length, history, left, then)
        else:  # the checkpoint is at an epoch's start: that epoch is drawn afresh over the items present
            self._resume = None
        self.dataset.set_epoch(epoch)

    def _remapped(self, epoch: int, length: int, history: History, left: Sequence[Sequence[int]] | None,
                  then: Population) -> _Resume:
        """What the checkpoint (over population `then`) had left of its epoch, as sample indexes of the
        dataset now; samples of items no longer selected are dropped."""
        if left is not None:
            indexes, reps = np.asarray(left[0], dtype=np.int64), np.asarray(left[1], dtype=np.int64)
        else:
            sequence = self._sequence(epoch, length, then)
            rest = self._remaining(epoch, sequence, history, then)
            indexes, reps = self._keys(sequence, then)
            indexes, reps = indexes[rest], reps[rest]
        now = then.remap(indexes, self._population)
        keep = now >= 0
        return _Resume(epoch, int(keep.sum()), (), (now[keep], reps[keep]))


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
        self.item_targets = tuple(item_targets)

    def _targets(self) -> tuple[int, ...] | None:
        return self.item_targets

    def _sequence(self, epoch: int, total: int, population: Population) -> npt.NDArray[np.int64]:
        targets = population.sample_targets()
        # Sample indexes of each class that has any; an absent class cannot be drawn.
        pools = [np.flatnonzero(targets == c) for c in np.unique(targets)]
        rng = np.random.default_rng([self.seed, epoch, _STREAM])
        n = len(pools)
        counts = np.full(n, total // n, dtype=np.int64)
        counts[rng.permutation(n)[: total % n]] += 1  # which classes get the remainder rotates by epoch
        parts = [self._draw(rng, pool, int(c)) for pool, c in zip(pools, counts)]
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

    def _sequence(self, epoch: int, total: int, population: Population) -> npt.NDArray[np.int64]:
        rng = np.random.default_rng([self.seed, epoch, _SHUFFLE_STREAM])
        n = sum(population.counts)
        return np.concatenate([rng.permutation(n) for _ in range(-(-total // n))])[:total].astype(np.int64)

    def __repr__(self) -> str:
        return (f"ShuffleSampler(len={len(self)}, rank={self.rank}/{self.num_replicas}, shard_by={self.shard_by!r}, "
                f"epoch={self.epoch})")
