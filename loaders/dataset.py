"""PatchDataset: random sub-volumes (or 2D patches, or whole images) sliced straight from a labzarr store.

Invariant: `ds[i]` is a pure function of `(seed, epoch, i)`; nothing depends on
global RNG state, worker id or call order. Every role of a sample (`image`,
`mask`, ...) is sliced at the same region: the roles share one voxel grid
(conversion rejects a mask that does not lie on its image's grid). Array handles are per process and
are never pickled, so fork, spawn and forkserver workers all open their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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
        Fills the part of a patch that lies outside a smaller volume (a mask is padded with 0).
    roles:
        The arrays of each sample to return, each under its role's key, all of the same region:
        ``("image", "mask")`` for a segmentation store (``[items] roles``). Default ``("image",)``.
    foreground:
        Probability that a patch is centred on a voxel of a foreground class (nnU-Net's
        oversampling): a class present in the item (value != 0) is chosen (uniformly, or by
        ``class_weights``), then one of its locations stored at conversion, the patch centred on it
        with a jitter of up to a quarter patch per axis and clipped to the volume, so that voxel
        is always inside the patch. An item with no foreground voxels gets a uniform patch.
        With ``0`` (the default) every origin is uniform, as without masks.
    class_weights:
        Relative weight of each foreground class when choosing the one to centre on; classes
        missing from the mapping get weight 0. Default: every present class alike.

    Raises
    ------
    FileNotFoundError, ValueError
        ``store`` is missing or not a labzarr store; an item lacks a requested role; ``foreground``
        is set but the store has no class locations (not converted with a ``mask`` role).
    """

    def __init__(self, store: Path | str, patch_size: Sequence[int] | None, patches_per_item: int = 1,
                 seed: int = 0, *, pad_value: float = 0, roles: Sequence[str] = ("image",),
                 foreground: float = 0.0, class_weights: Mapping[int, float] | None = None) -> None:
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
        if not 0.0 <= foreground <= 1.0:
            raise ValueError(f"foreground = {foreground}; expected a probability in [0, 1], e.g. 0.33")
        if isinstance(roles, str) or not roles:
            raise ValueError(f"roles = {roles!r}; expected a sequence of role names, e.g. ('image', 'mask')")
        self.roles = tuple(roles)
        self.foreground = float(foreground)
        self.class_weights = None if class_weights is None else {int(k): float(v) for k, v in class_weights.items()}
        self.attrs, self.items = read_index(self.store)
        for item in self.items:
            for role in self.roles:
                try:
                    item.role_array(role)
                except KeyError as exc:
                    raise ValueError(f"{self.store}: {exc.args[0]}; pass roles= from those") from exc
            if self.foreground and item.locations is None:
                raise ValueError(f"{self.store}: item {item.item_id!r} has no class locations; foreground= needs "
                                 "a store converted with [items] roles including a 'mask' role")
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
        if self.foreground and rng.random() < self.foreground:
            centred = self._centred(item, rng, self.patch_size)
            if centred is not None:
                return centred
        return tuple(int(rng.integers(0, max(n - p, 0) + 1)) for n, p in zip(item.shape[1:], self.patch_size))

    def _centred(self, item: IndexItem, rng: np.random.Generator, patch: tuple[int, ...]) -> tuple[int, ...] | None:
        """An origin that puts a stored location of a chosen foreground class near the patch centre."""
        present = [(v, c) for v, c in sorted(item.classes.items()) if v != 0 and c.stop > c.start]
        if self.class_weights is not None:
            present = [(v, c) for v, c in present if self.class_weights.get(v, 0.0) > 0]
        if not present or item.locations is None:
            return None
        if self.class_weights is None:
            _, info = present[int(rng.integers(len(present)))]
        else:
            w = np.array([self.class_weights[v] for v, _ in present])
            _, info = present[int(rng.choice(len(present), p=w / w.sum()))]
        row = int(rng.integers(info.start, info.stop))
        voxel = np.asarray(self._array(item.locations)[row])
        origin = []
        for v, p, n in zip(voxel, patch, item.shape[1:]):
            jitter = int(rng.integers(-(p // 4), p // 4 + 1))
            origin.append(int(np.clip(int(v) - p // 2 + jitter, 0, max(n - p, 0))))
        return tuple(origin)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.items[self._check(i) // self.patches_per_item]
        origin = self.origin(i)
        out: dict[str, Any] = {}
        for role in self.roles:
            pad = 0 if role == "mask" else self.pad_value
            out[role] = torch.from_numpy(self._read(item, origin, item.role_array(role), pad))
        return {**out, "item_id": item.item_id, "origin": origin}

    def _check(self, i: object) -> int:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= int(i) < len(self):
            raise IndexError(f"index {i!r} out of range; valid indexes are 0..{len(self) - 1}")
        return int(i)

    def _read(self, item: IndexItem, origin: tuple[int, ...], array: str, pad_value: float) -> npt.NDArray[Any]:
        arr = self._array(array)
        slot = () if item.slot is None else (item.slot,)  # a 2D image is one row of its stack
        spatial = item.shape[1:]
        size = spatial if self.patch_size is None else self.patch_size
        stops = [min(o + p, n) for o, p, n in zip(origin, size, spatial)]
        region = np.asarray(arr[(*slot, slice(None), *(slice(o, s) for o, s in zip(origin, stops)))])
        if region.shape[1:] == size:
            return region
        out = np.full((region.shape[0], *size), pad_value, dtype=region.dtype)
        out[(slice(None), *(slice(0, s - o) for o, s in zip(origin, stops)))] = region
        return out
