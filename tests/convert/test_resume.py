"""Incremental runs: unchanged items are reused, changed/new ones converted, removed ones dropped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from PIL import Image

from labzarr.convert import RunResult, execute, load_spec, read_manifest
from labzarr.convert.cli import main
from labzarr.convert.demo import EXPECTED, write_spec
from labzarr.convert.discover import Candidate, FileEntry
from labzarr.convert.manifest import ClassCount, RoleSource, Row
from labzarr.convert.plan.build import plan
from labzarr.convert.plan.records import Outcome, Recorded, from_record, to_record
from labzarr.convert.probe import Probe
from labzarr.convert.qc.verify import verify_store
from labzarr.convert.spec import Spec
from labzarr.loaders import open_store
from labzarr.readers import Reason
from labzarr.store import Folder, read_index

from ..conftest import Delivery, make_delivery
from ..corpus._util import jpeg, put

# Decided from the probe alone, never decoded: empty, no ID, a copy, content no reader knows, not an image,
# a DICOM series whose slice positions (headers) show a gap.
_DECIDED = {"empty_file", "id_unmatched", "duplicate_content", "unsupported_format", "series_missing_slices"}
N_DECODED = sum(1 for status, reason in EXPECTED.values() if status != "ignored" and reason not in _DECIDED)


def run(d: Delivery, client) -> RunResult:
    return execute(load_spec(d.spec), client)


def array_files(store: Path) -> dict[str, int]:
    return {p.relative_to(store).as_posix(): p.stat().st_mtime_ns for p in (store / "volumes").rglob("*")
            if p.is_file()}


def rows_without_index(manifest: Path) -> dict[str, str]:
    return {r["source"]: json.dumps({k: v for k, v in r.items() if k != "index"}) for r in read_manifest(manifest)}


def nifti_gz(seed: int, shape: tuple[int, int, int] = (20, 18, 12)) -> bytes:
    data = np.random.default_rng(seed).integers(-100, 100, shape).astype(np.int16)
    return gzip.compress(bytes(nib.Nifti1Image(data, np.diag([1.0, 1.0, 2.0, 1.0])).to_bytes()), mtime=0)


def test_rerun_of_unchanged_delivery_converts_nothing(tmp_path: Path, dask_client) -> None:
    d = make_delivery(tmp_path)
    first = run(d, dask_client)
    before = first.manifest.read_bytes()
    files = array_files(d.store)
    second = run(d, dask_client)
    assert (first.converted, first.unchanged) == (N_DECODED, 0)
    assert (second.converted, second.unchanged) == (0, N_DECODED)
    assert second.manifest.read_bytes() == before
    assert array_files(d.store) == files  # not one chunk rewritten
    assert second.run_log["run"] == {"converted": 0, "unchanged": N_DECODED, "parts": 0}


def test_changed_added_and_removed_files(tmp_path: Path, dask_client) -> None:
    d = make_delivery(tmp_path)
    first = run(d, dask_client)
    old_rows = rows_without_index(first.manifest)
    (d.raw / "case_001" / "anatomical.nii").write_bytes(gzip.decompress(nifti_gz(1)))  # changed content
    (d.raw / "case_003" / "example4d.nii.gz").unlink()  # removed
    (d.raw / "case_099.nii.gz").write_bytes(nifti_gz(99))  # added (the workbook has its label already)
    files = array_files(d.store)
    second = run(d, dask_client)
    assert second.converted == 2 and second.unchanged == N_DECODED - 2
    new_rows = rows_without_index(second.manifest)
    assert "case_003/example4d.nii.gz" not in new_rows and not (d.store / "volumes" / "case3").exists()
    assert json.loads(new_rows["case_099.nii.gz"])["status"] == "ok"
    assert json.loads(new_rows["case_001/anatomical.nii"])["shape"] == "1x20x18x12"
    untouched = set(old_rows) - {"case_001/anatomical.nii", "case_003/example4d.nii.gz"}
    assert {s: new_rows[s] for s in untouched} == {s: old_rows[s] for s in untouched}  # byte-identical rows
    still = {k: v for k, v in files.items() if not k.startswith(("volumes/case1/", "volumes/case3/"))}
    assert {k: array_files(d.store)[k] for k in still} == still
    assert verify_store(d.store).ok
    assert sorted(i.array for i in read_index(d.store).items) == sorted(
        json.loads(r)["array"] for r in new_rows.values() if json.loads(r)["status"] == "ok")


def test_settings_change_converts_again(tmp_path: Path, dask_client) -> None:
    d = make_delivery(tmp_path)
    run(d, dask_client)
    d.spec.write_text(d.spec.read_text().replace("level = 5", "level = 3"))
    again = run(d, dask_client)
    assert (again.converted, again.unchanged) == (N_DECODED, 0)


def test_unfinished_or_tampered_arrays_are_redone_and_leftovers_swept(tmp_path: Path, dask_client) -> None:
    d = make_delivery(tmp_path)
    first = run(d, dask_client)
    meta_path = d.store / "volumes" / "case2" / "0" / "zarr.json"
    meta = json.loads(meta_path.read_bytes())
    del meta["attributes"]["complete"]  # as if the run died before sealing it
    meta_path.write_text(json.dumps(meta))
    staged = d.store / ".labzarr" / "staging" / "volumes~case9.deadbeef"
    staged.mkdir(parents=True)
    (staged / "zarr.json").write_text("{}")
    (d.store / "volumes" / "case5" / "0" / "c" / "0" / "0" / "0" / "0.0123.partial").write_bytes(b"half a chunk")
    again = run(d, dask_client)
    assert again.converted == 1 and again.unchanged == N_DECODED - 1
    assert again.manifest.read_bytes() == first.manifest.read_bytes()
    assert not list(d.store.rglob("*.partial")) and not any((d.store / ".labzarr" / "staging").iterdir())
    assert verify_store(d.store).ok


def test_arrays_sealed_before_the_record_of_stored_files_are_converted_again(tmp_path: Path, dask_client) -> None:
    from labzarr.store import FORMAT_VERSION, FormatError

    d = make_delivery(tmp_path)
    first = run(d, dask_client)
    for array in ("volumes/case2/0", "volumes/case7/0"):  # as a labzarr before store format 3 sealed them
        meta_path = d.store / array / "zarr.json"
        meta = json.loads(meta_path.read_bytes())
        del meta["attributes"]["stored"]
        meta_path.write_text(json.dumps(meta))
    root_path = d.store / "zarr.json"
    root = json.loads(root_path.read_bytes())
    root["attributes"]["labzarr"]["format_version"] = 2
    root_path.write_text(json.dumps(root))
    with pytest.raises(FormatError, match="format version 2.*convert the delivery again"):
        open_store(d.store)  # an old store is refused, not read unchecked
    again = run(d, dask_client)
    assert again.converted == 2 and again.unchanged == N_DECODED - 2
    assert again.manifest.read_bytes() == first.manifest.read_bytes()
    view = open_store(d.store)
    assert view.attrs["format_version"] == FORMAT_VERSION
    assert all("stored" in view.array(i).attrs for i in view.items)
    assert verify_store(d.store).ok


def test_unicode_normalisation_of_a_name_is_the_same_file(tmp_path: Path, dask_client) -> None:
    d = make_delivery(tmp_path)
    nfd = d.raw / "Muse\u0301e" / "case_099.nii.gz"  # a folder named on macOS (NFD)
    nfd.parent.mkdir()
    nfd.write_bytes(nifti_gz(99))
    first = run(d, dask_client)
    rows = {r["source"]: r for r in read_manifest(first.manifest)}
    assert rows["Mus\u00e9e/case_099.nii.gz"]["status"] == "ok"  # the manifest speaks NFC
    nfd.parent.rename(d.raw / "Mus\u00e9e")
    again = run(d, dask_client)
    assert again.converted == 0 and again.manifest.read_bytes() == first.manifest.read_bytes()


def test_cli_says_nothing_to_convert(tmp_path: Path, dask_client, capsys: pytest.CaptureFixture[str]) -> None:
    d = make_delivery(tmp_path)
    run(d, dask_client)
    assert main(["convert", str(d.spec), "--workers", "1"]) == 0
    assert f"0 converted, {N_DECODED} unchanged" in capsys.readouterr().out


def test_stacks_are_reused_shard_by_shard(tmp_path: Path, dask_client) -> None:
    raw = tmp_path / "raw"
    # 1024x1024 RGB images: 21 to a shard (SHARD_BYTES), so 23 make two shards (slots 0..20 and 21..22). Two
    # shards, one changed, are the point: 23 big images cost less than 1100 16x16 tiles (1024 to a shard).
    for i in range(23):
        put(raw, f"tiles/tile_{i:05d}.jpg", jpeg(i, (1024, 1024, 3)))
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr", name="t", labels=False)
    stack = tmp_path / "s.zarr" / "stacks" / "3x1024x1024_uint8"
    first = execute(load_spec(spec, root=tmp_path), dask_client)
    assert (first.converted, first.unchanged) == (23, 0)
    shard0 = (stack / "c/0/0/0/0").stat().st_ino
    meta = (stack / "zarr.json").stat().st_mtime_ns
    again = execute(load_spec(spec, root=tmp_path), dask_client)
    assert (again.converted, again.unchanged) == (0, 23)
    assert (stack / "zarr.json").stat().st_mtime_ns == meta  # the stack was not touched at all
    last = next(r["source"] for r in read_manifest(first.manifest) if r["slot"] == "22")
    # changed content, same size, in the second shard: only that shard is redone
    put(raw, last, jpeg(5000, (1024, 1024, 3)))
    third = execute(load_spec(spec, root=tmp_path), dask_client)
    assert (third.converted, third.unchanged) == (2, 21)
    assert (stack / "c/0/0/0/0").stat().st_ino == shard0  # carried over (hard link), not rewritten
    assert verify_store(tmp_path / "s.zarr").ok
    view = open_store(tmp_path / "s.zarr")
    item = next(i for i in view.items if i.source == last)
    want = np.asarray(Image.open(raw / item.source).convert("RGB")).transpose(2, 0, 1)
    assert np.abs(view.array(item)[item.slot].astype(int) - want.astype(int)).max() <= 2
    rows = {r["source"]: r for r in read_manifest(third.manifest)}
    before = {r["source"]: r for r in read_manifest(again.manifest)}
    assert {s: r for s, r in rows.items() if s != item.source} == {s: r for s, r in before.items() if s != item.source}


# --- planning with recorded outcomes is pure -------------------------------------------------------------

def _spec(tmp_path: Path) -> Spec:
    d = make_delivery(tmp_path)
    return load_spec(d.spec, root=tmp_path)


def _inputs(rel: str, sha: str) -> tuple[list[Candidate], dict[str, Probe]]:
    entry = FileEntry(rel, f"/raw/{rel}", 10)
    probe = Probe(rel=rel, size=10, sha256=sha, kind="nifti", text=False, gzipped=False, gzip_error=None, magic=b"")
    return [Candidate(entry, "case1")], {rel: probe}


@pytest.mark.parametrize(("change", "reused"), [
    pytest.param({}, True, id="same"),
    pytest.param({"sha256": "f" * 64}, False, id="bytes-changed"),
    pytest.param({"settings": "other"}, False, id="settings-changed"),
    pytest.param({"array": "volumes/case1~2"}, False, id="array-renamed"),
    pytest.param({"item_id": "case2"}, False, id="id-changed"),
])
def test_plan_reuses_an_outcome_only_when_nothing_changed(tmp_path: Path, change: dict[str, str],
                                                          reused: bool) -> None:
    spec = _spec(tmp_path)
    candidates, probes = _inputs("case_001.nii", "a" * 64)
    fields = {"sha256": "a" * 64, "array": "volumes/case1/0", "item_id": "case1", **change}
    settings = change.get("settings", "s1")
    fields.pop("settings", None)
    row = Row(status="ok", source="case_001.nii", kind="nifti", shape=(1, 2, 3, 4), dtype="int16", **fields)
    p = plan(spec, candidates, probes, Recorded(volumes={"case_001.nii": Outcome(fingerprint=settings, row=row)}),
             fingerprint="s1")
    assert (len(p.unchanged), len(p.tasks)) == ((1, 0) if reused else (0, 1))
    if reused:
        assert p.unchanged[0] == row


def test_row_records_round_trip() -> None:
    row = Row(item_id="c1", status="rejected", source="a/b.nii", reason=Reason.TRUNCATED, detail="cut at 60 %",
              kind="nifti", sha256="ab", shape=(1, 2), spacing=(0.5, 1.25), warnings=("w1",), members=("x", "y"),
              roles=(RoleSource("image", "a/b.nii", "ab", "volumes/c1/image", "int16"),),
              classes=(ClassCount(1, 20, 0, 20),), group="volumes/c1")
    assert from_record(json.loads(json.dumps(to_record(row)))) == row


def test_duplicates_are_decided_before_decoding(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    (c1,), p1 = _inputs("b.nii", "a" * 64)
    (c2,), p2 = _inputs("a.nii", "a" * 64)
    p = plan(spec, [c1, c2], {**p1, **p2})
    assert [t.source for t in p.tasks] == ["a.nii"]
    assert [(r.source, r.reason) for r in p.rows] == [("b.nii", Reason.DUPLICATE_CONTENT)]


def test_samples_with_the_same_bytes_are_duplicates_after_decoding(tmp_path: Path) -> None:
    """Samples are grouped after probing, so their duplicates are found among decoded rows; the later one goes."""
    from labzarr.convert.run.finish import Decoded
    from labzarr.convert.run.row_spill import RowSpill

    (tmp_path / "volumes" / "b").mkdir(parents=True)
    rows = [Row(item_id=i, status="ok", source=f"{i}_img.nii", sha256="a" * 64, group=f"volumes/{i}",
                array=f"volumes/{i}/image") for i in ("b", "a")]
    with RowSpill(tmp_path, splits=None) as spilled:
        for row in rows:
            spilled.add(row)
        out = list(Decoded(spilled, Folder(tmp_path), decoded=2, converted=2).in_manifest_order())
    assert [(r.item_id, r.status, r.reason) for r in out] == [("a", "ok", None),
                                                               ("b", "rejected", Reason.DUPLICATE_CONTENT)]
    assert not (tmp_path / "volumes" / "b").exists()


def _lines(manifest: Path) -> dict[str, str]:
    """Each row's CSV line by source (the manifest's sources are plain: no quoting in the demo)."""
    return {r["source"]: line for r, line in zip(read_manifest(manifest), manifest.read_text().splitlines()[1:])}


def test_appending_and_removing_items_keeps_every_other_rows_index_and_bytes(tmp_path: Path, dask_client) -> None:
    d = make_delivery(tmp_path)
    first = _lines(run(d, dask_client).manifest)
    removed = "case_003/example4d.nii.gz"
    (d.raw / removed).unlink()
    (d.raw / "case_000.nii.gz").write_bytes(nifti_gz(1000))  # sorts first: it would renumber every row below
    second_run = run(d, dask_client)
    second = _lines(second_run.manifest)
    # The diff is what changed: the new row in, the removed row out, every other line byte for byte.
    assert set(second.values()) - set(first.values()) == {second["case_000.nii.gz"]}
    assert set(first.values()) - set(second.values()) == {first[removed]}
    index = {s: int(r["index"]) for s, r in ((r["source"], r) for r in read_manifest(second_run.manifest))}
    assert index["case_000.nii.gz"] == len(first) and second_run.summary["next_index"] == len(first) + 1
    # A removed item's index is not handed out again, nor is the last one given.
    (d.raw / "case_098.nii.gz").write_bytes(nifti_gz(1098))
    third_run = run(d, dask_client)
    third = read_manifest(third_run.manifest)
    assert {r["source"]: int(r["index"]) for r in third}["case_098.nii.gz"] == len(first) + 1
    assert int(first[removed].split(",", 1)[0]) not in {int(r["index"]) for r in third}
    assert [(r["item_id"], r["source"]) for r in third] == sorted((r["item_id"], r["source"]) for r in third)
    before = third_run.manifest.read_bytes()
    assert run(d, dask_client).manifest.read_bytes() == before  # a no-op rerun: the same bytes


@pytest.mark.parametrize(("sources", "earlier", "expected", "after"), [
    pytest.param(["a", "b", "c"], {}, [0, 1, 2], 3, id="first-run-counts-in-order"),
    pytest.param(["a", "b", "c"], {"a": 0, "b": 1, "c": 2}, [0, 1, 2], 3, id="no-op"),
    pytest.param(["a", "a2", "b"], {"a": 0, "b": 1}, [0, 2, 1], 3, id="new-in-the-middle"),
    pytest.param(["a", "d"], {"a": 0, "b": 1, "c": 2}, [0, 3], 4, id="removed-not-reused"),
    pytest.param(["a", "e"], {"a": 0, "_next": 7}, [0, 7], 8, id="earlier-removals-not-reused"),
])
def test_number_rows_keeps_earlier_indices_and_never_reuses_one(sources: list[str], earlier: dict[str, int],
                                                                expected: list[int], after: int) -> None:
    from labzarr.convert.manifest import EarlierIndex, number_rows

    by_source = {s: i for s, i in earlier.items() if s != "_next"}
    nxt = max(earlier.get("_next", 0), max(by_source.values(), default=-1) + 1)
    rows = [Row(item_id=s, status="ok", source=s) for s in sources]
    assert number_rows(rows, EarlierIndex(by_source, nxt)) == (expected, after)
