"""The damage table: every kind of lost or broken storage file, in every kind of store, is a `ChecksumError` in the
training loop (main process, fork and spawn workers), never voxels that differ from what was written.

Two stores are converted from the demo delivery, one sharded and one not, with small chunks so an item has many
storage files. In each, four items are damaged four ways (a storage file deleted, one cut to half, a byte flipped,
the whole `c/` folder deleted); the fifth item stays intact. Each damaged folder is also zipped and uploaded to a
moto S3 server, so the same damage is read from a folder, a zip and an object store.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader

from labzarr import PatchDataset, convert_delivery
from labzarr.convert.demo import write_demo, write_spec
from labzarr.store import ChecksumError, StoreReader

from .conftest import zip_store

ITEMS = ("case1", "case2", "case4", "case6", "case8")  # NIfTI volumes of the demo, several storage files each


def _first_file(array: Path) -> Path:
    return min(p for p in (array / "c").rglob("*") if p.is_file())


def delete_file(array: Path) -> None:
    _first_file(array).unlink()


def cut_half(array: Path) -> None:
    path = _first_file(array)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])


def flip_byte(array: Path) -> None:
    path = _first_file(array)
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 3] ^= 0x20  # inside a chunk's bytes: a shard's index sits at its end
    path.write_bytes(bytes(blob))


def delete_chunk_folder(array: Path) -> None:
    shutil.rmtree(array / "c")


DAMAGE: dict[str, Callable[[Path], None]] = {"case1": delete_file, "case2": cut_half, "case4": flip_byte,
                                             "case6": delete_chunk_folder}  # case8 stays intact


@dataclass(frozen=True)
class Damaged:
    """One damaged store as read from one kind of location, and the voxels its items had before the damage."""

    name: str  # "sharded-folder", "unsharded-s3", ...
    store: str
    storage_options: dict[str, str]
    truth: dict[str, np.ndarray]


def _convert(root: Path, name: str, chunks: str, shards: str, scheduler: str) -> Path:
    raw = write_demo(root / "raw" / name)
    store = root / "stores" / f"{name}.zarr"
    spec = write_spec(root / "manifests" / name / "delivery.toml", raw=raw, store=store, name=name)
    text = spec.read_text().replace("chunks = [32, 32, 32]", f"chunks = {chunks}")
    spec.write_text(text.replace("shards = [256, 256, 128]", f"shards = {shards}"))
    convert_delivery(spec, scheduler=scheduler)
    return store


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, scheduler: str, s3) -> Iterator[list[Damaged]]:
    import fsspec

    root = tmp_path_factory.mktemp("damage")
    out: list[Damaged] = []
    # Small chunks, so an item has several storage files (shards of several chunks): damage to one is partial.
    for layout, chunks, shards in (("sharded", "[8, 8, 8]", "[16, 16, 16]"), ("unsharded", "[16, 16, 16]", "false")):
        store = _convert(root, layout, chunks, shards, scheduler)
        intact = PatchDataset(store, None, items=list(ITEMS))
        truth = {s["item_id"]: s["image"].numpy() for s in (intact[i] for i in range(len(intact)))}
        for item in intact.items:
            assert len(list((store / item.array / "c").rglob("*"))) > 2, "an item needs several storage files"
        for item_id, damage in DAMAGE.items():
            damage(store / next(i.array for i in intact.items if i.item_id == item_id))
        zipped = zip_store(store, root / f"{layout}.zarr.zip")
        url = f"s3://labzarr/damage/{layout}.zarr"
        fs = fsspec.filesystem("s3", endpoint_url=s3.endpoint, skip_instance_cache=True)
        fs.put(str(store), url.removeprefix("s3://"), recursive=True)
        options = {"endpoint_url": s3.endpoint}
        out += [Damaged(f"{layout}-folder", str(store), {}, truth), Damaged(f"{layout}-zip", str(zipped), {}, truth),
                Damaged(f"{layout}-s3", url, options, truth)]
    yield out


def _dataset(d: Damaged) -> PatchDataset:
    from labzarr.loaders import ReadOptions

    return PatchDataset(d.store, None, items=list(ITEMS), read=ReadOptions(storage_options=d.storage_options))


def _check(d: Damaged, item_id: str, got: dict[str, object] | BaseException) -> None:
    """A damaged item must fail as ChecksumError naming it; the intact one must equal its undamaged voxels."""
    if item_id in DAMAGE:
        assert isinstance(got, ChecksumError), f"{d.name} {item_id} ({DAMAGE[item_id].__name__}): {got!r}"
        assert item_id in str(got) and "labzarr verify" in str(got)
    else:
        assert isinstance(got, dict), f"{d.name} {item_id}: {got!r}"
        image = got["image"]
        assert isinstance(image, torch.Tensor)
        np.testing.assert_array_equal(image.numpy(), d.truth[item_id])


def _outcomes(loader: DataLoader, n: int) -> list[dict[str, object] | BaseException]:
    """What each of `n` batches of `loader` is, an error included: torch carries on after a worker's error."""
    it = iter(loader)
    out: list[dict[str, object] | BaseException] = []
    for _ in range(n):
        try:
            out.append(next(it))
        except ChecksumError as exc:  # the training loop's own `except`: the class survives the worker
            out.append(exc)
    return out


def test_every_damage_in_every_store_is_a_named_error_in_this_process(damaged: list[Damaged]) -> None:
    assert len(damaged) == 6
    for d in damaged:
        ds = _dataset(d)
        for n, item in enumerate(ds.items):
            try:
                got: dict[str, object] | BaseException = ds[n]
            except ChecksumError as exc:
                got = exc
            _check(d, item.item_id, got)
            if item.item_id in DAMAGE:  # zarr-python's path, with the record, refuses the same damage
                with pytest.raises(ChecksumError, match=item.item_id):
                    StoreReader(d.store, storage_options=d.storage_options, backend="zarr").read(item.array)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_every_damage_is_the_same_error_class_through_a_dataloader_worker(damaged: list[Damaged], method: str) -> None:
    datasets = [_dataset(d) for d in damaged]  # one worker serves every store: a spawn costs seconds
    datasets[0][len(datasets[0]) - 1]  # the parent has read before the worker starts, as a training script may
    loader = DataLoader(ConcatDataset(datasets), batch_size=None, num_workers=1, multiprocessing_context=method)
    got = iter(_outcomes(loader, sum(len(ds) for ds in datasets)))
    for d, ds in zip(damaged, datasets):
        for item in ds.items:
            _check(d, item.item_id, next(got))
