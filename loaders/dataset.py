"""PatchDataset: patches sliced straight from a labzarr store at training and inference time.

Invariant: `ds[i]` is a pure function of `(seed, epoch, i)`; nothing depends on
global RNG state, worker id or call order. Every role of a sample (`image`,
`mask`, ...) is sliced at the same region: the roles share one voxel grid
(conversion rejects a mask that does not lie on its image's grid). Array
handles are per process and are never pickled, so fork, spawn and forkserver
workers all open their own.
A sampler can carry the epoch inside the index (`ds[(epoch, i)]`), so workers
that outlive an epoch (`persistent_workers=True`) still draw that epoch's patches, and a
repeat of sample `i` within the epoch (`ds[(epoch, i, r)]`, r >= 1: oversampling) draws its
own origin: an item's draws in an epoch walk its origins without repeats (`Walk`). A seeded
transform (`labzarr.loaders.augment`) gets a generator keyed the same way.
"""

from __future__ import annotations

import logging
import math
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Literal, Unpack

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset, get_worker_info

from labzarr.store import (
    DatasetStats,
    IndexItem,
    class_names,
    read_index,
    read_statistics_table,
    stack_slots,
    store_location,
    table_stats,
)
from labzarr.store.format.items import IndexItems

from ._regions import Region, Walk, around, grid_axis, region
from ._sample import Sample
from ._threads import Threads
from .annotations import patch_annotations
from .augment import SeededTransform, apply
from .collate import MixedBatchWarning
from .normalize import Normalize, Scheme
from .options import ReadOptions
from .samplers import ShardBy, ShuffleSampler, StratifiedSampler
from .selection import Selection, SelectionKeywords, selection_of

__all__ = ["Mode", "PatchDataset", "Sample"]

log = logging.getLogger(__name__)

Mode = Literal["random", "grid"]
Transform = Callable[[Sample], Sample] | SeededTransform
Key = int | tuple[int, int] | tuple[int, int, int]
# Streams that keep the draws of a repeat and of a transform apart from the origin's (seed, epoch, i).
_REPEAT_STREAM = 0x5B1
_AUGMENT_STREAM = 0x5B2
_WALK_STREAM = 0x5B3
_RECENT = 256  # items, and walks, kept per process


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    """The torch dtype `torch.from_numpy` gives an array of `dtype`."""
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _batch_buffer(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor to read a batch into: in a DataLoader worker, in shared memory from the start (as torch's
    `default_collate` allocates its stacks), so that sending it to the main process moves no bytes (a tensor in
    private memory is copied into a new shared segment on the way); pinned when CUDA is available outside workers."""
    if get_worker_info() is not None:
        elem = torch.empty(0, dtype=dtype)
        # What default_collate does (torch has no public call that allocates straight into shared memory).
        storage: torch.TypedStorage = elem._typed_storage()._new_shared(  # type: ignore[no-untyped-call]
            int(np.prod(shape)), device=elem.device)
        # Set, not viewed: the samples' rows must have the batch itself as their base, for `Collate` to hand it
        # on (a view's rows have the view's base, and would be stacked into a copy).
        return elem.set_(storage, 0, shape, [math.prod(shape[a + 1:]) for a in range(len(shape))])
    return torch.empty(shape, dtype=dtype, pin_memory=torch.cuda.is_available())


class PatchDataset(Dataset[Sample]):
    """Patches of every ok item of a store: random (`patches_per_item` per item per epoch) or a grid of tiles.

    Each sample is a dict: ``image`` (a ``(C, *patch)`` tensor in the store's dtype), ``item_id``,
    ``origin`` (the patch's first voxel in item coordinates; negative where the item is smaller than
    the patch), ``valid`` (per axis, the ``(start, stop)`` of the patch that holds item voxels; the rest
    is ``pad_value``) and, when ``label`` is given, ``label`` (the class index into ``ds.classes``).
    With ``roles``, each role's patch of the same region comes under its role's key instead of ``image``.
    A store converted with ``[labels] annotations`` adds ``points`` ``(N, 3)`` and ``boxes`` ``(N, 6)``:
    the annotations whose centre is in the patch, in patch voxel coordinates (`Collate` pads them).

    Parameters
    ----------
    store:
        Path of a converted store (folder or zipped store), or its URL (``s3://bucket/x.zarr``; see
        ``ReadOptions.storage_options``).
    patch_size:
        Spatial patch shape, one entry per spatial axis, e.g. ``(64, 64, 64)``; ``None`` reads whole items.
    patches_per_item:
        Random mode: samples drawn from each item per epoch; ``len(ds) = n_items * patches_per_item``.
    label:
        A label name from the store's index (e.g. ``"cell_type"``); its values become class indices.
    seed:
        With the epoch and the index, fixes every patch origin.
    mode:
        ``"random"`` (training) or ``"grid"`` (inference: tiles covering every voxel of every item).
    overlap:
        Grid mode: voxels shared by neighbouring tiles, one int or one per axis.
    pad_value:
        Fills the part of a patch that lies outside a smaller item (a mask is padded with 0).
    transform:
        Called on each sample dict before it is returned; a `SeededTransform` (``labzarr.loaders.augment``) is
        called as ``transform(sample, rng)`` with a generator keyed by the sample's key, so random augmentation
        stays a pure function of ``(seed, epoch, i)``.
    classes:
        The class names in index order, to pin the mapping across stores (default: the sorted values found).
    read:
        The read path (``ReadOptions``: which reader, open handles, a URL store's options).
    roles:
        The arrays of each sample to return, each under its role's key, all of the same region:
        ``("image", "mask")`` for a segmentation store (``[items] roles``). Default ``("image",)``.
    foreground:
        Random mode: probability that a patch is centred on a voxel of a foreground class (nnU-Net's
        oversampling): a class present in the item (value != 0) is chosen (uniformly, or by
        ``class_weights``), then one of its locations stored at conversion, the patch centred on it
        with a jitter of up to a quarter patch per axis and clipped to the volume, so that voxel
        is always inside the patch. An item with no foreground voxels gets a uniform patch. In a store
        with ``[labels] annotations``, an item's annotations take the place of class locations: one is
        drawn uniformly and the patch is centred on it alike, so it is inside the patch.
        With ``0`` (the default) every origin is uniform, as without masks.
    class_weights:
        Relative weight of each foreground class when choosing the one to centre on; classes
        missing from the mapping get weight 0. Default: every present class alike.
    selection:
        Which of the store's items to use (a `Selection`: by split, fold, item ID, label or kind), chosen at
        construction from the store's index alone (no voxel is read); default every item. ``items``, ``len``,
        ``classes``, the samplers and grid mode follow it, while the class mapping comes from the whole store,
        so a train and a val dataset number their classes alike.
    split, fold, holdout, items, where, kind:
        `Selection`'s fields as keywords, building the selection (``split="val"`` is
        ``selection=Selection(split="val")``); giving one of them (not None) with ``selection`` is a TypeError.

    Raises
    ------
    FileNotFoundError, ValueError
        ``store`` is missing or not a labzarr store; an argument does not fit the store; an item lacks a
        requested role; ``foreground`` is set but the store has no class locations (no ``mask`` role).
    """

    def __init__(self, store: Path | str, patch_size: Sequence[int] | None, *, patches_per_item: int = 1,
                 label: str | None = None, seed: int = 0, mode: Mode = "random", overlap: int | Sequence[int] = 0,
                 pad_value: float = 0, transform: Transform | None = None, classes: Sequence[str] | None = None,
                 read: ReadOptions = ReadOptions(), roles: Sequence[str] = ("image",), foreground: float = 0.0,
                 class_weights: Mapping[int, float] | None = None, selection: Selection | None = None,
                 **select: Unpack[SelectionKeywords]) -> None:
        self.store = store_location(store)
        # Before the index is read: a call that chooses its items twice is refused whatever the store holds.
        self.selection = selection_of(selection, select, where=f"PatchDataset({self.store})")
        index = read_index(self.store, read.storage_options)
        # The index's columns: its items are built one at a time, when a sample asks for one.
        self.attrs, self.store_items = index.attrs(), IndexItems.of(index.items)
        self.items: IndexItems = self.selection.apply(self.store_items, where=f"PatchDataset({self.store})")
        self.patch_size = None if patch_size is None else tuple(int(p) for p in patch_size)
        self.patches_per_item, self.seed, self.mode, self.pad_value = patches_per_item, seed, mode, pad_value
        self.transform, self.read_options, self.label = transform, read, label
        if isinstance(roles, str) or not roles:
            raise ValueError(f"roles = {roles!r}; expected a sequence of role names, e.g. ('image', 'mask')")
        self.roles, self.foreground = tuple(roles), float(foreground)
        # A store with workbook annotations: samples carry `points` and `boxes`, foreground= centres on them.
        self.annotated = bool(self.store_items.annotated().any())
        self.class_weights = None if class_weights is None else {int(k): float(v) for k, v in class_weights.items()}
        self.epoch = 0
        self._check_args()
        self._check_roles()
        self.overlap = self._overlap(overlap)
        self.classes: tuple[str, ...] = ()
        self.targets: tuple[int, ...] = ()  # class index of each item
        if label is not None:
            self.classes, self.targets = self.encode(label, classes)
        self._tiles = self._grid() if mode == "grid" else None
        # Where each item's tiles end in the dataset's index space (grid mode): a sample finds its item by bisection.
        self._tile_ends: list[int] = (np.cumsum([int(np.prod([len(a) for a in axes])) for axes in self._tiles]).tolist()
                                      if self._tiles is not None else [])
        # Opens nothing; per process (a child reopens its files).
        self._reader = read.reader(self.store, slots=stack_slots(self.items))
        self._threads = Threads(read.threads)  # started on first use, per process
        self._keep_recent()

    def _keep_recent(self) -> None:
        """Building an item from the index's columns, or an item's walk (a seeded generator's draws), costs as much
        as planning its patch's reads: both pure, each is kept while among the recently used, per process."""
        self._item = lru_cache(_RECENT)(self._build_item)
        self._walk = lru_cache(_RECENT)(self._draw_walk)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_item"], state["_walk"]  # a pickle carries no kept results: each process keeps its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._keep_recent()

    # -- configuration -------------------------------------------------------------------------------------

    def _check_args(self) -> None:
        where = f"PatchDataset({self.store})"
        if self.mode not in ("random", "grid"):
            raise ValueError(f"{where}: mode = {self.mode!r}; expected 'random' or 'grid'")
        if self.patches_per_item < 1:
            raise ValueError(f"{where}: patches_per_item = {self.patches_per_item}; expected >= 1")
        if self.mode == "grid" and self.patches_per_item != 1:
            raise ValueError(f"{where}: patches_per_item = {self.patches_per_item} with mode='grid'; "
                             "grid mode yields every tile once, leave patches_per_item at 1")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{where}: seed = {self.seed!r}; expected an int >= 0")
        if self.patch_size is None:
            if self.mode == "grid":
                raise ValueError(f"{where}: mode='grid' needs a patch_size")
            return
        if not self.patch_size or any(p < 1 for p in self.patch_size):
            raise ValueError(f"{where}: patch_size = {self.patch_size}; expected positive extents, e.g. (64, 64, 64)")
        other = np.flatnonzero(self.items.spatial_axes() != len(self.patch_size))
        if other.size:
            item = self.items[int(other[0])]
            raise ValueError(f"{where}: item {item.item_id!r} has {len(item.shape) - 1} spatial axes "
                             f"(shape {item.shape}), patch_size {self.patch_size} has {len(self.patch_size)}"
                             f"{self._rank_hint()}")
        codes, dtypes = self.items.text("dtype")
        unfit = [c for c in np.unique(codes).tolist()
                 if np.array(self.pad_value).astype(dtypes[c]) != self.pad_value]  # once per dtype
        if unfit:
            item = self.items[int(np.flatnonzero(np.isin(codes, unfit))[0])]
            raise ValueError(f"{where}: pad_value = {self.pad_value!r} does not fit dtype {item.dtype} of "
                             f"item {item.item_id!r}")

    def _rank_hint(self) -> str:
        """What to pass when items' ranks differ from the patch's: the kind of the patch's rank, or a patch_size."""
        assert self.patch_size is not None
        ranks = Counter(self.items.spatial_axes().tolist())
        rank = len(self.patch_size)
        kind = {3: "volume", 2: "image"}.get(rank)
        if kind is not None and ranks[rank]:
            mix = ", ".join(f"{n} of {r}" for r, n in sorted(ranks.items()))
            return (f"; the selection mixes items by spatial axes ({mix}): pass kind={kind!r} to read the "
                    f"{ranks[rank]} {kind}(s), or where= to choose the items")
        sizes = " or ".join(str(r) for r in sorted(ranks))
        return f"; give patch_size {sizes} entries (one per spatial axis), or choose items with kind= or where="

    def _check_roles(self) -> None:
        if not 0.0 <= self.foreground <= 1.0:
            raise ValueError(f"foreground = {self.foreground}; expected a probability in [0, 1], e.g. 0.33")
        # The first item that lacks a role or (with foreground=) locations, found in the columns, then named
        # by the same per-item checks.
        lacking = np.zeros(len(self.items), dtype=bool)
        for role in self.roles:
            lacking |= ~self.items.role(role)
        if self.foreground and not self.annotated:
            lacking |= ~self.items.has_locations()
        for item in self.items.take(np.flatnonzero(lacking)[:1]):
            for role in self.roles:
                try:
                    item.role_array(role)
                except KeyError as exc:
                    raise ValueError(f"{self.store}: {exc.args[0]}; pass roles= from those") from exc
            if self.foreground and item.locations is None and not self.annotated:
                raise ValueError(f"{self.store}: item {item.item_id!r} has no class locations; foreground= needs "
                                 "a store converted with [items] roles including a 'mask' role, or with "
                                 "[labels] annotations")

    def _overlap(self, overlap: int | Sequence[int]) -> tuple[int, ...]:
        if self.patch_size is None:
            return ()
        ov = (overlap,) * len(self.patch_size) if isinstance(overlap, int) else tuple(int(o) for o in overlap)
        if len(ov) != len(self.patch_size) or any(not 0 <= o < p for o, p in zip(ov, self.patch_size)):
            raise ValueError(f"PatchDataset({self.store}): overlap = {overlap!r}; expected 0 <= overlap < patch "
                             f"size {self.patch_size} on every axis")
        return ov

    def encode(self, label: str, classes: Sequence[str] | None = None) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The class names for `label` and every item's class index; items without that label are refused."""
        codes, distinct = self.items.label(label)
        names_of = [*distinct, ""]  # code -1 (no such label) picks the last
        empty = np.asarray([v == "" for v in names_of], dtype=bool)[codes]
        if empty.any():
            missing = self.items.take(np.flatnonzero(empty)).values("item_id")
            known = sorted({k for item in self.items for k in item.labels})
            raise ValueError(f"PatchDataset({self.store}): label {label!r} is missing for {len(missing)} item(s) "
                             f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); labels in the "
                             f"store: {', '.join(known) or 'none'}")
        # From the whole store, not the selection: a split lacking a class still numbers the others alike.
        if classes is not None:
            names = tuple(classes)
        else:
            everywhere, values = self.store_items.label(label)
            names = class_names(v for c in np.unique(everywhere).tolist() if c >= 0 and (v := values[c]))
        index = {name: k for k, name in enumerate(names)}
        if len(index) != len(names):
            raise ValueError(f"PatchDataset({self.store}): classes = {list(names)} has duplicates")
        present = [names_of[c] for c in np.unique(codes).tolist()]
        unknown = sorted(set(present) - set(index))
        if unknown:
            raise ValueError(f"PatchDataset({self.store}): label {label!r} has values {unknown} that are not in "
                             f"classes = {list(names)}")
        lut = np.asarray([index.get(v, -1) for v in names_of], dtype=np.int64)
        return names, tuple(lut[codes].tolist())

    def _grid(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        assert self.patch_size is not None
        return tuple(tuple(grid_axis(n, p, o) for n, p, o in zip(item.shape[1:], self.patch_size, self.overlap))
                     for item in self.items)

    # -- indexing ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._tiles is not None:
            return self._tile_ends[-1] if self._tile_ends else 0
        return len(self.items) * self.patches_per_item

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch for plain integer indexes; patch origins change with it."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch = {epoch!r}; expected an int >= 0")
        self.epoch = epoch

    def locate(self, key: Key) -> tuple[int, Region]:
        """The item (its position in `items`) and patch region of sample `key`, without reading anything.

        `key` is an index (in the epoch `set_epoch` chose), an `(epoch, index)` pair, or `(epoch, index, repeat)`:
        a sampler that draws sample `index` again within the epoch gives each repeat its own origin.
        """
        k, _, reg = self._locate(key)
        return k, reg

    def _locate(self, key: Key) -> tuple[int, IndexItem, Region]:
        """`locate`, with the item (which a batch then builds once)."""
        epoch, i, repeat = self._key(key)
        if self._tiles is not None:
            k = bisect_right(self._tile_ends, i)
            axes = self._tiles[k]
            local = i - (self._tile_ends[k - 1] if k else 0)
            pos = np.unravel_index(local, [len(a) for a in axes])
            assert self.patch_size is not None
            tile = tuple(int(a[j]) for a, j in zip(axes, pos))
            item = self._item(k)
            return k, item, region(item.shape[1:], tile, self.patch_size)
        k = i // self.patches_per_item
        item = self._item(k)
        spatial = item.shape[1:]
        if self.patch_size is None:
            return k, item, region(spatial, (0,) * len(spatial), spatial)
        origin: tuple[int, ...] | None = None
        if self.foreground:  # no draw at all when foreground is 0
            # Keyed, never global: the same in every process. The first draw keeps the key (seed, epoch, i).
            rng = np.random.default_rng([self.seed, epoch, i] if not repeat else
                                        [self.seed, epoch, i, _REPEAT_STREAM, repeat])
            if rng.random() < self.foreground:
                origin = self._centred(item, rng, self.patch_size)
        if origin is None:  # an item's draws this epoch (its samples, then their repeats: what the samplers
            # yield) are the steps of one walk over its origins, each a new patch while the item has one left
            step = i % self.patches_per_item + repeat * self.patches_per_item
            origin = self._walk(epoch, k).origin(step)
        return k, item, region(spatial, origin, self.patch_size)

    def _build_item(self, k: int) -> IndexItem:
        return self.items[k]

    def _draw_walk(self, epoch: int, k: int) -> Walk:
        """The walk over the origins of item `k` in `epoch`: keyed by (seed, epoch, k), never global."""
        assert self.patch_size is not None
        return Walk.draw(np.random.default_rng([self.seed, epoch, k, _WALK_STREAM]), self._item(k).shape[1:],
                         self.patch_size)

    def _centred(self, item: IndexItem, rng: np.random.Generator, patch: tuple[int, ...]) -> tuple[int, ...] | None:
        """An origin that puts an annotation (one drawn uniformly) or else a stored location of a chosen
        foreground class near the patch centre."""
        if item.annotations:
            centre = item.annotations[int(rng.integers(len(item.annotations)))].center
            return around(rng, [round(c) for c in centre], item.shape[1:], patch)
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
        voxel = self._reader.read(item.locations, (row, slice(None)))
        return around(rng, [int(v) for v in voxel], item.shape[1:], patch)

    def origin(self, key: Key) -> tuple[int, ...]:
        """The patch origin of sample `key` (negative only where the item is smaller than the patch)."""
        return self.locate(key)[1].origin

    def item_positions(self) -> npt.NDArray[np.int64]:
        """For every sample index, the position in `items` of its item (the same in every epoch)."""
        per_item = ([self.patches_per_item] * len(self.items) if self._tiles is None
                    else np.diff([0, *self._tile_ends]).tolist())
        return np.repeat(np.arange(len(self.items), dtype=np.int64), per_item)

    def _key(self, key: object) -> tuple[int, int, int]:
        if isinstance(key, tuple) and len(key) in (2, 3):
            epoch, i, *rest = key
            repeat = rest[0] if rest else 0
            for name, v in (("epoch", epoch), ("repeat", repeat)):
                if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                    raise IndexError(f"key {key!r}: the {name} must be an int >= 0")
        else:
            epoch, i, repeat = self.epoch, key, 0
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= int(i) < len(self):
            raise IndexError(f"index {i!r} out of range; valid indexes are 0..{len(self) - 1}")
        return int(epoch), int(i), int(repeat)

    def augment_rng(self, key: Key) -> np.random.Generator:
        """The generator a seeded transform gets for sample `key`: its own stream of `(seed, epoch, i, repeat)`."""
        epoch, i, repeat = self._key(key)
        return np.random.default_rng([self.seed, epoch, i, repeat, _AUGMENT_STREAM])

    # -- reading -------------------------------------------------------------------------------------------

    def read_path(self, item: IndexItem, role: str = "image") -> Literal["labzarr", "zarr"]:
        """Which library reads `item`'s `role` in this process: labzarr's own reader, or zarr-python for an
        array in a layout that reader does not know (see `ReadOptions.backend`)."""
        return self._reader.path_used(item.role_array(role))

    def read_region(self, item: IndexItem, reg: Region, role: str = "image") -> npt.NDArray[Any]:
        """The `(C, *reg.size)` voxels of `item`'s `role` in `reg`, padded where the region leaves the item
        (with `pad_value`; a mask with 0)."""
        channels, dtype = self._layout(item, role)
        out = np.empty((channels, *reg.size), dtype=dtype)
        self._fill([(item, reg, role)], [out])
        return out

    def _layout(self, item: IndexItem, role: str) -> tuple[int, np.dtype[Any]]:
        """The channel count and dtype of `item`'s `role` (its array is opened in this process if need be)."""
        array = self._reader.array(item.role_array(role))
        return array.shape[1 if item.slot is not None else 0], array.dtype

    def _fill(self, requests: Sequence[tuple[IndexItem, Region, str]], outs: Sequence[npt.NDArray[Any]]) -> None:
        """Read each request's region into its `(C, *reg.size)` out array, as one batch: every stored chunk
        fetched and decoded once (in this process's decode threads), the padding filled here."""
        reads, dests = [], []
        for (item, reg, role), out in zip(requests, outs):
            lead: tuple[int | slice, ...] = (item.slot,) if item.slot is not None else ()
            reads.append((item.role_array(role), (*lead, slice(None), *reg.source)))
            if reg.padded:
                out[...] = 0 if role == "mask" else self.pad_value
                out = out[(slice(None), *reg.valid)]
            dests.append(out)
        self._reader.read_many(reads, out=dests, mapper=self._threads.map)

    def __getitem__(self, key: Key) -> Sample:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[Key]) -> list[Sample]:
        """Samples for a batch of keys, read together (the DataLoader calls this with each batch's keys): each
        stored chunk decoded once, in `ReadOptions.threads` threads, into one `(B, C, *patch)` tensor per role
        (in pinned memory when CUDA is available, outside DataLoader workers) whose rows are the samples'
        tensors; items of different channel counts or dtypes get a tensor each."""
        located = [self._locate(key) for key in keys]
        requests: list[tuple[IndexItem, Region, str]] = []
        outs: list[npt.NDArray[Any]] = []
        tensors: dict[str, list[torch.Tensor]] = {}
        for role in self.roles:
            layouts = [(*self._layout(item, role), reg.size) for _, item, reg in located]
            channels, dtype, size = layouts[0]
            if all(lay == layouts[0] for lay in layouts):
                batch = _batch_buffer((len(located), channels, *size), _torch_dtype(dtype))
                tensors[role] = list(batch.unbind())
                outs += list(batch.numpy())
            else:
                self._mixed(role, [item.item_id for _, item, _ in located], layouts)
                arrays = [np.empty((c, *sz), dtype=dt) for c, dt, sz in layouts]
                tensors[role] = [torch.from_numpy(a) for a in arrays]
                outs += arrays
            requests += [(item, reg, role) for _, item, reg in located]
        self._fill(requests, outs)
        samples = []
        for b, (key, (k, item, reg)) in enumerate(zip(keys, located)):
            sample: Sample = {role: tensors[role][b] for role in self.roles}
            sample.update({"item_id": item.item_id, "origin": reg.origin,
                           "valid": tuple((v.start, v.stop) for v in reg.valid)})
            if self.label is not None:
                sample["label"] = self.targets[k]
            if self.annotated:
                sample.update(patch_annotations(item.annotations, reg))
            if self.transform is not None:
                sample = apply(self.transform, sample, partial(self.augment_rng, key))
            samples.append(sample)
        return samples

    def _mixed(self, role: str, names: Sequence[str], layouts: Sequence[tuple[int, np.dtype[Any], Any]]) -> None:
        """Say, once per process, what torch's default collate would fail on and what to pass instead."""
        counts = sorted({c for c, _, _ in layouts})
        dtypes = sorted({str(d) for _, d, _ in layouts})
        mixed = [what for what, many in ((f"channel counts {counts}", len(counts) > 1),
                                         (f"dtypes {dtypes}", len(dtypes) > 1)) if many]
        if not mixed:
            return  # only spatial sizes differ (whole items, clipped patches): Collate pads them as it always has
        warnings.warn(MixedBatchWarning(
            f"PatchDataset({self.store}): a batch mixes {' and '.join(mixed)} under {role!r} (items "
            f"{', '.join(dict.fromkeys(names))}). torch's default collate cannot batch them (in a worker: 'Trying "
            "to resize storage that is not resizable'); pass collate_fn=labzarr.loaders.Collate(channels=\"pad\", "
            "dtypes=\"promote\") to batch them, or select items of one kind with kind= or where= "
            f"(e.g. where={{'dtype': {dtypes[0]!r}}})"), stacklevel=3)

    def stats(self, *, split: str | None = None, fold: int | None = None,
              holdout: bool | None = None) -> DatasetStats:
        """The store's statistics over this dataset's items, or, given `split`/`fold`/`holdout`, over the store's
        items those select that also pass this dataset's `kind` and `where` (``val_ds.stats(split="train")``:
        normalise validation data with what training saw, of the same kind of item). Read from the store's
        `statistics` group (one small read), merged exactly; see `labzarr.store.DatasetStats` and `normalizer`."""
        return table_stats(self._stats_items(split, fold, holdout),
                           read_statistics_table(self.store, self.read_options.storage_options))

    def _stats_items(self, split: str | None, fold: int | None, holdout: bool | None) -> Sequence[IndexItem]:
        if (split, fold, holdout) == (None, None, None):
            return self.items
        chosen = Selection(split=split, fold=fold, holdout=holdout, where=self.selection.where,
                           kind=self.selection.kind)
        return chosen.apply(self.store_items, where=f"PatchDataset({self.store}).stats")

    def normalizer(self, scheme: Scheme = "zscore", *, split: str | None = None, fold: int | None = None,
                   holdout: bool | None = None, role: str = "image", foreground: bool | None = None,
                   ignore: Collection[int] = (), lower: float = 0.5, upper: float = 99.5) -> Normalize:
        """A `Normalize` of this dataset's `role` from `stats(split=..., fold=..., holdout=...)` (`Normalize.of`'s
        options); ValueError now, before any worker starts, when the statistics' channel count is not that of
        every item this dataset reads, or when they are missing."""
        if role not in self.roles:
            raise ValueError(f"PatchDataset({self.store}).normalizer: role = {role!r}; this dataset reads "
                             f"{', '.join(map(repr, self.roles))}")
        norm = Normalize.of(self.stats(split=split, fold=fold, holdout=holdout), scheme, foreground=foreground,
                            ignore=ignore, lower=lower, upper=upper, role=role)
        channels = len(norm.shift)
        odd = [item for item in self.items if role == "image" and item.shape[0] != channels]
        if odd:
            shown = ", ".join(f"{i.item_id!r}: {i.shape[0]}" for i in odd[:5])
            picked = Selection(split=split, fold=fold, holdout=holdout).describe().lstrip(", ")
            of = f" ({picked})" if picked else ""
            raise ValueError(
                f"PatchDataset({self.store}).normalizer: the statistics{of} have {channels} channel(s), but "
                f"{len(odd)} item(s) of this dataset have another count ({shown}{', ...' if len(odd) > 5 else ''}); "
                "select items of one channel count (kind= or where=) so "
                "the statistics and the samples agree")
        return norm

    def stratified_sampler(self, label: str | None = None, *, replacement: bool = False,
                           num_samples: int | None = None, num_replicas: int | None = None, rank: int | None = None,
                           seed: int | None = None, shard_by: ShardBy = "sample") -> StratifiedSampler:
        """A class-balanced, DDP-aware, resumable sampler over this dataset that follows its epoch (see
        `StratifiedSampler`)."""
        return StratifiedSampler(self, label, replacement=replacement, num_samples=num_samples,
                                 num_replicas=num_replicas, rank=rank, seed=seed, shard_by=shard_by)

    def shuffle_sampler(self, *, num_samples: int | None = None, num_replicas: int | None = None,
                        rank: int | None = None, seed: int | None = None,
                        shard_by: ShardBy = "sample") -> ShuffleSampler:
        """A shuffling, DDP-aware, resumable sampler over this dataset that follows its epoch (see
        `ShuffleSampler`)."""
        return ShuffleSampler(self, num_samples=num_samples, num_replicas=num_replicas, rank=rank, seed=seed,
                              shard_by=shard_by)

    def __repr__(self) -> str:
        return (f"PatchDataset({str(self.store)!r}, patch_size={self.patch_size}, mode={self.mode!r}, "
                f"items={len(self.items)}, len={len(self)}, label={self.label!r}, seed={self.seed}, "
                f"epoch={self.epoch}{self.selection.describe()})")
