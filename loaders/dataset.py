"""PatchDataset: random sub-volumes (or 2D patches, or whole images) sliced straight from a labzarr store.

Invariant: `ds[i]` is a pure function of `(seed, epoch, i)`; nothing depends on
global RNG state, worker id or call order. Array handles are per process and
are never pickled, so fork, spawn and forkserver workers all open their own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import zarr
from torch.utils.data import Dataset

from .store import IndexItem, open_zarr_store, read_index

__all__ = ["PatchDataset"]


class PatchDataset(Dataset[dict[str, Any]]):
    """Random patches of every ok item of a store, `patches_per_item` per item per epoch.

    Volumes are (C, X, Y, Z) arrays; 2D images are slots of a stack array
    (N, C, H, W) and give (C, h, w) patches, or whole images with ``patch_size=None``.

    Parameters
    ----------
    store:
        Path of a converted store (folder or ``.zip``).
    patch_size:
        Spatial patch shape, e.g. ``(64, 64, 64)`` or ``(256, 256)`` for 2D images; one entry per spatial
        axis. ``None`` returns whole items (origin all zeros); batching then needs items of one shape.
    patches_per_item:
        Samples drawn from each item per epoch; ``len(ds) = n_items * patches_per_item``.
    seed:
        With the epoch and the index, fixes every patch origin.
    pad_value:
        Fills the part of a patch that lies outside a smaller volume.

    Raises
    ------
    FileNotFoundError, ValueError
        ``store`` is missing or not a labzarr store.
    """

    def __init__(self, store: Path | str, patch_size: Sequence[int] | None, patches_per_item: int = 1,
                 seed: int = 0, *, pad_value: float = 0) -> None:
        if patches_per_item < 1:
            raise ValueError(f"patches_per_item = {patches_per_item}; expected >= 1")
        if patch_size is not None and (not patch_size or any(int(p) < 1 for p in patch_size)):
            raise ValueError(f"patch_size = {tuple(patch_size)}; expected positive extents, e.g. (64, 64, 64), "
                             "or None for whole items")
        self.store = Path(store)
        self.patch_size = None if patch_size is None else tuple(int(p) for p in patch_size)
        self.patches_per_item = patches_per_item
        self.seed = seed
        self.pad_value = pad_value
        self.epoch = 0
        self.attrs, self.items = read_index(self.store)
        for item in self.items:
            if self.patch_size is not None and len(item.shape) - 1 != len(self.patch_size):
                raise ValueError(f"{self.store}: item {item.item_id!r} has {len(item.shape) - 1} spatial axes, "
                                 f"patch_size has {len(self.patch_size)}")
        self._arrays: dict[str, zarr.Array] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self.items) * self.patches_per_item

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; patch origins change with it."""
        self.epoch = int(epoch)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = {}  # handles hold an event loop and file state: never cross processes
        return state

    def _array(self, name: str) -> zarr.Array:
        if self._pid != os.getpid():  # a new worker: forget inherited handles
            self._arrays, self._pid = {}, os.getpid()
        if name not in self._arrays:
            arr = zarr.open_array(open_zarr_store(self.store), path=name, mode="r", zarr_format=3)
            assert isinstance(arr, zarr.Array)
            self._arrays[name] = arr
        return self._arrays[name]

    def origin(self, i: int) -> tuple[int, ...]:
        """The patch origin of sample `i` in this epoch (may be negative only when padding is needed)."""
        item = self.items[self._check(i) // self.patches_per_item]
        if self.patch_size is None:
            return (0,) * (len(item.shape) - 1)
        rng = np.random.default_rng([self.seed, self.epoch, i])
        return tuple(int(rng.integers(0, max(n - p, 0) + 1)) for n, p in zip(item.shape[1:], self.patch_size))

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.items[self._check(i) // self.patches_per_item]
        origin = self.origin(i)
        image = self._read(item, origin)
        return {"image": torch.from_numpy(image), "item_id": item.item_id, "origin": origin}

    def _check(self, i: object) -> int:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= int(i) < len(self):
            raise IndexError(f"index {i!r} out of range; valid indexes are 0..{len(self) - 1}")
        return int(i)

    def _read(self, item: IndexItem, origin: tuple[int, ...]) -> npt.NDArray[Any]:
        arr = self._array(item.array)
        slot = () if item.slot is None else (item.slot,)  # a 2D image is one row of its stack
        spatial = item.shape[1:]
        size = spatial if self.patch_size is None else self.patch_size
        stops = [min(o + p, n) for o, p, n in zip(origin, size, spatial)]
        region = np.asarray(arr[(*slot, slice(None), *(slice(o, s) for o, s in zip(origin, stops)))])
        if region.shape[1:] == size:
            return region
        out = np.full((region.shape[0], *size), self.pad_value, dtype=region.dtype)
        out[(slice(None), *(slice(0, s - o) for o, s in zip(origin, stops)))] = region
        return out
