"""Statistics taken while converting: per item against numpy on the stored voxels (CT-like volumes and nibabel's
real files; per mask class with an ignore label), merged per delivery exactly, incrementally as from scratch."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
import zarr

from labzarr.convert._counting import _compiled
from labzarr.convert.demo import NIBABEL_DATA
from labzarr.convert.intensity import Accumulator
from labzarr.convert.run.driver import execute
from labzarr.convert.spec import load_spec
from labzarr.loaders import Normalize, PatchDataset
from labzarr.readers import Limits, open_source, read_head
from labzarr.readers.nifti import NiftiReader
from labzarr.store import STATS, dataset_stats, open_store, read_statistics
from labzarr.store.format.index import decode_stats

from ..intensities import assert_matches, ct_like
from ..segmentation import save

REAL = ("anatomical.nii", "example4d.nii.gz", "functional.nii", "standard.nii.gz", "example_nifti2.nii.gz")
IGNORE = 9  # the ignore label of the segmentation delivery's masks


def _spec(root: Path, raw: Path, store: Path, extra: str = "") -> Path:
    path = root / "manifests" / store.stem / "delivery.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[delivery]\nname = "{store.stem}"\nraw = "{raw}"\nstore = "{store}"\n\n'
                    "[items]\nid_pattern = '(?P<id>[a-z0-9_]+)\\.nii'\n\n"
                    '[store]\nchunks = [16, 16, 8]\nshards = [32, 32, 16]\n\n[validate]\nnon_finite = "warn"\n'
                    + extra)
    return path


def _ct(raw: Path, n: int) -> None:
    data = ct_like(n, (28, 24, 18))
    save(raw / f"ct_{n:02d}.nii.gz", data, np.diag([-0.7, 0.7, 1.5, 1.0]))


@pytest.fixture(scope="module")
def deliveries(tmp_path_factory: pytest.TempPathFactory, dask_client):
    """20 CT-like volumes and nibabel's real files (one float volume with NaNs let through) converted into one
    store; 5 more added and converted incrementally; all 25 converted from scratch into another store."""
    base = tmp_path_factory.mktemp("stats")
    raw = base / "raw"
    raw.mkdir()
    for n in range(20):
        _ct(raw, n)
    for name in REAL:
        shutil.copy(NIBABEL_DATA / name, raw / name)
    nan = np.random.default_rng(3).normal(100, 20, (12, 10, 8)).astype(np.float32)
    nan[1, 2, 3] = nan[4, 5, 6] = np.nan
    save(raw / "nan_01.nii.gz", nan, np.eye(4))
    first = execute(load_spec(_spec(base / "a", raw, base / "a.zarr"), root=base), dask_client)
    for n in range(20, 25):
        _ct(raw, n)
    again = execute(load_spec(base / "a" / "manifests" / "a" / "delivery.toml", root=base), dask_client)
    scratch = execute(load_spec(_spec(base / "b", raw, base / "b.zarr"), root=base), dask_client)
    return base, first, again, scratch


def test_every_item_matches_numpy_on_its_stored_voxels(deliveries) -> None:
    base, _, _, scratch = deliveries
    assert all(r.status == "ok" for r in scratch.rows), [(r.item_id, r.detail) for r in scratch.rows]
    view = open_store(base / "b.zarr")
    records = read_statistics(base / "b.zarr")
    assert len(view.items) == 31 and set(records) == {i.key for i in view.items}
    for item in view.items:
        record = records[item.key]
        voxels = view.read(item)
        assert len(record.channels) == voxels.shape[0]
        for c in range(voxels.shape[0]):
            assert_matches(record.channels[c], voxels[c])
        # the same record in the array's attributes; the index keeps its moments
        attrs = zarr.open_array(base / "b.zarr", path=item.array, mode="r").attrs
        assert decode_stats(attrs[STATS]) == record
        assert item.stats == record.moments()
    (nan,) = (i for i in view.items if i.item_id == "nan01")
    assert records[nan.key].channels[0].nan == 2


def test_nifti_real_files_match_nibabel(deliveries) -> None:
    """The records of nibabel's real files equal numpy's statistics of what nibabel itself reads."""
    base, _, _, scratch = deliveries
    records = read_statistics(base / "b.zarr")
    for name in REAL:
        (row,) = (r for r in scratch.rows if r.source == name)
        data = np.asarray(nib.load(NIBABEL_DATA / name).dataobj)
        channels = data.reshape(*data.shape[:3], -1)
        stats = records[row.array]
        assert len(stats.channels) == channels.shape[-1]
        for c, s in enumerate(stats.channels):
            assert_matches(s, channels[..., c].astype(row.dtype))  # nibabel scales to float64, the store float32


def test_incremental_rerun_gives_the_aggregates_of_a_full_recompute(deliveries) -> None:
    base, first, again, scratch = deliveries
    assert again.run_log["run"] == {"converted": 5, "unchanged": 26, "parts": 0}
    a, b = (json.loads((base / d / "manifests" / d / "summary.json").read_text())["statistics"] for d in "ab")
    assert a == b
    assert read_statistics(base / "a.zarr") == read_statistics(base / "b.zarr")
    assert a["items"] == 31 and a["missing"] == 0
    assert first.summary["statistics"]["items"] == 26 and first.summary["statistics"] != a
    assert again.summary["statistics"] == scratch.summary["statistics"] == a
    assert not any((base / "a.zarr" / ".labzarr" / "spill").iterdir())  # the runs' spills went with them


def test_a_killed_runs_spill_is_swept(tmp_path: Path, dask_client) -> None:
    """The driver spills statistics records beside the store; what a killed run left there goes at the next run."""
    raw = tmp_path / "raw"
    raw.mkdir()
    _ct(raw, 2)
    left = tmp_path / "s.zarr" / ".labzarr" / "spill" / "labzarr-stats-killed"
    left.mkdir(parents=True)
    (left / "mean").write_bytes(bytes(800))
    result = execute(load_spec(_spec(tmp_path, raw, tmp_path / "s.zarr"), root=tmp_path), dask_client)
    assert result.summary["statistics"]["items"] == 1 and result.summary["statistics"]["missing"] == 0
    assert not any(left.parent.iterdir())


def test_aggregates_against_numpy_over_every_voxel(deliveries) -> None:
    base = deliveries[0]
    view = open_store(base / "b.zarr")
    cts = [i for i in view.items if i.item_id.startswith("ct")]
    merged = view.stats(cts)
    everything = np.concatenate([view.read(i).ravel() for i in cts])
    (channel,) = merged.channels
    assert_matches(channel, everything)
    assert merged.geometry["volume"].items == 25
    assert merged.kinds.keys() == {"nifti"}
    summary = json.loads((base / "b" / "manifests" / "b" / "summary.json").read_text())["statistics"]
    assert summary == view.stats().summary()
    assert merged.geometry["volume"].orientations == {"LAS": 25}  # as stored, before reorientation to RAS
    assert merged.geometry["volume"].spacing[2].max == pytest.approx(1.5)


def test_statistics_off_writes_none(tmp_path: Path, dask_client) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    _ct(raw, 1)
    spec = _spec(tmp_path, raw, tmp_path / "off.zarr")
    spec.write_text(spec.read_text().replace("shards = [32, 32, 16]\n", "shards = [32, 32, 16]\nstatistics = false\n"))
    result = execute(load_spec(spec, root=tmp_path), dask_client)
    (row,) = result.rows
    assert row.status == "ok" and row.stats is None
    view = open_store(tmp_path / "off.zarr")
    assert view.items[0].stats is None and read_statistics(tmp_path / "off.zarr") == {}
    assert STATS not in zarr.open_array(tmp_path / "off.zarr", path=row.array, mode="r").attrs
    stats = view.stats()
    assert (stats.items, stats.missing) == (1, 1)
    with pytest.raises(ValueError, match="statistics = false"):
        Normalize.of(stats)


@pytest.fixture(scope="module")
def segmentation(tmp_path_factory: pytest.TempPathFactory, dask_client):
    """4 CT-like samples with masks of classes 0, 1, 2 and an ignore region labelled `IGNORE`."""
    base = tmp_path_factory.mktemp("seg-stats")
    raw = base / "raw"
    affine = np.diag([0.8, -0.8, 2.0, 1.0])
    for n in range(4):
        image = ct_like(40 + n, (30, 26, 12))
        mask = np.zeros(image.shape, np.uint8)
        mask[image > 0] = 1
        mask[image > 600] = 2
        mask[:5, :5, :] = IGNORE
        save(raw / f"case_{n}_img.nii.gz", image, affine)
        save(raw / f"case_{n}_seg.nii.gz", mask, affine)
    path = base / "manifests" / "seg" / "delivery.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f'[delivery]\nname = "seg"\nraw = "{raw}"\nstore = "{base / "seg.zarr"}"\n\n'
                    "[items]\nid_pattern = '(?P<id>case_\\d+)'\nroles = { image = \"*_img*\", mask = \"*_seg*\" }\n\n"
                    f"[masks]\nclasses = [0, 1, 2, {IGNORE}]\n")
    result = execute(load_spec(path, root=base), dask_client)
    assert [r.status for r in result.rows] == ["ok"] * 4, [r.detail for r in result.rows]
    return base / "seg.zarr"


def test_per_class_statistics_of_samples_match_numpy(segmentation: Path) -> None:
    view = open_store(segmentation)
    records = read_statistics(segmentation)
    images, masks = [], []
    for item in view.items:
        image = view.reader.read(item.role_array("image"))[0]
        mask = view.reader.read(item.role_array("mask"))[0]
        record = records[item.key]
        assert sorted(record.classes) == [0, 1, 2, IGNORE]
        for k, (s,) in record.classes.items():
            assert_matches(s, image[mask == k])
            assert s.count == item.classes[k].voxels
        (fg,) = record.foreground(ignore=(IGNORE,))
        assert_matches(fg, image[(mask == 1) | (mask == 2)])
        attrs = zarr.open_array(segmentation, path=item.role_array("image"), mode="r").attrs
        assert decode_stats(attrs[STATS]) == record
        images.append(image)
        masks.append(mask)
    image, mask = np.concatenate([i.ravel() for i in images]), np.concatenate([m.ravel() for m in masks])
    stats = view.stats()
    (fg,) = stats.foreground(ignore=(IGNORE,))
    assert_matches(fg, image[(mask == 1) | (mask == 2)])
    assert stats.classes[IGNORE].voxels == int(np.count_nonzero(mask == IGNORE))
    # nnU-Net's CT scheme: clip to the foreground's 0.5/99.5 percentiles, then its mean and deviation
    norm = Normalize.of(stats, "ct", ignore=(IGNORE,))
    assert norm.clip == ((fg.percentile(0.5), fg.percentile(99.5)),)
    assert norm.shift == (fg.mean,) and norm.scale == (fg.std,)
    ds = PatchDataset(segmentation, (16, 16, 8), transform=norm, seed=1)
    sample = ds[0]
    raw = PatchDataset(segmentation, (16, 16, 8), seed=1)[0]["image"].to(torch.float32)
    lo, hi = norm.clip[0]
    want = (raw.clamp(lo, hi) - fg.mean) / fg.std
    torch.testing.assert_close(sample["image"], want)


def test_training_split_statistics(converted_cohort: Path) -> None:
    """`ds.stats(split="train")` merges the training items that pass the dataset's own `kind` (issue 35: the
    2D images of the split once leaked into a volume dataset's statistics); 2D images carry their own."""
    store = converted_cohort.parents[2] / "data" / "stores" / "cohort.zarr"
    val = PatchDataset(store, (4, 4, 2), split="val", kind="volume")
    train = [i for i in val.store_items if i.split == "train" and i.spatial_axes == 3]
    assert len(train) < sum(i.split == "train" for i in val.store_items)  # the split holds 2D images too
    stats = val.stats(split="train")
    assert stats == dataset_stats(train, read_statistics(store))
    assert stats.items == len(train) and stats != val.stats()
    assert val.stats().items == len(val.items)
    values = np.concatenate([open_store(store).read(i).ravel() for i in train])
    (channel,) = stats.channels  # the training volumes, exactly: no 2D image of the split
    assert_matches(channel, values)
    norm = val.normalizer("zscore", split="train")
    assert norm == Normalize.of(stats)
    x = torch.arange(12, dtype=torch.float32).reshape(1, 2, 2, 3)
    torch.testing.assert_close(norm({"image": x})["image"], (x - channel.mean) / channel.std)
    with pytest.raises(ValueError, match="split"):
        val.stats(split="nope")
    view = open_store(store)
    for item in (i for i in view.items if i.spatial_axes == 2):
        (s,) = read_statistics(store)[item.key].channels
        assert_matches(s, view.read(item))


@pytest.mark.parametrize(("select", "axes"), [({"kind": "volume"}, 3), ({"kind": "image"}, 2),
                                              ({"where": {"diagnosis": "tumour"}}, 3)])
def test_stats_of_a_selection_are_numpy_over_exactly_its_items(converted_cohort: Path, select: dict,
                                                               axes: int) -> None:
    store = converted_cohort.parents[2] / "data" / "stores" / "cohort.zarr"
    ds = PatchDataset(store, None, **select)
    assert {i.spatial_axes for i in ds.items} == {axes} and len(ds.items) < len(ds.store_items)
    view = open_store(store)
    (channel,) = ds.stats().channels
    assert_matches(channel, np.concatenate([view.read(i).ravel() for i in ds.items]))
    # a split intersected with the same selection: numpy over the selected items of that split only
    chosen = [i for i in ds.items if i.split == "train"]
    (channel,) = ds.stats(split="train").channels
    assert_matches(channel, np.concatenate([view.read(i).ravel() for i in chosen]))


def test_a_normalizer_of_another_channel_count_is_refused_at_construction(converted_demo) -> None:
    store = converted_demo[0].store
    mixed = PatchDataset(store, (8, 8, 8))
    counts = {i.shape[0] for i in mixed.items}
    assert len(counts) > 1  # the demo mixes channel counts
    with pytest.raises(ValueError, match=r"normalizer: the statistics have \d+ channel\(s\), but \d+ item\(s\) "
                                         r"of this dataset have another count .*kind= or where="):
        mixed.normalizer("zscore")
    one = PatchDataset(store, (8, 8, 8), where=lambda i: i.shape[0] == 1, seed=1)
    norm = one.normalizer("zscore")
    assert norm == Normalize.of(one.stats()) and len(norm.shift) == 1
    sample = PatchDataset(store, (8, 8, 8), where=lambda i: i.shape[0] == 1, seed=1, transform=norm)[0]
    raw = one[0]["image"].to(torch.float32)
    torch.testing.assert_close(sample["image"], (raw - norm.shift[0]) / norm.scale[0])
    with pytest.raises(ValueError, match="role = 'mask'"):
        one.normalizer(role="mask")


def test_statistics_add_a_few_mb_on_a_600_mb_volume(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The accumulator's own peak, measured slab by slab while streaming the memory test's 624 MB volume."""
    from .test_memory import _write

    path = tmp_path_factory.mktemp("big") / "big.nii.gz"
    _write(path)
    source = open_source(NiftiReader(), path, Limits(), read_head(path))
    acc = Accumulator(source.header.dtype)
    _compiled()  # its slabs are large enough for the compiled counting loop: loading it is not the accumulator's
    tracemalloc.start()
    worst = 0
    try:
        for slab in source.slabs((1, 256, 256, 128)):
            tracemalloc.reset_peak()
            held, _ = tracemalloc.get_traced_memory()
            acc.update(slab)
            worst = max(worst, tracemalloc.get_traced_memory()[1] - held)
    finally:
        tracemalloc.stop()
    (s,) = acc.result(1)
    assert s.count == 600 * 520 * 1000
    print(f"statistics peak {worst / (1 << 20):.1f} MiB above the slab")
    assert worst < 8 << 20
