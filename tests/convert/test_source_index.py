"""The earlier manifest's compact index by source against the plain dict it replaces: the same index for every
source (first row's kept), the same keys and length, and rows numbered alike by `Numbering`."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from labzarr.convert import source_index
from labzarr.convert.manifest import EarlierIndex, Numbering, Row, earlier_index, manifest_bytes
from labzarr.convert.source_index import SourceIndex


def _sources(seed: int, n: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    names = [f"{rng.choice(['a', 'é', 'z', '中'])}/{rng.randrange(n // 2)}.nii" for _ in range(n)]
    names += ["", "bad\udcff.jpg", "x" * 300]  # empty, an undecodable name's surrogate, a long one
    rng.shuffle(names)
    return [(s, rng.randrange(-3, 4 * n)) for s in names]


def _reference(pairs: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s, i in pairs:
        out.setdefault(s, i)
    return out


@pytest.mark.parametrize("collide", [False, True], ids=["digests", "every-digest-equal"])
def test_a_source_index_is_the_dict_it_replaces(monkeypatch: pytest.MonkeyPatch, collide: bool) -> None:
    if collide:  # every lookup then rests on comparing the sources' bytes
        monkeypatch.setattr(source_index, "_digest", lambda raw: 7)
    pairs = _sources(3, 400)
    index = SourceIndex()
    for s, i in pairs:
        index.add(s, i)
    expected = _reference(pairs)
    assert dict(index) == expected and list(index) == list(expected) and len(index) == len(expected)
    for s in [*expected, "missing", "a/1.ni", ""]:
        assert index.get(s) == expected.get(s) and (s in index) == (s in expected)
    with pytest.raises(KeyError):
        index["missing"]
    assert [index[s] for s, _ in pairs] == [expected[s] for s, _ in pairs]  # in the order added
    assert index.values_max() == max(i for _, i in pairs)
    index.add("late", 5)  # an addition after lookups is found too
    assert index["late"] == 5 and SourceIndex().values_max() == -1 and len(SourceIndex()) == 0


def _number(rows: list[Row], by_source: dict[str, int], nxt: int) -> tuple[list[int], int]:
    """The numbering as it was: a set of taken indexes over a dict."""
    taken: set[int] = set()
    out = []
    for row in rows:
        index = by_source.get(row.source)
        if index is None or index in taken:
            index, nxt = nxt, nxt + 1
        else:
            taken.add(index)
        out.append(index)
    return out, nxt


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_are_numbered_alike_over_the_compact_index(seed: int) -> None:
    pairs = _sources(seed, 300)
    compact = SourceIndex()
    for s, i in pairs:
        compact.add(s, i)
    plain = _reference(pairs)
    nxt = max(plain.values()) + 1 - 50 * seed  # with seed > 0, some earlier indexes lie at or past `next`
    rng = random.Random(seed)
    rows = [Row(item_id="i", status="ok", source=rng.choice([s for s, _ in pairs] + ["new/1", "new/2"]))
            for _ in range(500)]
    # And in the order added, as a rerun asks (repeated sources among them): the lookup after the last found.
    rows += [Row(item_id="i", status="ok", source=s) for s, _ in pairs]
    numbering = Numbering(EarlierIndex(compact, nxt))
    assert ([numbering.number(r) for r in rows], numbering.next) == _number(rows, plain, nxt)


def test_the_earlier_index_read_from_a_manifest(tmp_path: Path) -> None:
    rows = [Row(item_id=f"i{k}", status="ok", source=s) for k, s in enumerate(["b/1", "a/2", "b/1", "é/3"])]
    manifest = tmp_path / "manifest.csv"
    manifest.write_bytes(manifest_bytes(rows, [], index=[4, 9, 2, 0]))
    earlier = earlier_index(manifest, tmp_path / "summary.json")
    assert isinstance(earlier.by_source, SourceIndex)
    assert dict(earlier.by_source) == {"b/1": 4, "a/2": 9, "é/3": 0} and earlier.next == 10
