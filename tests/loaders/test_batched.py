"""Batched reads (issue 35): a batch's chunks decoded once each in a per-process thread pool, into one tensor
per role, equal byte for byte to reading each sample alone, in the main process and in forked or spawned
workers of a parent that read (and so started its pool) first; and the messages that name the fix."""

from __future__ import annotations

import pickle
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from labzarr import PatchDataset
from labzarr.loaders import Collate, MixedBatchWarning, ReadOptions
from labzarr.store import StoreReader

pad_and_promote = Collate(channels="pad", dtypes="promote")


def one_by_one(ds: PatchDataset, keys: list) -> list[dict]:
    """Each sample read alone, without threads: what a batch must equal."""
    alone = PatchDataset(ds.store, ds.patch_size, patches_per_item=ds.patches_per_item, seed=ds.seed,
                         selection=ds.selection, read=ReadOptions(threads=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixedBatchWarning)  # a batch of one never mixes
        return [alone[k] for k in keys]


def assert_same_bytes(batches: list[dict], expected: list[dict]) -> None:
    got = [(b["item_id"][n], tuple(b["origin"][n].tolist()), b["image"][n]) for b in batches
           for n in range(len(b["item_id"]))]
    assert len(got) == len(expected)
    for (item_id, origin, image), want in zip(got, expected):
        assert (item_id, origin) == (want["item_id"], want["origin"])
        c = want["image"].shape[0]
        part = image[(slice(0, c), *(slice(0, n) for n in want["image"].shape[1:]))]
        assert part.dtype == want["image"].dtype or "image_mask" in batches[0]
        assert part.to(want["image"].dtype).numpy().tobytes() == want["image"].numpy().tobytes()


@pytest.fixture(scope="module")
def volumes(converted_cohort: Path) -> Path:
    """The cohort store: 1-channel int16 volumes of one shape, and two 2D images (left out by kind="volume")."""
    return converted_cohort.parents[2] / "data" / "stores" / "cohort.zarr"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("patch", [(4, 4, 2), (8, 8, 8)], ids=["inside", "padded"])
def test_threaded_batches_equal_unthreaded_reads_in_workers_of_a_parent_that_read(volumes: Path, method: str,
                                                                                 patch: tuple) -> None:
    ds = PatchDataset(volumes, patch, kind="volume", patches_per_item=3, seed=5, read=ReadOptions(threads=3))
    ds.__getitems__([0, 1, 2, 3])  # the parent reads a batch first: its pool and open files exist before the fork
    assert ds._threads.workers == 3
    keys = [(0, int(k)) for k in np.random.default_rng(0).permutation(len(ds))[:24]]
    loader = DataLoader(ds, batch_size=5, sampler=keys, num_workers=2, multiprocessing_context=method,
                        collate_fn=Collate())
    assert_same_bytes(list(loader), one_by_one(ds, keys))


def test_a_batch_is_one_tensor_whose_rows_collate_uncopied(volumes: Path) -> None:
    ds = PatchDataset(volumes, (4, 4, 2), kind="volume", patches_per_item=2, seed=1, read=ReadOptions(threads=2))
    samples = ds.__getitems__([3, 0, 7, 7])
    base = samples[0]["image"]._base
    assert base is not None and base.shape == (4, 1, 4, 4, 2)
    assert all(s["image"]._base is base for s in samples)
    batch = Collate()(samples)
    assert batch["image"] is base  # handed on, not stacked (pinned memory stays pinned)
    assert torch.equal(batch["image"][2], batch["image"][3])  # a repeated key: the same patch
    assert batch["image"].is_pinned() == torch.cuda.is_available()
    # a transform that makes new tensors is stacked as before
    norm = PatchDataset(volumes, (4, 4, 2), kind="volume", patches_per_item=2, seed=1,
                        transform=lambda s: {**s, "image": s["image"].float()})
    floats = Collate()(norm.__getitems__([3, 0, 7, 7]))["image"]
    assert floats._base is None and torch.equal(floats, batch["image"].float())


class SharedAtCollate(Collate):
    """Collate, also telling whether the batch it hands on was in shared memory already in the worker, and is
    the very memory the samples were read into (not a copy)."""

    def __call__(self, batch):  # type: ignore[no-untyped-def]
        out = super().__call__(batch)
        return {**out, "shared_in_worker": out["image"].is_shared(),
                "uncopied": out["image"].data_ptr() == batch[0]["image"].data_ptr()}


@pytest.mark.timeout(120)
def test_a_worker_reads_its_batch_into_shared_memory(volumes: Path) -> None:
    """In a DataLoader worker the batch is read into shared memory and handed on uncopied, so the trip to the
    main process moves no bytes; in the main process it is ordinary (or pinned) memory."""
    ds = PatchDataset(volumes, (4, 4, 2), kind="volume", patches_per_item=2, seed=1, read=ReadOptions(threads=2))
    keys = list(range(12))
    loader = DataLoader(ds, batch_size=4, sampler=keys, num_workers=2, collate_fn=SharedAtCollate())
    batches = list(loader)
    assert [b["shared_in_worker"] for b in batches] == [True] * 3
    assert [b["uncopied"] for b in batches] == [True] * 3
    assert_same_bytes(batches, one_by_one(ds, keys))
    in_main = SharedAtCollate()(ds.__getitems__(keys[:4]))
    assert in_main["shared_in_worker"] is False and in_main["uncopied"] is True


def test_reads_and_decodes_run_in_the_pool_and_a_pickle_carries_no_kept_items(volumes: Path) -> None:
    """The calling thread only waits (numcodecs decodes blosc in a main thread with its global context); what a
    dataset keeps of recently built items stays in its process."""
    ds = PatchDataset(volumes, (4, 4, 2), kind="volume", patches_per_item=2, seed=1, read=ReadOptions(threads=1))
    fresh = len(pickle.dumps(ds))
    on_main: list[bool] = []
    for _ in ds._threads.map(lambda _: on_main.append(threading.current_thread() is threading.main_thread()),
                             list(range(5))):
        pass
    assert on_main == [False] * 5
    samples = ds.__getitems__(list(range(len(ds))))
    assert ds._item.cache_info().currsize == len(ds.items)
    again = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) == fresh and again._item.cache_info().currsize == 0
    assert [s["image"].tolist() for s in again.__getitems__(list(range(len(ds))))] == \
        [s["image"].tolist() for s in samples]


def test_batch_size_and_batch_sampler_read_in_the_main_process(volumes: Path) -> None:
    ds = PatchDataset(volumes, (4, 4, 2), kind="volume", patches_per_item=4, seed=2)
    keys = list(range(len(ds)))[::3]
    by_size = DataLoader(ds, batch_size=4, sampler=keys, collate_fn=Collate())
    by_sampler = DataLoader(ds, batch_sampler=[keys[i:i + 3] for i in range(0, len(keys), 3)],
                            collate_fn=Collate())
    expected = one_by_one(ds, keys)
    assert_same_bytes(list(by_size), expected)
    assert_same_bytes(list(by_sampler), expected)


@pytest.mark.timeout(180)
def test_mixed_items_batch_through_the_pool_and_warn_naming_the_fix(labeled_store: Path) -> None:
    ds = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=2, seed=3, read=ReadOptions(threads=2))
    keys = list(range(len(ds)))
    with pytest.warns(MixedBatchWarning, match=r"mixes channel counts \[.*\] .*under 'image'.*Trying to resize "
                                               r"storage.*collate_fn=labzarr\.loaders\.Collate\(channels=\"pad\", "
                                               r"dtypes=\"promote\"\).*kind= or where="):
        batches = list(DataLoader(ds, batch_size=6, sampler=keys, collate_fn=pad_and_promote))
    assert_same_bytes(batches, one_by_one(ds, keys))


def test_overlapping_regions_read_as_separate_reads(volumes: Path) -> None:
    """Regions sharing chunks (each chunk decoded once for all of them) read as each alone."""
    reader = StoreReader(volumes)
    ds = PatchDataset(volumes, None, kind="volume")
    name = ds.items[0].array
    requests = [(name, (0, slice(0, 4), slice(1, 5), slice(0, 3))), (name, (0, slice(2, 6), slice(0, 5), 1)),
                (name, (slice(None), 3)), (name, (0, slice(0, 4), slice(1, 5), slice(0, 3)))]
    alone = [StoreReader(volumes).read(n, s) for n, s in requests]
    got = reader.read_many(requests, mapper=lambda fn, tasks: list(map(fn, list(tasks)[::-1])))
    assert all(a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(got, alone))
    out = np.full((4, 4, 3), -1, np.int16)[:, :, :]
    (same,) = reader.read_many(requests[:1], out=[out])
    assert same is out and out.tobytes() == alone[0].tobytes()
    with pytest.raises(ValueError, match="out has shape"):
        reader.read_many(requests[:1], out=[np.empty((4, 4), np.int16)])


def test_a_3d_patch_on_a_mixed_store_suggests_kind(volumes: Path) -> None:
    with pytest.raises(ValueError, match=r"item 'p901t1' has 2 spatial axes .*the selection mixes items by spatial "
                                         r"axes \(2 of 2, \d+ of 3\): pass kind='volume' to read the \d+ volume\(s\)"):
        PatchDataset(volumes, (16, 16, 16))
    with pytest.raises(ValueError, match=r"has 3 spatial axes .*pass kind='image' to read the 2 image\(s\)"):
        PatchDataset(volumes, (6, 6))
    with pytest.raises(ValueError, match=r"give patch_size 2 entries .*or choose items with kind= or where="):
        PatchDataset(volumes, (6, 6, 6), kind="image")


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_threads_must_be_a_positive_int(threads: object) -> None:
    with pytest.raises(ValueError, match=r"ReadOptions\(threads=.*expected an int >= 1"):
        ReadOptions(threads=threads)  # type: ignore[arg-type]
