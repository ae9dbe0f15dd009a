"""Rows on disk (run/row_spill.py) and the manifest a row at a time (manifest_file.py) against the in-memory steps
they replace: the same order, the same duplicates, the same bytes."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from labzarr.convert.manifest import (
    ClassCount,
    EarlierIndex,
    RoleSource,
    Row,
    manifest_bytes,
    number_rows,
    sort_rows,
)
from labzarr.convert.manifest_file import ManifestFile
from labzarr.convert.plan.splits import duplicate_key
from labzarr.convert.run.row_spill import RowFile, RowSpill
from labzarr.readers import Reason
from labzarr.store.format.stats import ChannelStats, ItemStats

# IDs and names that sort differently as str and as naive bytes would (non-ASCII, a prefix, an undecodable name).
_NAMES = ["a", "ab", "a b", "B", "é", "z", "Ω", "case_\udcff", "日本", "a\u00e9", "ae\u0301"]


def _rows(seed: int, n: int) -> list[Row]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        item = rng.choice(_NAMES)
        source = f"{rng.choice(_NAMES)}/{rng.randrange(6)}.nii"  # repeats: rows equal in item and source
        sha = hashlib.sha256(str(rng.randrange(n // 3 + 1)).encode()).hexdigest()  # repeats: duplicates
        status = rng.choice(["ok", "ok", "rejected", "ignored"])
        out.append(Row(item_id=item, status=status, source=source, sha256=sha, detail=f"row {i}",
                       slot=rng.choice([None, i]), array=f"volumes/{i}",
                       reason=Reason.TRUNCATED if status == "rejected" else None))
    return out


def _first_duplicates(rows: list[Row], splits: bool) -> dict[int, int]:
    """The straightforward rule: by source (ties in the order given), the first ok row with a key keeps it."""
    first: dict[tuple[str, str], int] = {}
    out = {}
    for i in sorted(range(len(rows)), key=lambda i: rows[i].source):
        row = rows[i]
        if row.status == "ok":
            key = (row.item_id if splits else "", row.sha256)
            if key in first:
                out[i] = first[key]
            else:
                first[key] = i
    return out


@pytest.mark.parametrize("seed", range(4))
def test_manifest_order_is_sort_rows_order(tmp_path: Path, seed: int) -> None:
    rows = _rows(seed, 300)
    with RowSpill(tmp_path, splits=None) as spilled:
        for row in rows:
            spilled.add(row)
        assert [spilled.row(int(i)) for i in spilled.manifest_order()] == sort_rows(rows)


@pytest.mark.parametrize("splits", [False, True])
def test_duplicates_are_the_first_by_source(tmp_path: Path, splits: bool) -> None:
    from labzarr.convert.spec import SplitsSpec

    rows = _rows(7, 400)
    spec = SplitsSpec() if splits else None
    assert duplicate_key(spec, "x", "y") == ("x" if splits else "", "y")
    with RowSpill(tmp_path, splits=spec) as spilled:
        for row in rows:
            spilled.add(row)
        found = spilled.duplicates()
    expected = _first_duplicates(rows, splits)
    assert found == expected and expected  # the rows repeat contents: there are duplicates to find


def test_rows_not_compared_are_never_duplicates(tmp_path: Path) -> None:
    row = Row(item_id="a", status="ok", source="a.nii", sha256="0" * 64)
    with RowSpill(tmp_path, splits=None) as spilled:
        spilled.add(row)
        spilled.add(Row(item_id="b", status="ok", source="b.nii", sha256="0" * 64), compared=False)
        assert spilled.duplicates() == {}
        spilled.add(Row(item_id="c", status="ok", source="c.nii", sha256="0" * 64))
        assert spilled.duplicates() == {2: 0}


def test_a_row_file_gives_back_every_field(tmp_path: Path) -> None:
    stats = ItemStats(channels=(ChannelStats(count=4, mean=1.5, m2=5.0, min=0.0, max=3.0, integral=True),))
    full = Row(item_id="s1", status="ok", source="s1/img.nii", shape=(1, 2, 3), spacing=(0.5, 1.0, 2.0),
               labels=(("grade", "2"),), roles=(RoleSource("image", "s1/img.nii", "f" * 64, "volumes/s1/image"),),
               classes=(ClassCount(1, 10, 0, 3),), metadata=(("EchoTime", 2.5), ("ImageType", ["A", "B"])),
               stats=stats, warnings=("w",), members=("a", "b"), fold=2, split="train")
    rows = RowFile(tmp_path)
    rows.append(full)
    rows.append(Row(item_id="", status="ignored", source="notes.txt"))
    assert len(rows) == 2 and rows[0] == full and rows[-1].source == "notes.txt" and list(rows)[0] == full
    assert rows[0:2] == [full, rows[1]]
    with pytest.raises(IndexError):
        rows[2]


@pytest.mark.parametrize("earlier", [EarlierIndex(), EarlierIndex({"ab/1.nii": 7, "z/2.nii": 3, "é/0.nii": 3}, 20)])
def test_the_manifest_written_a_row_at_a_time_is_manifest_bytes(tmp_path: Path, earlier: EarlierIndex) -> None:
    from labzarr.convert.manifest import Numbering

    rows = sort_rows([r for r in _rows(3, 500) if "\udcff" not in r.item_id + r.source])  # CSV is UTF-8 text
    index, nxt = number_rows(rows, earlier)
    expected = manifest_bytes(rows, ["grade"], ["image", "mask"], ["split_group", "split"], ["EchoTime"],
                              index=index)
    path = tmp_path / "m" / "manifest.csv"
    numbering = Numbering(earlier)
    with ManifestFile(path, ["grade"], ["image", "mask"], ["split_group", "split"], ["EchoTime"]) as out:
        for row in rows:
            out.write(numbering.number(row), row)
        assert out.sha256 == hashlib.sha256(expected).hexdigest()
        out.commit()
    assert path.read_bytes() == expected and numbering.next == nxt
    assert [p.name for p in path.parent.iterdir()] == ["manifest.csv"]  # no temporary file left


def test_a_manifest_left_unfinished_leaves_the_earlier_one(tmp_path: Path) -> None:
    path = tmp_path / "manifest.csv"
    path.write_bytes(b"earlier\n")
    with pytest.raises(RuntimeError), ManifestFile(path, []) as out:
        out.write(0, Row(item_id="a", status="ok", source="a.nii"))
        raise RuntimeError("killed")
    assert path.read_bytes() == b"earlier\n" and [p.name for p in tmp_path.iterdir()] == ["manifest.csv"]


def _column_by_rows(keys: list[bytes]) -> np.ndarray:
    """The keys column as it was made: a row at a time."""
    width = max(1, max((len(k) for k in keys), default=0))
    out = np.zeros(len(keys), dtype=f"S{width}")
    for i, key in enumerate(keys):
        out[i] = key
    return out


@pytest.mark.parametrize("block", [1 << 22, 7, 1], ids=["one-block", "blocks", "a-row-a-block"])
def test_the_keys_column_is_the_column_made_a_row_at_a_time(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    from array import array

    from labzarr.store.format import table

    monkeypatch.setattr(table, "_BLOCK_BYTES", block)
    rng = random.Random(5)
    keys = [rng.choice(_NAMES).encode("utf-8", "surrogatepass") * rng.randrange(0, 4) for _ in range(500)]
    keys += [b"", b"x" * 40, b""]  # empty keys, and one longer than a small block
    buffer, ends = bytearray(), array("q")
    for key in keys:
        buffer += key
        ends.append(len(buffer))
    made = table.fixed_width(buffer, ends)
    expected = _column_by_rows(keys)
    assert made.dtype == expected.dtype and made.tobytes() == expected.tobytes()
    assert table.fixed_width(bytearray(), array("q")).shape == (0,)
    assert table.fixed_width(bytearray(), array("q", [0, 0])).tolist() == [b"", b""]
    assert table.fixed_width(buffer, ends, spare=2)[-3:].tolist() == [b"", b"", b""]  # the last key, then spares


def test_the_sources_column_is_made_once_and_again_after_more_rows(tmp_path: Path) -> None:
    rows = _rows(2, 50)
    with RowSpill(tmp_path, splits=None) as spilled:
        for row in rows[:40]:
            spilled.add(row)
        spilled.duplicates()
        made = spilled._sources_column()
        assert spilled._sources_column() is made  # duplicates and manifest_order share it
        for row in rows[40:]:
            spilled.add(row)
        assert [spilled.row(int(i)) for i in spilled.manifest_order()] == sort_rows(rows)
        assert spilled.duplicates() == _first_duplicates(rows, False)
