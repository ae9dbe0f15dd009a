"""[splits]: patient-level, stratified, stable train/val/test and folds in the manifest, and the leakage audit,
on the cohort delivery of tests/cohort.py."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import nibabel as nib
import numpy as np
import openpyxl
import pytest

from labzarr.convert import UsageError, convert_delivery
from labzarr.convert.console import summary_table
from labzarr.convert.qc.report import write_report
from labzarr.convert.spec import load_spec

from ..cohort import DIAGNOSES, FRACTIONS, N_PATIENTS, project, timepoints, volume, write_raw


def _manifest(spec: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((spec.parent / "manifest.csv").read_text())))


def _summary(spec: Path) -> dict:
    return json.loads((spec.parent / "summary.json").read_text())


def _split_column(spec: Path) -> list[tuple[str, str, str, str]]:
    return [(r["item_id"], r["split_group"], r["split"], r.get("fold", "")) for r in _manifest(spec)]


@pytest.fixture(scope="module")
def cohort(converted_cohort: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's converted cohort project (this module reruns conversions in it)."""
    root = tmp_path_factory.mktemp("cohort") / "project"
    shutil.copytree(converted_cohort.parents[2], root)
    return root / "manifests" / "cohort" / "delivery.toml"


def test_groups_never_span_splits_and_strata_are_within_one_group_of_the_target(cohort: Path) -> None:
    rows = [r for r in _manifest(cohort) if r["status"] == "ok"]
    assert len(rows) == sum(timepoints(p) for p in range(1, N_PATIENTS + 1)) + 2
    splits_of: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        assert r["split_group"] == r["item_id"][:4]  # the id_pattern's `patient`, normalised as IDs are
        splits_of[r["split_group"]].add(r["split"])
    assert all(len(s) == 1 for s in splits_of.values()), splits_of
    stratum = {g: DIAGNOSES[int(g[1:]) % 3] if int(g[1:]) < 900 else "healthy" for g in splits_of}
    for diagnosis in set(stratum.values()):
        groups = [g for g in splits_of if stratum[g] == diagnosis]
        counts = Counter(next(iter(splits_of[g])) for g in groups)
        for split, fraction in (("train", 0.5), ("val", 0.25), ("test", 0.25)):
            assert abs(counts[split] - fraction * len(groups)) < 1, (diagnosis, counts)
    summary = _summary(cohort)["splits"]
    assert summary["sizes"]["train"]["items"] == sum(r["split"] == "train" for r in rows)
    assert summary["strata"]["tumour"] == dict(Counter(next(iter(splits_of[g])) for g in splits_of
                                                        if stratum[g] == "tumour"))
    assert summary["leakage"] == []


def test_the_index_carries_split_and_group(cohort: Path) -> None:
    from labzarr import open_store

    items = open_store(cohort.parents[2] / "data" / "stores" / "cohort.zarr").items
    by_id = {r["item_id"]: r for r in _manifest(cohort)}
    assert items and all((i.split, i.group) == (by_id[i.item_id]["split"], by_id[i.item_id]["split_group"])
                         for i in items)


def test_split_column_is_byte_identical_across_reruns_and_worker_counts(cohort: Path, tmp_path: Path) -> None:
    first = (cohort.parent / "manifest.csv").read_bytes()
    convert_delivery(cohort, workers=1)
    assert (cohort.parent / "manifest.csv").read_bytes() == first
    # A fresh project (no earlier manifest, a new store) on one worker assigns exactly the same.
    other = tmp_path / "copy"
    shutil.copytree(cohort.parents[2] / "data" / "raw", other / "data" / "raw")
    spec = other / "manifests" / "cohort" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    shutil.copy(cohort, spec)
    convert_delivery(spec, workers=1)
    assert _split_column(spec) == _split_column(cohort)


def test_appending_items_moves_no_existing_assignment(tmp_path: Path, scheduler: str) -> None:
    spec = project(tmp_path, patients=range(1, 17))
    convert_delivery(spec, scheduler=scheduler)
    before = {r["item_id"]: r["split"] for r in _manifest(spec) if r["status"] == "ok"}
    raw = tmp_path / "data" / "raw" / "cohort"
    # 12 more items: new timepoints of a known patient (P003 gets t3..t5) and new patients.
    shutil.rmtree(raw)
    write_raw(raw, range(1, 21))
    for t in (2, 3, 4):
        volume(raw / "P003" / f"P003_t{t + 1}.nii.gz", seed=5000 + t)
    convert_delivery(spec, scheduler=scheduler)
    after = {r["item_id"]: (r["split"], r["split_group"]) for r in _manifest(spec) if r["status"] == "ok"}
    assert len(after) - len(before) >= 10
    assert {i: after[i][0] for i in before} == before
    for item, (split, group) in after.items():
        if item not in before and group in {after[b][1] for b in before}:  # a new timepoint of a known patient
            assert split == next(before[b] for b in before if after[b][1] == group), item


def test_folds_partition_the_groups_and_hold_test_out(tmp_path: Path, scheduler: str) -> None:
    spec = project(tmp_path, splits='folds = 4\ntest = 0.25\ngroup = "patient"\nseed = 1\n')
    convert_delivery(spec, scheduler=scheduler)
    rows = [r for r in _manifest(spec) if r["status"] == "ok"]
    folds_of: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for r in rows:
        folds_of[r["split_group"]].add((r["split"], r["fold"]))
        assert (r["split"] == "test") == (r["fold"] == "")
    assert all(len(f) == 1 for f in folds_of.values())
    counts = Counter(next(iter(f)) for f in folds_of.values())
    groups = len(folds_of)
    assert abs(counts[("test", "")] - 0.25 * groups) < 1
    assert all(abs(counts[("train", str(k))] - 0.75 * groups / 4) < 1 for k in range(4)), counts


def _pinned_project(root: Path, leakage: str) -> Path:
    pins = {"P008_t1": "train", "P008_t2": "train", "P008_t3": "val", "P004_t1": "train", "P005_t1": "val"}
    spec = project(root, splits=FRACTIONS + f'pinned = "Split"\nleakage = "{leakage}"\n', pins=pins)
    raw = root / "data" / "raw" / "cohort"
    # A planted duplicate: P005's scan delivered again, uncompressed, as P004's: the same voxels in two splits.
    img = nib.load(raw / "P005" / "P005_t1.nii.gz")
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj), img.affine, img.header), raw / "P004" / "P004_t1.nii")
    (raw / "P004" / "P004_t1.nii.gz").unlink()
    return spec


def test_the_audit_flags_a_duplicate_and_a_group_split_by_hand_and_rejects_the_copies(tmp_path: Path,
                                                                                      scheduler: str) -> None:
    spec = _pinned_project(tmp_path, "reject")
    result = convert_delivery(spec, scheduler=scheduler)
    rows = {r["item_id"]: r for r in _manifest(spec)}
    leaks = {(lk["kind"], lk["key"]): lk for lk in _summary(spec)["splits"]["leakage"]}
    group = leaks[("group_in_several_splits", "p008")]
    assert {(i["item_id"], i["where"]) for i in group["items"]} == {("p008t1", "train"), ("p008t2", "train"),
                                                                      ("p008t3", "val")}
    assert group["rejected"] == ["P008/P008_t3.nii.gz"]
    assert (rows["p008t3"]["status"], rows["p008t3"]["reason"]) == ("rejected", "split_leakage")
    assert "pinned to train by most of its items" in rows["p008t3"]["detail"]
    (content,) = [lk for (kind, _), lk in leaks.items() if kind == "content_in_several_splits"]
    assert {(i["item_id"], i["where"]) for i in content["items"]} == {("p004t1", "train"), ("p005t1", "val")}
    assert content["rejected"] == ["P005/P005_t1.nii.gz"]
    assert rows["p005t1"]["reason"] == "split_leakage" and "as p004t1 (P004/P004_t1.nii) in train" in \
        rows["p005t1"]["detail"]
    assert rows["p004t1"]["status"] == "ok" and rows["p004t1"]["split"] == "train"
    assert result.summary["reasons"]["split_leakage"] == 2
    from labzarr import open_store

    assert {"p008t3", "p005t1"}.isdisjoint(i.item_id for i in open_store(tmp_path / "data/stores/cohort.zarr").items)


def test_with_warn_the_leaks_are_flagged_and_kept(tmp_path: Path, scheduler: str) -> None:
    spec = _pinned_project(tmp_path, "warn")
    result = convert_delivery(spec, scheduler=scheduler)
    table = summary_table(result.summary, result.run_log)
    assert "warning: [splits] group 'p008' is pinned to several splits: p008t1 in train, p008t2 in train, " \
           "p008t3 in val" in table
    assert "is in several splits: p004t1 in train, p005t1 in val" in table
    page = write_report(spec).index.read_text()
    assert page.count("<li><strong>") >= 2 and "one content in several splits" in page and "p008t3" in page
    rows = {r["item_id"]: r for r in _manifest(spec)}
    assert (rows["p008t3"]["status"], rows["p008t3"]["split"]) == ("ok", "val")
    assert (rows["p005t1"]["status"], rows["p005t1"]["split"]) == ("ok", "val")
    kinds = sorted(lk["kind"] for lk in _summary(spec)["splits"]["leakage"])
    assert kinds == ["content_in_several_splits", "group_in_several_splits"]
    assert all(lk["rejected"] == [] for lk in _summary(spec)["splits"]["leakage"])


def test_a_group_disagreeing_on_the_stratum_is_reported(tmp_path: Path, scheduler: str) -> None:
    spec = project(tmp_path, extra_rows=[])
    wb = openpyxl.load_workbook(tmp_path / "data/raw/cohort/labels.xlsx")
    ws = wb.active
    for row in ws.iter_rows(min_row=2):
        if row[0].value == "P002_t2":
            row[1].value = "tumour"  # P002's other timepoints are healthy
    wb.save(tmp_path / "data/raw/cohort/labels.xlsx")
    convert_delivery(spec, scheduler=scheduler)
    (leak,) = _summary(spec)["splits"]["leakage"]
    assert leak["kind"] == "stratum_disagrees" and leak["key"] == "p002" and leak["rejected"] == []
    assert {(i["item_id"], i["where"]) for i in leak["items"]} == {("p002t1", "healthy"), ("p002t2", "tumour"),
                                                                     ("p002t3", "healthy")}


@pytest.mark.parametrize(("splits", "needle"), [
    ('train = 0.8\nval = 0.1\n', "[splits] train + val = 0.9: the fractions must sum to 1"),
    ('folds = 5\nval = 0.2\n', "[splits] val = 0.2: with folds, every fold is in turn the validation set"),
    ('train = 1\ngroup = "patiant"\n', "[splits] group = 'patiant': neither a named group of [items] id_pattern "
                                       "(its groups: patient)"),
    ('train = 1\nstratify = "diagnosys"\n', "[splits] stratify = 'diagnosys': not a [labels] column"),
    ('train = 1\nsede = 3\n', "[splits] unknown key 'sede'"),
    ('group = "patient"\n', "[splits] has neither fractions nor folds"),
])
def test_a_wrong_splits_section_is_one_usage_error(tmp_path: Path, splits: str, needle: str) -> None:
    spec = project(tmp_path, splits=splits, patients=range(1, 2))
    with pytest.raises(UsageError) as err:
        load_spec(spec)
    assert needle in str(err.value)
    if "sede" in needle:
        assert "did you mean 'seed'?" in err.value.hint


def test_diff_shows_every_reassignment(cohort: Path) -> None:
    from labzarr.convert.manifest import read_manifest
    from labzarr.convert.qc.diff import diff_manifests

    new = read_manifest(cohort.parent / "manifest.csv")
    moved = [r for r in new if r["split"] == "train"][:2]
    old = [dict(r, split="test") if r in moved else r for r in new]
    report = diff_manifests(old, new).describe()
    assert "split changed (2)" in report
    for r in moved:
        assert f"~ {r['source']} [{r['item_id']}]: test -> train" in report


def test_check_shows_each_items_split_and_the_audit_before_converting(tmp_path: Path, cohort: Path) -> None:
    from labzarr.convert.check import check_delivery

    spec = _pinned_project(tmp_path, "reject")
    text = check_delivery(spec).describe(limit=0)
    assert "splits: train " in text and "warning: [splits] group 'p008' is pinned to several splits" in text
    assert "rejected split_leakage: P008/P008_t3.nii.gz" in text
    assert "P008/P008_t1.nii.gz -> volumes/" in text and "[train]" in text
    # On a converted project, check's assignment is the run's.
    report = check_delivery(cohort)
    by_id = {r["item_id"]: r["split"] for r in _manifest(cohort)}
    assert {p.row.item_id: p.row.split for p in report.planned if p.row.status == "ok"} == \
        {i: s for i, s in by_id.items() if s}


_PINS = {"P004_t1": "test", "P005_t2": "val", "P006_t1": "train"}


@pytest.mark.parametrize("pinned", ['"Split"', '"C"', '{ header = "split" }'])
def test_a_pin_column_is_read_on_its_own_and_a_blank_pin_pins_nothing(tmp_path: Path, scheduler: str,
                                                                       pinned: str) -> None:
    # Labels required: an item without a pin is still labelled (its diagnosis), never no_label for the blank pin.
    spec = project(tmp_path, splits=FRACTIONS + f"pinned = {pinned}\n", patients=range(1, 9), pins=_PINS,
                   required=True)
    convert_delivery(spec, scheduler=scheduler)
    rows = _manifest(spec)
    assert {r["status"] for r in rows if r["kind"]} == {"ok"}, [r["detail"] for r in rows if r["status"] != "ok"]
    assert not [r["warnings"] for r in rows if r["warnings"]]
    assert "label.pin" not in rows[0] and "label.split" not in rows[0]
    split_of = {r["split_group"]: r["split"] for r in rows if r["status"] == "ok"}
    assert (split_of["p004"], split_of["p005"], split_of["p006"]) == ("test", "val", "train")  # the whole patient
    assert list(_summary(spec)["label_workbook"]["columns"]) == ["diagnosis"]


def test_a_pin_column_that_names_a_label_column_reads_that_column(tmp_path: Path) -> None:
    spec = project(tmp_path, splits=FRACTIONS + 'pinned = "pin"\n', patients=range(1, 2))
    spec.write_text(spec.read_text().replace('diagnosis = "B"', 'diagnosis = "B", pin = "C"'))
    from labzarr.readers import ColumnRef

    splits = load_spec(spec).splits
    assert splits is not None and (splits.pinned, splits.pinned_column) == ("pin", ColumnRef(letter="C"))


def _without_labels(text: str) -> str:
    head, rest = text.split("[labels]\n")
    return head + "[splits]\n" + rest.split("[splits]\n")[1].replace('stratify = "diagnosis"\n', "")


@pytest.mark.parametrize(("change", "needle"), [
    pytest.param(lambda text: text + 'pinned = "Fold"\n', "[splits] pinned: labels.xlsx: no row of sheet",
                 id="header-absent"),
    pytest.param(lambda text: _without_labels(text) + 'pinned = "C"\n',
                 "[splits] pinned = 'C': needs a [labels] workbook", id="no-labels"),
])
def test_a_wrong_pin_column_is_one_usage_error(tmp_path: Path, change: object, needle: str) -> None:
    from labzarr.convert.check import check_delivery

    spec = project(tmp_path, patients=range(1, 2))
    assert callable(change)
    spec.write_text(change(spec.read_text()))
    with pytest.raises(UsageError) as err:
        check_delivery(spec)
    assert needle in str(err.value), err.value


@pytest.mark.parametrize(("leakage", "copy_status", "copy_reason", "rejected"), [
    pytest.param("reject", "rejected", "split_leakage", ["P005/P005_t9.nii.gz"], id="reject"),
    pytest.param("warn", "ok", "", [], id="warn"),
])
def test_a_byte_identical_copy_under_a_patient_in_another_split_is_a_leak_not_a_duplicate(
        tmp_path: Path, scheduler: str, leakage: str, copy_status: str, copy_reason: str, rejected: list[str]) -> None:
    from labzarr.convert.check import check_delivery

    pins = {"P004_t1": "train", "P005_t1": "test", "P006_t1": "train"}
    spec = project(tmp_path, splits=FRACTIONS + f'pinned = "Split"\nleakage = "{leakage}"\n', patients=range(1, 9),
                   pins=pins)
    raw = tmp_path / "data" / "raw" / "cohort"
    original = (raw / "P004" / "P004_t1.nii.gz").read_bytes()
    (raw / "P005" / "P005_t9.nii.gz").write_bytes(original)  # under a test patient: a leak
    (raw / "P006" / "P006_t8.nii.gz").write_bytes(original)  # under another train patient: a plain duplicate
    planned = {p.row.item_id: p.row for p in check_delivery(spec).planned}
    result = convert_delivery(spec, scheduler=scheduler)
    rows = {r["item_id"]: r for r in _manifest(spec)}
    copy = rows["p005t9"]
    assert (copy["status"], copy["reason"], copy["split"]) == (copy_status, copy_reason, "test")
    assert (planned["p005t9"].status, planned["p005t9"].split) == (copy_status, "test")  # check says the same
    if copy_reason:
        assert "as p004t1 (P004/P004_t1.nii.gz) in train; this copy in test" in copy["detail"]
    (leak,) = [lk for lk in _summary(spec)["splits"]["leakage"] if lk["kind"] == "content_in_several_splits"]
    assert {(i["item_id"], i["where"]) for i in leak["items"]} == {("p004t1", "train"), ("p005t9", "test")}
    assert leak["rejected"] == rejected
    assert rows["p004t1"]["status"] == "ok"
    same = rows["p006t8"]
    assert (same["status"], same["reason"], same["split"]) == ("rejected", "duplicate_content", "train")
    assert same["detail"].startswith("same sha256 as P004/P004_t1.nii.gz")
    assert result.summary["reasons"].get("split_leakage", 0) == len(rejected)
    from labzarr import open_store

    stored = {i.item_id for i in open_store(tmp_path / "data/stores/cohort.zarr").items}
    assert ("p005t9" in stored) == (leakage == "warn") and "p006t8" not in stored
