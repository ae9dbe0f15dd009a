"""A small delivery converted in one process (`convert/run/in_process.py`, `convert/run/small_run.py`).

The same store and manifest bytes as the cluster writes, for every kind of small delivery the suite builds; the
`labzarr` command converts such a delivery in a child with no dask imported; a reader that crashes or hangs there
ends as its row on the cluster, the rest kept.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from labzarr.convert import UsageError, convert_delivery, execute, load_spec, read_manifest
from labzarr.convert.demo import EXPECTED, write_spec
from labzarr.convert.run.small_run import is_small, small_delivery
from labzarr.convert.spec import RunSpec
from labzarr.convert.spec_early import IN_PROCESS_BYTES, IN_PROCESS_FILES

from ..conftest import Delivery, make_delivery, seg_delivery
from ..dicom_data import ct_series, four_d
from ..faulty_readers import HANG_MAGIC, PLUGINS, SEGFAULT_MAGIC, WHERE_MAGIC, WHERE_PLUGINS
from ..outputs import run_outputs

_REPO = Path(__file__).resolve().parents[2]


def _both_ways(d: Delivery, on_cluster: Callable[[], object]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(the cluster's outputs, the one process's), each converted from scratch at the same paths: store files
    and the manifest folder's files."""
    outputs = []
    for convert in (on_cluster, lambda: convert_delivery(d.spec, in_process=True)):
        shutil.rmtree(d.store, ignore_errors=True)
        for p in d.spec.parent.iterdir():
            if p != d.spec:
                p.unlink()
        convert()
        outputs.append(run_outputs(d.store, d.spec.parent))
    return outputs[0], outputs[1]


def _demo(root: Path) -> Delivery:
    return make_delivery(root)


def _dicom(root: Path) -> Delivery:
    raw = root / "raw"
    ct_series(raw / "case_001", "case1")
    four_d(raw / "case_002", volumes=2)
    spec = write_spec(root / "manifests" / "dicom" / "delivery.toml", raw=raw, store=root / "dicom.zarr",
                      name="dicom", labels=False)
    return Delivery(raw=raw, spec=spec, store=root / "dicom.zarr")


def _images(root: Path) -> Delivery:
    from ..imaging import write_image_delivery

    raw = root / "raw" / "images"
    write_image_delivery(raw)
    spec = write_spec(root / "manifests" / "images" / "delivery.toml", raw=raw, store=root / "images.zarr",
                      name="images", labels=False)
    return Delivery(raw=raw, spec=spec, store=root / "images.zarr")


def _samples(root: Path) -> Delivery:
    from ..segmentation import SEG_MASKS, SEG_ROLES, write_seg_delivery

    d = seg_delivery(root, SEG_ROLES + "\n" + SEG_MASKS)
    write_seg_delivery(d.raw)
    return d


@pytest.mark.parametrize("build", [_demo, _dicom, _images, _samples],
                         ids=["demo-nifti-dicom-labels", "dicom-series-and-4d", "2d-stacks", "samples-with-masks"])
def test_one_process_writes_the_clusters_bytes(tmp_path: Path, dask_client: object,
                                               build: Callable[[Path], Delivery]) -> None:
    d = build(tmp_path)
    cluster, one = _both_ways(d, lambda: execute(load_spec(d.spec), dask_client))  # type: ignore[arg-type]
    assert sorted(one) == sorted(cluster)
    assert [k for k in cluster if one[k] != cluster[k]] == []
    assert any(k.endswith("manifest.csv") for k in one) and any("/volumes/" in k or "/stacks/" in k for k in one)


def _where(row: dict[str, str]) -> tuple[int, bool]:
    pid, dask = (part.split("=")[1] for part in row["detail"].split())
    return int(pid), dask == "True"


def _command(spec: Path, *options: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}  # the test readers, as `tests.faulty_readers`
    return subprocess.Popen([sys.executable, "-m", "labzarr", "convert", str(spec), *options], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=_REPO)


def test_the_command_converts_a_small_delivery_in_one_child_without_dask(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nreaders = {json.dumps(WHERE_PLUGINS)}\n")
    (d.raw / "case_950.bin").write_bytes(WHERE_MAGIC + bytes(100))
    command = _command(d.spec, "--quiet")
    out, err = command.communicate(timeout=300)
    assert (command.returncode, out, err) == (0, "", "")
    rows = {r["source"]: r for r in read_manifest(d.spec.parent / "manifest.csv")}
    pid, dask = _where(rows.pop("case_950.bin"))
    assert pid != command.pid and not dask  # a child of the command (the command starts again in place: execve)
    assert {s: (r["status"], r["reason"]) for s, r in rows.items()} == dict(EXPECTED)


def test_a_delivery_over_the_bounds_converts_on_a_cluster(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nreaders = {json.dumps(WHERE_PLUGINS)}\nin_process_files = 5\n")
    (d.raw / "case_950.bin").write_bytes(WHERE_MAGIC + bytes(100))
    command = _command(d.spec, "--quiet", "--workers", "1")
    out, err = command.communicate(timeout=300)
    assert (command.returncode, out, err) == (0, "", "")
    row = next(r for r in read_manifest(d.spec.parent / "manifest.csv") if r["source"] == "case_950.bin")
    assert _where(row)[1]  # a dask worker's


def test_a_crash_or_a_hang_in_the_child_ends_as_its_row_on_the_cluster(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nitem_timeout = 3\ncrash_retries = 1\n"
                                      f"readers = {json.dumps(PLUGINS + WHERE_PLUGINS)}\n")
    (d.raw / "case_901.dcm").write_bytes(SEGFAULT_MAGIC + bytes(range(256)))
    (d.raw / "case_902.jpg").write_bytes(HANG_MAGIC + bytes(range(256)))
    (d.raw / "case_950.bin").write_bytes(WHERE_MAGIC + bytes(100))
    assert small_delivery(d.spec)
    command = _command(d.spec, "--workers", "2")
    out, err = command.communicate(timeout=300)
    assert command.returncode == 0, err[-3000:]
    # The child died on whichever of the two came first; one line says so, and the cluster took over.
    assert "the conversion in one process stopped (killed by SIGSEGV)" in err or (
        "the conversion in one process stopped (no progress for 4.5 s)" in err), err
    assert err.count("converting on a cluster, where only the item at fault is lost") == 1, err
    assert "Traceback" not in err and "Fatal Python error" not in err, err
    rows = {r["source"]: r for r in read_manifest(d.spec.parent / "manifest.csv")}
    crash, hang, where = rows.pop("case_901.dcm"), rows.pop("case_902.jpg"), rows.pop("case_950.bin")
    assert (crash["status"], crash["reason"]) == ("rejected", "decoder_crash")
    assert "died while decoding this item, 2 of 2 attempts" in crash["detail"]
    assert (hang["status"], hang["reason"]) == ("rejected", "timeout")
    assert "no result after 3 s" in hang["detail"]
    assert _where(where)[1]  # converted again on the cluster: the final verdict is the cluster's
    assert {s: (r["status"], r["reason"]) for s, r in rows.items()} == dict(EXPECTED)  # nothing else lost


def test_what_counts_as_small(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    (raw / "a" / "b").mkdir(parents=True)
    for i in range(3):
        (raw / "a" / "b" / f"{i}.bin").write_bytes(bytes(100))
    (raw / "top.bin").write_bytes(bytes(50))
    assert is_small(raw, files=4, size=350)
    assert not is_small(raw, files=3, size=10_000)  # one file too many, wherever it lies
    assert not is_small(raw, files=100, size=349)  # one byte too many
    assert not is_small(raw, files=0, size=10_000)  # 0: always a cluster
    assert not is_small(tmp_path / "missing", files=100, size=10_000)  # left to the run, which says what is wrong
    assert (RunSpec().in_process_files, RunSpec().in_process_bytes) == (IN_PROCESS_FILES, IN_PROCESS_BYTES)


@pytest.mark.parametrize(("run", "small"), [
    pytest.param("", True, id="defaults"),
    pytest.param("[run]\nin_process_files = 0\n", False, id="turned-off"),
    pytest.param("[run]\nin_process_files = 4\n", False, id="more-files-than-allowed"),
    pytest.param("[run]\nin_process_bytes = 1000\n", False, id="more-bytes-than-allowed"),
    pytest.param("[run]\nin_process_files = \"many\"\n", False, id="not-plainly-readable: the run says why"),
])
def test_the_command_reads_the_bounds_from_the_spec_alone(tmp_path: Path, run: str, small: bool) -> None:
    spec = tmp_path / "manifests" / "x" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    (tmp_path / "data" / "raw").mkdir(parents=True)
    for i in range(5):
        (tmp_path / "data" / "raw" / f"{i}.nii").write_bytes(bytes(300))
    spec.write_text(f'[delivery]\nname = "x"\nraw = "data/raw"\nstore = "data/x.zarr"\n\n{run}')
    assert small_delivery(spec) is small  # raw relative to the project root, as `load_spec` reads it


def test_a_small_delivery_is_small_before_anything_heavy_is_imported(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    script = ("import sys\nfrom pathlib import Path\nfrom labzarr.convert.run.small_run import small_delivery\n"
              f"print(small_delivery(Path({str(d.spec)!r})), sorted({{'numpy', 'dask'}} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "[]"], done.stderr[-2000:]


@pytest.mark.parametrize(("line", "says"), [
    ("in_process_files = -1", "must be >= 0 (0: always on a cluster)"),
    ("in_process_bytes = -5", "must be >= 0"),
    ("in_process_files = 2.5", "a whole number"),
])
def test_the_bounds_are_checked_as_any_setting(tmp_path: Path, line: str, says: str) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\n{line}\n")
    with pytest.raises(UsageError, match=r"\[run\]") as caught:
        load_spec(d.spec)
    assert says in str(caught.value)


def test_other_libraries_log_to_the_run_log_in_one_process() -> None:
    """What pydicom logs in a reader ("Invalid value for VR IS") a worker would log out of the console's sight; in
    one process it goes to the run log, and labzarr's own lines still show."""
    import io
    import logging

    from labzarr.convert.run.in_process import InProcessRunner

    shown = io.StringIO()
    handler = logging.StreamHandler(shown)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with InProcessRunner().warnings("run") as seen:
            logging.getLogger("pydicom").warning("Invalid value for VR IS: '1A'")
            logging.getLogger("labzarr.convert.run.driver").warning("an earlier run was interrupted")
        logging.getLogger("pydicom").warning("after the run")
    finally:
        root.removeHandler(handler)
    assert seen.collected() == ["WARNING logged by pydicom: Invalid value for VR IS: '1A'"]
    assert shown.getvalue().splitlines() == ["an earlier run was interrupted", "after the run"]
