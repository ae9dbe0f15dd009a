from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import zarr

from labzarr.convert import convert_delivery, read_manifest
from labzarr.convert.demo import EXPECTED, EXPECTED_LABELS, write_demo, write_spec
from labzarr.convert.manifest import BASE_COLUMNS
from labzarr.convert.run.driver import execute
from labzarr.convert.run.worker_start import WORKER_MALLOC
from labzarr.convert.spec import load_spec
from labzarr.loaders import open_store

from ..conftest import make_delivery, nib_load
from ..dicom_data import canonical, dcm2niix


def test_every_file_has_its_expected_outcome(converted_demo) -> None:
    d, result = converted_demo
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    on_disk = {p.relative_to(d.raw).as_posix() for p in d.raw.rglob("*") if p.is_file()}
    assert set(rows) == set(EXPECTED)
    # every file is one row's source, or one slice of a DICOM series row (`<folder>/ (series N)`)
    series = {s: s.split(" (series ")[0] for s in rows if " (series " in s}
    singles = set(rows) - set(series)
    assert singles <= on_disk
    slices = on_disk - singles
    assert sorted(slices) == sorted(f for f in slices if any(f.startswith(folder) for folder in series.values()))
    assert sum(int(rows[s]["n_files"]) for s in series) == len(slices)
    assert sum(int(r["n_files"]) for r in rows.values()) == len(on_disk) == result.summary["counts"]["files"]
    for source, (status, reason) in EXPECTED.items():
        assert (rows[source]["status"], rows[source]["reason"]) == (status, reason), source
        if status == "rejected":
            assert rows[source]["detail"], source
    counts = result.summary["counts"]
    assert counts["ok"] + counts["rejected"] + counts["ignored"] == len(rows)
    assert counts["ok"] == sum(1 for s, _ in EXPECTED.values() if s == "ok")


def test_demo_labels_from_sheet3_column_f(converted_demo) -> None:
    d, result = converted_demo
    rows = read_manifest(result.manifest)
    ok = {r["item_id"]: r for r in rows if r["status"] == "ok"}
    assert {i: r["label.cell_type"] for i, r in ok.items()} == EXPECTED_LABELS
    assert all(r["label_source"].startswith("Annotations v2!F") for r in ok.values())
    by_source = {r["source"]: r for r in rows}
    assert by_source["case_020.nii.gz"]["detail"] == ("cell_type: 'neuron' at Annotations v2!F18, "
                                                      "'astrocyte' at Annotations v2!F19")
    assert "labels/annotations.xlsx" in by_source and by_source["labels/annotations.xlsx"]["detail"].startswith(
        "label workbook")
    s = result.summary
    assert s["unmatched_workbook_ids"] == [{"id": "case_099", "normalized": "case99", "cell": "Annotations v2!A20"}]
    assert s["labels"]["cell_type"] == {v: list(EXPECTED_LABELS.values()).count(v)
                                        for v in set(EXPECTED_LABELS.values())}
    assert "case19" in s["unlabelled_items"] and "case18" in s["unlabelled_items"]
    assert {i.item_id: i.labels["cell_type"] for i in open_store(d.store).items} == EXPECTED_LABELS


def test_manifest_columns_sorted_and_indexed(converted_demo) -> None:
    _, result = converted_demo
    text = result.manifest.read_text()
    assert text.splitlines()[0] == ",".join([*BASE_COLUMNS, "label.cell_type", "label_source"])
    rows = read_manifest(result.manifest)
    assert [int(r["index"]) for r in rows] == list(range(len(rows)))
    assert [(r["item_id"], r["source"]) for r in rows] == sorted((r["item_id"], r["source"]) for r in rows)


def test_store_arrays_equal_closest_canonical(converted_demo) -> None:
    d, result = converted_demo
    view = open_store(d.store)
    ok = [r for r in read_manifest(result.manifest) if r["status"] == "ok"]
    assert [i.item_id for i in view.items] == [r["item_id"] for r in ok]
    for row, item in zip(ok, view.items):
        if row["kind"] == "dicom":
            continue  # the series' voxels: test_demo_dicom_series_equals_dcm2niix
        img = nib.as_closest_canonical(nib_load(d.raw / row["source"]))
        want = np.asanyarray(img.dataobj)
        want = want.reshape(want.shape[:3] + (-1,), order="F")
        arr = view.array(item)
        got = arr[...]
        np.testing.assert_array_equal(got, np.moveaxis(want, 3, 0).astype(got.dtype))
        np.testing.assert_allclose(np.array(arr.attrs["affine"]), img.affine, atol=1e-5)
        np.testing.assert_allclose(arr.attrs["spacing"], img.header.get_zooms()[:3], atol=1e-5)
        assert arr.attrs["complete"] == row["sha256"]
        assert arr.attrs["orientation"] == "RAS"


def test_demo_dicom_series_equals_dcm2niix(converted_demo, tmp_path: Path) -> None:
    d, result = converted_demo
    row = next(r for r in read_manifest(result.manifest) if r["kind"] == "dicom" and r["status"] == "ok")
    folder = d.raw / row["source"].split(" (series ")[0]
    (nii,) = dcm2niix(folder, tmp_path / "dcm2niix")
    want, affine = canonical(nii)
    arr = open_store(d.store).array(row["array"])
    np.testing.assert_allclose(arr[...], want, rtol=0, atol=1e-3)
    np.testing.assert_allclose(np.array(arr.attrs["affine"]), affine, atol=1e-3)
    assert int(row["n_files"]) == len(list(folder.iterdir())) == 5


def test_store_codecs_and_root_attrs(converted_demo) -> None:
    d, result = converted_demo
    view = open_store(d.store)
    arr = view.array(view.items[0])
    assert arr.path_used == "labzarr" and arr.layout is not None and arr.layout.codecs == ("blosc", "crc32c")
    shape = view.items[0].shape
    chunks = [min(32, n) for n in shape[1:]]
    assert arr.chunks == (1, *chunks)
    # a shard holds whole chunks: clipped to the volume, rounded up to its chunks
    assert arr.shards == (1, *(min(s, -(-n // c) * c) for s, c, n in zip((256, 256, 128), chunks, shape[1:])))
    assert view.attrs["delivery"] == "demo"
    assert view.attrs["manifest_sha256"] == result.summary["manifest_sha256"]
    assert view.attrs["spec_sha256"] == result.summary["spec_sha256"]
    # only ok items have arrays, and items rejected only for their labels (kept outside the index, so a
    # corrected workbook makes them ok without decoding again); other rejected ones (the duplicate) have none
    root = zarr.open_group(d.store, mode="r")
    label_rejected = [r["item_id"] for r in read_manifest(result.manifest)
                      if r["reason"] in ("no_label", "label_conflict")]
    assert label_rejected
    assert sorted(n for n, _ in root["volumes"].groups()) == sorted(
        [i.array.split("/")[1] for i in view.items] + label_rejected)


def test_manifest_byte_identical_across_workers_and_reruns(converted_demo, tmp_path: Path) -> None:
    _, first = converted_demo
    d = make_delivery(tmp_path)
    one = convert_delivery(d.spec, workers=1)
    committed = one.manifest.read_bytes(), one.summary_path.read_bytes()
    again = convert_delivery(d.spec, workers=1)  # a no-op rerun: the committed files do not change, byte for byte
    assert (again.manifest.read_bytes(), again.summary_path.read_bytes()) == committed
    assert committed[0] == first.manifest.read_bytes()
    assert b"timings" not in committed[1] and b"converted" not in committed[1]
    log = json.loads((d.store / ".labzarr" / "last-run.json").read_bytes())  # what only the last run did
    assert log["run"] == again.run_log["run"] == {"converted": 0, "unchanged": one.run_log["run"]["converted"],
                                                  "parts": 0}
    assert set(log["timings"]) == {"start_s", "discover_s", "probe_s", "convert_s", "total_s"}


def test_convert_delivery_and_execute_write_the_same_store_documents(tmp_path: Path, scheduler: str,
                                                                     dask_client) -> None:
    """The public API (and the CLI, which calls it) and `execute` on a ready client hold a run the same way
    (`driver._running`), so they write the same store: every `zarr.json` byte for byte, indentation included."""
    def project(root: Path) -> Path:  # relative paths: the same spec bytes, so the same root attrs
        write_demo(root / "raw" / "demo")
        return write_spec(root / "manifests" / "demo" / "delivery.toml", raw="raw/demo", store="stores/demo.zarr")

    def documents(store: Path) -> dict[str, bytes]:
        return {p.relative_to(store).as_posix(): p.read_bytes() for p in sorted(store.rglob("zarr.json"))}

    convert_delivery(project(tmp_path / "api"), scheduler=scheduler)
    execute(load_spec(project(tmp_path / "execute")), dask_client)
    got = documents(tmp_path / "api" / "stores" / "demo.zarr")
    assert len(got) > 10 and any(name.startswith("volumes/") for name in got)
    assert got == documents(tmp_path / "execute" / "stores" / "demo.zarr")


def test_symlink_outside_raw_is_rejected_never_read(tmp_path: Path, scheduler: str) -> None:
    d = make_delivery(tmp_path)
    secret = tmp_path / "secret_9.nii"
    secret.write_bytes((Path(nib.__file__).parent / "tests/data/anatomical.nii").read_bytes())
    os.symlink(secret, d.raw / "case_099.nii")
    rows = {r["source"]: r for r in read_manifest(convert_delivery(d.spec, scheduler=scheduler).manifest)}
    assert rows["case_099.nii"]["status"] == "rejected"
    assert rows["case_099.nii"]["reason"] == "path_outside_raw"
    assert str(secret) in rows["case_099.nii"]["detail"]


def test_cli_convert_and_inspect(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-m", "labzarr", "convert", str(d.spec), "--workers", "1", "--quiet"],
                         capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    out = subprocess.run([sys.executable, "-m", "labzarr", "inspect", str(d.store)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    n_ok = sum(1 for status, _ in EXPECTED.values() if status == "ok")
    assert f"{n_ok} ok" in out.stdout and "volumes/case1" in out.stdout and "ratio" in out.stdout


def test_dry_run_converts_nothing(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    out = subprocess.run([sys.executable, "-m", "labzarr", "convert", str(d.spec), "--dry-run"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "18 to convert, 0 unchanged, 9 decided without decoding" in out.stdout
    assert not d.store.exists()


def test_non_finite_warn_policy_keeps_item(tmp_path: Path, scheduler: str) -> None:
    d = make_delivery(tmp_path, extra='\n[validate]\nnon_finite = "warn"\n')
    rows = {r["source"]: r for r in read_manifest(convert_delivery(d.spec, scheduler=scheduler).manifest)}
    assert rows["case_016_nan.nii.gz"]["status"] == "ok"
    assert "non_finite" in rows["case_016_nan.nii.gz"]["warnings"]


def test_embedded_cluster_workers_start_with_large_malloc_thresholds() -> None:
    # dask's nanny default (MALLOC_TRIM_THRESHOLD_=65536) makes every slab buffer a fresh mmap; checked in a fresh
    # interpreter, since a nanny started earlier in this process leaves its variables in os.environ.
    code = ("import os\nfrom labzarr.convert.run.cluster import client_of\n"
            "if __name__ == '__main__':\n"
            "    with client_of(1, None, crash_retries=1) as c:\n"
            "        print(sorted((k, v) for k, v in c.run(lambda: dict(os.environ)).popitem()[1].items()"
            " if k.startswith('MALLOC_')))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(sorted((k, str(v)) for k, v in WORKER_MALLOC.items()))
