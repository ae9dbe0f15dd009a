"""The statistics spill: records spilled as they arrive write the table `write_records` writes, to the byte, and
merge as that table does; tables are written a chunk at a time, whatever their columns are read from, and a
statistics table's bins are read a slice at a time."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.convert.write.arrays import write_index, write_statistics
from labzarr.store import (
    ChannelStats,
    Folder,
    ItemStats,
    StoreIndex,
    dataset_stats,
    open_store,
    read_statistics,
    read_statistics_table,
    table_stats,
)
from labzarr.store.chunks.codecs import zarr_codecs
from labzarr.store.format import nodes, stats_spill
from labzarr.store.format import table as table_module
from labzarr.store.format.index import STATISTICS
from labzarr.store.format.items import IndexItems
from labzarr.store.format.stats_spill import StatsSpill, write_spilled
from labzarr.store.format.table import Chunked, TableSlices, read_table, write_table
from labzarr.store.read import open_transport

from .test_aggregate_table import assert_identical, synthetic_items


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _spilled(tmp: Path, records: dict[str, ItemStats], *, seed: int = 0, again: bool = True) -> StatsSpill:
    """`records` spilled in a shuffled order; with `again`, one of them first spilled with another record (a key
    added again replaces its record, as in a dict)."""
    pairs = list(records.items())
    random.Random(seed).shuffle(pairs)
    spill = StatsSpill(tmp)
    first_key = pairs[0][0]
    if again:
        spill.add(first_key, pairs[-1][1])
    for key, stats in pairs:
        spill.add(key, stats)
    return spill


@pytest.mark.parametrize("again", [True, False], ids=["a-key-added-again", "distinct-keys"])
def test_spilled_records_write_the_same_table_and_merge_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               again: bool) -> None:
    """Over several flushes and read-back batches: the bytes `write_statistics` writes, and the `table_stats` of
    the written table, from the spill itself (keys all distinct: their column made from their bytes)."""
    monkeypatch.setattr(stats_spill, "_FLUSH", 64)
    monkeypatch.setattr(stats_spill, "_BATCH_ROWS", 50)
    monkeypatch.setattr(stats_spill, "_TAKE_ROWS", 37)
    items, records = synthetic_items(600, seed=11)
    whole = tmp_path / "whole.zarr"
    write_statistics(Folder(whole), records)
    write_index(Folder(whole), StoreIndex(delivery="w", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))
    with _spilled(tmp_path, records, again=again) as spill:
        spilled = tmp_path / "spilled.zarr"
        write_spilled(Folder(spilled), spill, [i.key for i in items if i.key in records])
        assert _files(spilled / STATISTICS) == _files(whole / STATISTICS)
        assert read_statistics(spilled) == records
        assert_identical(table_stats(IndexItems.of(items), spill.record_table()), open_store(whole).stats())
        some = [i for i in items if i.split == "val"]
        assert_identical(table_stats(IndexItems.of(some), spill.record_table()), open_store(whole).stats(some))
        folder = spill._dir
    assert not folder.exists()  # the spill's files go with it


def test_an_empty_spill_writes_the_empty_table(tmp_path: Path) -> None:
    items, _ = synthetic_items(20, seed=2)
    write_statistics(Folder(tmp_path / "a.zarr"), {})
    with StatsSpill(tmp_path) as spill:
        write_spilled(Folder(tmp_path / "b.zarr"), spill, [])
        assert table_stats(IndexItems.of(items), spill.record_table()).missing == len(items)
    assert _files(tmp_path / "a.zarr" / STATISTICS) == _files(tmp_path / "b.zarr" / STATISTICS)


def test_a_key_never_spilled_is_an_error(tmp_path: Path) -> None:
    _, records = synthetic_items(10, seed=4)
    with _spilled(tmp_path, records) as spill, pytest.raises(KeyError, match="no statistics spilled"):
        spill.table_columns(["volumes/not-there"])


def _pieces(values: np.ndarray, step: int) -> Chunked:
    return Chunked(values.dtype, len(values), lambda: (values[i:i + step] for i in range(0, len(values), step)))


def test_a_table_is_written_a_chunk_at_a_time_from_arrays_or_pieces(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks smaller than a column: the columns read back equal, each integer column in its narrowed type, and
    a column given in pieces writes the very files the same column given whole does."""
    monkeypatch.setattr(table_module, "_CHUNK", 1000)
    rng = np.random.default_rng(0)
    columns = {"small": rng.integers(-100, 100, 3001), "wide": rng.integers(-2**40, 2**40, 777),
               "floats": rng.normal(size=1234), "bytes": rng.integers(0, 255, 55).astype(np.uint8),
               "empty": np.zeros(0, dtype=np.int64)}
    whole = Folder(tmp_path / "whole")
    name = write_table(whole, columns, rows=7, attrs={"what": "test"})
    pieces = Folder(tmp_path / "pieces")
    assert write_table(pieces, {k: _pieces(v, 100) for k, v in columns.items()}, rows=7, attrs={"what": "test"}) == name
    assert _files(tmp_path / "pieces") == _files(tmp_path / "whole")
    chunks = {f: b for f, b in _files(tmp_path / "whole").items() if "/c/" in f}
    assert len(chunks) > 10  # many chunk files, the last an edge chunk
    # each chunk file as zarr-python writes the same bytes in one call
    packed = zarr.open_array(str(tmp_path / "whole" / name), mode="r")[:]
    ref = nodes.create_array(Folder(tmp_path / "zarr" / name), shape=packed.shape, dtype=np.dtype(np.uint8),
                             chunks=(1000,), shards=None, codecs=zarr_codecs("zstd", level=3, checksum=True),
                             dimension_names=None, attributes={}, config={"write_empty_chunks": True})
    ref[:] = packed
    assert {f: b for f, b in _files(tmp_path / "zarr").items() if "/c/" in f} == chunks
    attrs, back = read_table(open_transport(str(tmp_path / "whole"), None), name)
    assert attrs["what"] == "test" and attrs["rows"] == 7
    for key, values in columns.items():
        assert np.array_equal(back[key], values)
    assert (back["small"].dtype, back["wide"].dtype, back["empty"].dtype) == (np.int8, np.int64, np.int64)


def test_a_statistics_table_of_many_chunks_is_read_a_slice_at_a_time(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The histogram bins are `TableSlices` over the stored chunks (two kept decoded), never read whole: the
    records and the merge equal those of the records written, across chunk boundaries."""
    monkeypatch.setattr(table_module, "_CHUNK", 4096)
    items, records = synthetic_items(300, seed=13)
    store = tmp_path / "chunked.zarr"
    write_statistics(Folder(store), records)
    write_index(Folder(store), StoreIndex(delivery="c", spec_sha256="", manifest_sha256="", tool_version="t",
                                          items=items))
    table = read_statistics_table(store)
    assert table is not None
    hist = table.stats.histograms
    assert hist is not None and isinstance(hist[1], TableSlices) and isinstance(hist[2], TableSlices)
    assert len([p for p in (store / STATISTICS).rglob("*") if p.is_file() and "/c/" in str(p)]) > 20
    assert read_statistics(store) == records
    assert_identical(open_store(store).stats(), dataset_stats(items, records))


def test_the_keys_column_from_bytes_is_the_encoded_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Distinct keys (one beyond ASCII): their column is made from the spill's bytes and equals `encode_strings`';
    keys whose digests all collide are settled by `encode_strings` itself."""
    from labzarr.store.format.table import encode_strings

    _, records = synthetic_items(50, seed=6, prefix="é")
    with _spilled(tmp_path, records, again=False) as spill:
        made = spill._keys_column()
        expected = encode_strings("key", spill._key_list())
        assert np.array_equal(made.codes, expected["key.codes"]) and np.array_equal(made.chars, expected["key.chars"])
        assert np.array_equal(made.ends, expected["key.ends"])
        assert made.strings() == list(spill._key_list()) and made.distinct == list(spill._key_list())
        monkeypatch.setattr(stats_spill.hashlib, "blake2b", lambda data, digest_size: _Same())
        assert not stats_spill._distinct(spill._keys, np.frombuffer(spill._key_ends, dtype=np.int64))
        assert spill._keys_column().strings() == made.strings()


class _Same:
    def digest(self) -> bytes:
        return bytes(16)


def test_stats_columns_in_typed_arrays_are_the_columns_of_python_lists() -> None:
    """`StatsColumns` holds its numbers in typed arrays: each column equals numpy's conversion of the plain lists of
    the same values, in dtype and to the bit (NaN, infinities and a bool among them)."""
    from labzarr.store.format.stats_table import StatsColumns

    _, records = synthetic_items(200, seed=8)
    odd = ChannelStats(count=3, mean=float("nan"), m2=float("inf"), min=-float("inf"), max=2.0**60, integral=True)
    stats = [*records.values(), ItemStats(channels=(odd,)), None]
    columns = StatsColumns("s", histograms=False)
    plain: dict[str, list[object]] = {k: [] for k in ("has", "rows", "kind", "cls", "integral", "count", "nan", "inf",
                                                      "mean", "m2", "min", "max")}
    for item in stats:
        columns.add(item)
        plain["has"].append(item is not None)
        for kind, cls, c in ([] if item is None else [(0, 0, c) for c in item.channels] +
                             [(1, k, c) for k, cs in sorted(item.classes.items()) for c in cs]):
            for name, value in (("kind", kind), ("cls", cls), ("integral", c.integral), ("count", c.count),
                                ("nan", c.nan), ("inf", c.inf), ("mean", c.mean), ("m2", c.m2), ("min", c.min),
                                ("max", c.max)):
                plain[name].append(value)
        plain["rows"].append(len(plain["count"]))
    made = columns.columns()
    dtypes = {"has": np.uint8, "kind": np.uint8, "integral": np.uint8, "mean": np.float64, "m2": np.float64,
              "min": np.float64, "max": np.float64}
    for name, values in plain.items():
        expected = np.asarray(values, dtype=dtypes.get(name, np.int64))
        assert made[f"s.{name}"].dtype == expected.dtype and made[f"s.{name}"].tobytes() == expected.tobytes(), name


def test_fixed_width_keys_made_in_several_steps_are_numpys_bytes() -> None:
    """Keys wide enough that `_fixed_width` places them in several steps (and a None, a repeat, one beyond ASCII):
    numpy's own fixed-width bytes of the same values."""
    from labzarr.store.format.stats_table import _fixed_width
    from labzarr.store.format.table import Strings, encode_strings

    rng = random.Random(3)
    values = [None if i == 7 else ("é" if i == 9 else "k") * rng.randrange(0, 300) + str(i % 1500)
              for i in range(2000)]
    made = _fixed_width(Strings(encode_strings("key", values), "key"))
    width = max(len(v.encode()) for v in values if v is not None)
    expected = np.array([b"" if v is None else v.encode() for v in values], dtype=f"S{width}")
    assert made.dtype == expected.dtype and made.tobytes() == expected.tobytes()
