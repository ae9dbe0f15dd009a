"""The bad-input corpus, converted as one delivery mixed with good items: nothing crashes, nothing is lost.

Every bad input (NIfTI, DICOM, JPEG/PNG/TIFF, generic, paths, bombs) gets its exact expected outcome, every
good item is present and equal to its source (DICOM: to what dcm2niix writes), and ok + rejected + ignored
accounts for every file under raw. Unusable label workbooks stop the run before any conversion.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from labzarr.convert import RunResult, UsageError, convert_delivery, read_manifest
from labzarr.convert.demo import NIBABEL_DATA, write_spec
from labzarr.convert.qc.verify import verify_store
from labzarr.loaders import open_store
from labzarr.readers import Reason

from ..corpus import CORPUS, GOOD, WORKBOOK


@dataclass(frozen=True)
class Placed:
    source: str
    slot: str
    expected: Reason | str


@dataclass(frozen=True)
class CorpusRun:
    raw: Path
    store: Path
    result: RunResult
    placed: dict[str, Placed]
    goods: list[tuple[str, object]]
    rows: dict[str, dict[str, str]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> CorpusRun:
    root = tmp_path_factory.mktemp("corpus")
    raw = root / "raw"
    raw.mkdir()
    placed = {}
    for n, param in enumerate(CORPUS, start=1):
        build, expected = param.values
        slot = f"bad_{n:03d}"
        placed[param.id] = Placed(build(raw, slot, 1000 + n), slot, expected)
    goods = [(build(raw), expected) for build, expected in GOOD]
    spec = write_spec(root / "m" / "delivery.toml", raw=raw, store=root / "s.zarr", name="corpus",
                      labels=False)
    result = convert_delivery(spec, scheduler=scheduler)
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    return CorpusRun(raw=raw, store=root / "s.zarr", result=result, placed=placed, goods=goods, rows=rows)


def test_corpus_has_distinct_entries() -> None:
    ids = [p.id for p in [*CORPUS, *WORKBOOK]]
    assert len(ids) == len(set(ids)) >= 60


@pytest.mark.parametrize("entry", [p.id for p in CORPUS])
def test_bad_input_gets_its_exact_outcome(corpus: CorpusRun, entry: str) -> None:
    placed = corpus.placed[entry]
    row = corpus.rows[placed.source]
    if placed.expected == "ignored":
        assert (row["status"], row["reason"]) == ("ignored", "")
    else:
        assert (row["status"], row["reason"]) == ("rejected", placed.expected.value), row["detail"]
        assert row["detail"]
    # Files an entry writes beside its bad input (the original of a copy, the other half of a loop)
    # are either fine or fail the same way.
    for source, other in corpus.rows.items():
        if source.startswith(placed.slot + "/") and source != placed.source:
            assert (other["status"], other["reason"]) in {("ok", ""), (row["status"], row["reason"])}, source


def test_every_good_item_is_present_and_equal_to_its_source(corpus: CorpusRun) -> None:
    view = open_store(corpus.store)
    by_source = {item.source: item for item in view.items}
    for source, expected in corpus.goods:
        assert corpus.rows[source]["status"] == "ok", corpus.rows[source]["detail"]
        want = expected(corpus.raw, source)
        item = by_source[source]
        got = view.array(item)[...] if item.slot is None else view.array(item)[item.slot]
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=source)


def test_every_file_is_accounted_for_and_nothing_crashed(corpus: CorpusRun) -> None:
    on_disk = 0
    for _, dirs, files in os.walk(corpus.raw):
        on_disk += len(files) + sum(1 for d in dirs if os.path.islink(os.path.join(_, d)))
    rows = list(corpus.rows.values())
    counts = corpus.result.summary["counts"]
    assert counts["ok"] + counts["rejected"] + counts["ignored"] == len(rows)
    assert sum(int(r["n_files"]) for r in rows) == on_disk
    assert not [r for r in rows if r["reason"] in (Reason.DECODER_CRASH, Reason.TIMEOUT)]
    assert verify_store(corpus.store).ok


@pytest.mark.parametrize(("build", "extra", "match"), WORKBOOK)
def test_unusable_workbook_stops_the_run_before_any_conversion(tmp_path: Path, build, extra: str,
                                                                 match: str) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "case_001.nii").write_bytes((NIBABEL_DATA / "anatomical.nii").read_bytes())
    rel = build(raw)
    labels = f'\n[labels]\nworkbook = "{rel}"\nsheet = 3\nid_column = "A"\ncolumns = {{ cell_type = "F" }}\n{extra}'
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr", labels=False, extra=labels)
    with pytest.raises(UsageError, match=match):
        convert_delivery(spec, workers=1)
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "m" / "manifest.csv").exists()
