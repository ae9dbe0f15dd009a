"""`table_stats` (the merge over the statistics table's columns) equals `dataset_stats` (the merge of built records,
item by item) to the bit, on converted stores and on a synthetic table of many items, for selections too."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labzarr.convert.write.arrays import write_index, write_statistics
from labzarr.loaders import PatchDataset
from labzarr.store import (
    ChannelStats,
    ClassInfo,
    DatasetStats,
    Folder,
    Histogram,
    IndexItem,
    ItemStats,
    StoreIndex,
    aggregate_table,
    dataset_stats,
    open_store,
    read_statistics,
    read_statistics_table,
    table_stats,
)
from labzarr.store.aggregate import PERCENTILES
from labzarr.store.format.items import IndexItems


def bits(x: Any) -> Any:
    """`x` as nested tuples where every float is its exact bits (-0.0 and NaN payloads included) and every value
    keeps its type: two results are identical to the bit when these are equal."""
    if isinstance(x, Histogram):
        return ("Histogram", tuple(x.ordinals.tolist()), tuple(x.counts.tolist()))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, *((f.name, bits(getattr(x, f.name))) for f in dataclasses.fields(x)))
    if isinstance(x, dict):
        return ("dict", *((bits(k), bits(v)) for k, v in x.items()))
    if isinstance(x, tuple | list):
        return (type(x).__name__, *(bits(v) for v in x))
    if type(x) is float:
        return ("float", x.hex())
    assert type(x) in (int, str, bool), f"{type(x)} in a DatasetStats"
    return (type(x).__name__, x)


def assert_identical(got: DatasetStats, want: DatasetStats) -> None:
    assert bits(got) == bits(want)
    assert json.dumps(got.summary()) == json.dumps(want.summary())  # percentiles of every channel included
    for mine, theirs in zip(_channels(got), _channels(want), strict=True):
        assert [v.hex() for v in mine.percentiles(PERCENTILES)] == [v.hex() for v in theirs.percentiles(PERCENTILES)]


def _channels(s: DatasetStats) -> list[ChannelStats]:
    out = []
    for intensity in (s.intensity, *s.kinds.values()):
        out += [*intensity.channels, *(c for cs in intensity.classes.values() for c in cs), *intensity.foreground()]
    return out


def _reference(store: Path, items: list[IndexItem]) -> DatasetStats:
    return dataset_stats(items, read_statistics(store))


# -- a synthetic store of many items, every case the merge has --------------------------------------------------

_KINDS = ("jpeg", "png", "nifti", "dicom", "")
_ORIENTATIONS = ("LPS", "RAS", "", "LAS")


def _channel(rng: np.random.Generator, *, integral: bool) -> ChannelStats:
    case = rng.integers(0, 12)
    if case == 0:  # nothing finite: NaN and infinities only
        return ChannelStats(count=0, mean=0.0, m2=0.0, min=0.0, max=0.0, nan=int(rng.integers(1, 9)),
                            inf=int(rng.integers(0, 3)), integral=integral)
    n = int(rng.integers(1, 60))
    lo = float(rng.choice([0.0, -0.0, -1024.0, 1e-3, float(rng.normal())]))
    bins = np.sort(rng.choice(np.arange(-300, 17000), n, replace=False))
    counts = rng.integers(1, 10**6 if case == 1 else 50, n)
    hi = lo + float(rng.exponential(1e3 if case != 2 else 1e200))  # one channel near overflow: squares to inf
    return ChannelStats(count=int(counts.sum()), mean=float(rng.uniform(lo, hi)), m2=float(rng.exponential(1e6)),
                        min=lo, max=hi, histogram=Histogram(bins, counts), nan=int(rng.integers(0, 2)),
                        inf=0, integral=integral)


def synthetic_items(n: int, seed: int = 0, *, prefix: str = "") -> tuple[list[IndexItem], dict[str, ItemStats]]:
    """`n` index items of every kind (2D stack images, volumes with and without spacing, samples with mask classes,
    items without statistics) and their full statistics records."""
    rng = np.random.default_rng(seed)
    items, records = [], {}
    for i in range(n):
        volume = bool(rng.integers(0, 2))
        channels = int(rng.integers(1, 4))
        shape = (channels, *rng.integers(4, 300, 3 if volume else 2).tolist())
        spacing = tuple(float(s) for s in rng.choice([0.5, 1.0, 1.25, 3.0], 3)) if volume and rng.integers(0, 4) \
            else ()
        masked = volume and bool(rng.integers(0, 3) == 0)
        classes = {k: ClassInfo(voxels=int(rng.integers(0, 5000)) * int(rng.integers(0, 2)), start=0, stop=0)
                   for k in sorted(rng.choice([0, 1, 2, 5, 255], int(rng.integers(1, 4)), replace=False).tolist())
                   } if masked else {}
        integral = bool(rng.integers(0, 4))
        stats = None if rng.integers(0, 9) == 0 else ItemStats(
            channels=tuple(_channel(rng, integral=integral) for _ in range(channels)),
            classes={k: tuple(_channel(rng, integral=integral) for _ in range(channels)) for k in classes})
        array = f"volumes/{prefix}v{i:05d}" if volume else f"stacks/{prefix}s{i % 3}"
        item = IndexItem(item_id=f"it{i:05d}", array=array,
                         slot=i if not volume else None, kind=str(rng.choice(_KINDS)), source=f"raw/{i}",
                         shape=shape, dtype="uint8" if integral else "float32", spacing=spacing,
                         labels={"site": str(rng.choice(["a", "b"]))}, classes=classes,
                         split=str(rng.choice(["train", "val", "test"])),
                         orientation=str(rng.choice(_ORIENTATIONS)) if volume else "", stats=stats)
        items.append(item)
        if stats is not None and rng.integers(0, 20):  # some items with index moments have no full record
            records[item.key] = stats
    return items, records


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[IndexItem]]:
    store = tmp_path_factory.mktemp("synthetic") / "many.zarr"
    items, records = synthetic_items(3000)
    write_statistics(Folder(store), records)
    write_index(Folder(store), StoreIndex(delivery="many", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))
    return store, items


SELECT: list[Any] = [
    pytest.param(lambda i: True, id="all"),
    pytest.param(lambda i: i.spatial_axes == 2, id="kind-image"),
    pytest.param(lambda i: i.spatial_axes == 3, id="kind-volume"),
    pytest.param(lambda i: i.split == "train", id="split-train"),
    pytest.param(lambda i: i.split == "val" and i.labels.get("site") == "a", id="split-val-where-site"),
    pytest.param(lambda i: i.kind == "png", id="one-kind"),
    pytest.param(lambda i: i.item_id == "it00007", id="one-item"),
    pytest.param(lambda i: False, id="none"),
]


@pytest.mark.parametrize("select", SELECT)
def test_synthetic_selections_equal_the_per_item_merge(synthetic: tuple[Path, list[IndexItem]],
                                                       select: Callable[[IndexItem], bool]) -> None:
    store, items = synthetic
    view = open_store(store)
    chosen = np.flatnonzero([select(i) for i in items])
    got = table_stats(IndexItems.of(view.items).take(chosen), read_statistics_table(store))
    want = _reference(store, [items[k] for k in chosen])
    assert got.items == len(chosen)
    assert_identical(got, want)


@pytest.mark.parametrize("select", [pytest.param(lambda i: True, id="all-cells"),
                                    pytest.param(lambda i: i.kind == "png" and i.shape[0] == 1, id="one-cell")])
def test_histograms_added_in_many_batches(synthetic: tuple[Path, list[IndexItem]], select: Callable[[IndexItem], bool],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of a few hundred bins: the batch edges fall inside the rows of items, of every cell, and of one; and
    dense counts for 3 cells at a time (a pass over the bins per 3 cells)."""
    monkeypatch.setattr(aggregate_table, "_BATCH_BINS", 300)
    monkeypatch.setattr(aggregate_table, "_CELLS", 3)
    store, items = synthetic
    chosen = np.flatnonzero([select(i) for i in items])
    got = table_stats(IndexItems.of(open_store(store).items).take(chosen), read_statistics_table(store))
    assert_identical(got, _reference(store, [items[k] for k in chosen]))


def test_an_item_chosen_twice_counts_twice(synthetic: tuple[Path, list[IndexItem]]) -> None:
    store, items = synthetic
    chosen = np.asarray([5, 9, 5, 17, 9, 9])
    got = table_stats(IndexItems.of(open_store(store).items).take(chosen), read_statistics_table(store))
    assert_identical(got, _reference(store, [items[k] for k in chosen]))


def test_the_synthetic_table_has_the_cases_it_is_for(synthetic: tuple[Path, list[IndexItem]]) -> None:
    """The bit-for-bit checks above are only as good as the cases: several kinds, missing records, mask classes,
    non-finite-only channels, signed zeros as minimum and a merged M2 that overflows."""
    store, items = synthetic
    s = _reference(store, items)
    assert len(s.kinds) == len(_KINDS) and s.missing > 100 and s.classes and s.intensity.classes
    assert set(s.geometry) == {"volume", "image"} and s.geometry["volume"].spacings
    assert any(c.nan and c.count for c in _channels(s)) and any(math.isinf(c.m2) for c in _channels(s))
    lows = [c.min for i in items if i.stats for c in i.stats.channels if c.count and c.min == 0]
    assert {math.copysign(1, v) for v in lows} == {1.0, -1.0}


def test_no_statistics_table_makes_every_item_missing(synthetic: tuple[Path, list[IndexItem]]) -> None:
    store, items = synthetic
    got = table_stats(open_store(store).items, None)
    assert_identical(got, dataset_stats(items, {}))
    assert got.missing == len(items)


def test_a_plain_list_of_items_is_merged_alike(synthetic: tuple[Path, list[IndexItem]]) -> None:
    store, items = synthetic
    assert_identical(table_stats(items[:200], read_statistics_table(store)), _reference(store, items[:200]))


# -- converted stores ---------------------------------------------------------------------------------------------


def test_cohort_store_and_its_selections(converted_cohort: Path) -> None:
    store = converted_cohort.parents[2] / "data" / "stores" / "cohort.zarr"
    view = open_store(store)
    items = list(view.items)
    assert_identical(view.stats(), _reference(store, items))
    for select, split, keep in (({"kind": "volume"}, "train", lambda i: i.spatial_axes == 3),
                                ({"kind": "image"}, "train", lambda i: i.spatial_axes == 2),
                                ({"where": {"diagnosis": "tumour"}}, "train",
                                 lambda i: i.labels.get("diagnosis") == "tumour")):
        ds = PatchDataset(store, None, **select)
        assert_identical(ds.stats(), _reference(store, [i for i in items if keep(i)]))
        assert_identical(ds.stats(split=split), _reference(store, [i for i in items if keep(i) and i.split == split]))


def test_segmentation_store_with_mask_classes(converted_seg) -> None:
    d, _, _ = converted_seg
    view = open_store(d.store)
    want = _reference(d.store, list(view.items))
    assert want.classes and want.intensity.classes  # the per-class merge is exercised
    assert_identical(view.stats(), want)


def test_2d_store_of_mixed_kinds(converted_images) -> None:
    d, _, _ = converted_images
    view = open_store(d.store)
    want = _reference(d.store, list(view.items))
    assert len(want.kinds) > 1
    assert_identical(view.stats(), want)


def test_labeled_demo_store(converted_demo) -> None:
    d, _ = converted_demo
    view = open_store(d.store)
    assert_identical(view.stats(), _reference(d.store, list(view.items)))


def test_an_empty_statistics_table_makes_every_item_missing(tmp_path: Path) -> None:
    items, _ = synthetic_items(40, seed=3)
    store = tmp_path / "empty.zarr"
    write_statistics(Folder(store), {})
    write_index(Folder(store), StoreIndex(delivery="e", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))
    got = open_store(store).stats()
    assert_identical(got, _reference(store, items))
    assert got.missing == len(items)


def test_keys_beyond_ascii_are_matched_alike(tmp_path: Path) -> None:
    """Keys numpy cannot hold as ASCII bytes are looked up one by one: the same result."""
    items, records = synthetic_items(300, seed=5, prefix="gewebe-\u00fc-")
    store = tmp_path / "unicode.zarr"
    write_statistics(Folder(store), records)
    write_index(Folder(store), StoreIndex(delivery="u", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))
    got = open_store(store).stats()
    assert_identical(got, _reference(store, items))
    assert got.missing < len(items) // 2


def test_inspect_stats_of_a_split_is_the_per_item_merge_of_that_split(converted_cohort: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from labzarr.convert.cli import main
    from labzarr.convert.qc.fingerprint import describe_stats

    store = converted_cohort.parents[2] / "data" / "stores" / "cohort.zarr"
    train = [i for i in open_store(store).items if i.split == "train"]
    assert main(["inspect", "--stats", "--split", "train", str(converted_cohort)]) == 0
    out = capsys.readouterr().out
    assert describe_stats(_reference(store, train), title="statistics of split train") in out
    assert main(["inspect", "--stats", "--split", "nope", str(converted_cohort)]) == 2
    assert "the store's splits are" in capsys.readouterr().err


def test_means_summing_past_the_largest_float_merge_alike(tmp_path: Path) -> None:
    """Records whose count x mean terms sum past the largest float (`math.fsum` alone raises OverflowError): the
    merge from the table equals the per-item merge, to the bit."""
    items, records = synthetic_items(60, seed=7)
    top = float(np.finfo(np.float64).max)
    # each term count x mean about half the largest float: finite alone, past it summed
    huge = {key: ItemStats(channels=tuple(dataclasses.replace(c, mean=top / 2 / c.count if c.count else 0.0, min=0.0,
                                                              max=top) for c in stats.channels), classes=stats.classes)
            for key, stats in records.items()}
    with pytest.raises(OverflowError):
        math.fsum(c.count * c.mean for s in huge.values() for c in s.channels[:1])
    store = tmp_path / "huge.zarr"
    write_statistics(Folder(store), huge)
    write_index(Folder(store), StoreIndex(delivery="h", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))
    got = open_store(store).stats()
    assert_identical(got, _reference(store, items))
    assert math.isfinite(got.intensity.channels[0].mean)
