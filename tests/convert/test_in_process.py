"""A small delivery converted without a cluster: in one process (`convert/run/in_process.py`), in worker processes
forked from it (`convert/run/forked.py`), in a child the command watches (`convert/run/small_run.py`).

The same store and manifest bytes as the cluster writes, both ways, for every kind of small delivery the suite
builds; the `labzarr` command converts such a delivery in a child with no dask imported, a tiny one in the child
alone, a larger one in workers forked from it; a reader that crashes or hangs there ends as its row on the
cluster, the rest kept.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from labzarr.convert import UsageError, convert_delivery, execute, load_spec, read_manifest
from labzarr.convert.demo import EXPECTED, write_spec
from labzarr.convert.run.small_run import Size, is_small, small_delivery
from labzarr.convert.spec import RunSpec
from labzarr.convert.spec_early import IN_PROCESS_BYTES, IN_PROCESS_FILES

from ..conftest import Delivery, make_delivery, seg_delivery
from ..dicom_data import ct_series, four_d
from ..faulty_readers import HANG_MAGIC, PLUGINS, SEGFAULT_MAGIC, WHERE_MAGIC, WHERE_PLUGINS
from ..outputs import run_outputs

_REPO = Path(__file__).resolve().parents[2]


def _both_ways(d: Delivery, on_cluster: Callable[[], object],
               without: Callable[[], object]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(the cluster's outputs, those `without` a cluster writes), each converted from scratch at the same paths:
    store files and the manifest folder's files."""
    outputs = []
    for convert in (on_cluster, without):
        shutil.rmtree(d.store, ignore_errors=True)
        for p in d.spec.parent.iterdir():
            if p != d.spec:
                p.unlink()
        convert()
        outputs.append(run_outputs(d.store, d.spec.parent))
    return outputs[0], outputs[1]


def _forked(spec: Path, workers: int) -> None:
    """`convert_delivery(..., in_process=True, workers=...)` in a fresh interpreter: the runner forks its workers
    from a process running one thread, which this one (its dask client's threads) is not."""
    script = ("import sys\nfrom pathlib import Path\nfrom labzarr.convert import convert_delivery\n"
              f"convert_delivery(Path({str(spec)!r}), in_process=True, workers={workers})\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


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
@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "forked-workers"])
def test_a_run_without_a_cluster_writes_the_clusters_bytes(tmp_path: Path, dask_client: object,
                                                           build: Callable[[Path], Delivery], workers: int) -> None:
    d = build(tmp_path)
    without = ((lambda: convert_delivery(d.spec, in_process=True)) if workers == 1
               else (lambda: _forked(d.spec, workers)))
    cluster, local = _both_ways(d, lambda: execute(load_spec(d.spec), dask_client), without)  # type: ignore[arg-type]
    assert sorted(local) == sorted(cluster)
    assert [k for k in cluster if local[k] != cluster[k]] == []
    assert any(k.endswith("manifest.csv") for k in local) and any("/volumes/" in k or "/stacks/" in k for k in local)


def test_forked_workers_need_a_process_running_one_thread(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        with pytest.raises(UsageError, match=r"forked from this one, which runs \d+ threads") as raised:
            convert_delivery(d.spec, in_process=True, workers=2)
    finally:
        stop.set()
        other.join()
    assert "workers=1" in raised.value.hint
    assert not (d.spec.parent / "manifest.csv").exists()


def _where(row: dict[str, str]) -> tuple[int, int, bool]:
    said = dict(part.split("=", 1) for part in row["detail"].split() if "=" in part)
    return int(said["pid"]), int(said["ppid"]), said["dask"] == "True"


def _command(spec: Path, *options: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}  # the test readers, as `tests.faulty_readers`
    return subprocess.Popen([sys.executable, "-m", "labzarr", "convert", str(spec), *options], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=_REPO)


def test_the_command_converts_a_tiny_delivery_in_one_child_without_dask(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nreaders = {json.dumps(WHERE_PLUGINS)}\n")
    (d.raw / "case_950.bin").write_bytes(WHERE_MAGIC + bytes(100))
    assert small_delivery(d.spec) == _size(d.raw)
    command = _command(d.spec, "--quiet")
    out, err = command.communicate(timeout=300)
    assert (command.returncode, out, err) == (0, "", "")
    rows = {r["source"]: r for r in read_manifest(d.spec.parent / "manifest.csv")}
    pid, parent, dask = _where(rows.pop("case_950.bin"))
    # A child of the command (the command starts again in place, execve: its pid is the one started here).
    assert pid != command.pid and parent == command.pid and not dask
    assert {s: (r["status"], r["reason"]) for s, r in rows.items()} == dict(EXPECTED)


def _size(raw: Path) -> Size:
    files = [p for p in raw.rglob("*") if p.is_file()]
    return Size(len(files), sum(p.stat().st_size for p in files))


def _padded(d: Delivery, files: int, size: int = 100) -> list[str]:
    """`files` files of `size` bytes of the test reader that says where it ran, added to `d`'s raw folder: past a
    tiny delivery's bounds, which the run then converts in forked workers. Their names."""
    names = [f"case_{960 + i}.bin" for i in range(files)]
    for i, name in enumerate(names):
        (d.raw / name).write_bytes(WHERE_MAGIC + i.to_bytes(4, "big") + bytes(size))  # not each other's duplicates
    return names


def test_the_command_converts_a_small_delivery_in_forked_workers_without_dask(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nreaders = {json.dumps(WHERE_PLUGINS)}\n")
    names = _padded(d, 40)
    size = small_delivery(d.spec)
    assert size is not None and not size.tiny()
    command = _command(d.spec, "--quiet", "--workers", "2")
    out, err = command.communicate(timeout=300)
    assert (command.returncode, out, err) == (0, "", "")
    rows = {r["source"]: r for r in read_manifest(d.spec.parent / "manifest.csv")}
    where = {_where(rows.pop(name)) for name in names}
    assert {dask for _, _, dask in where} == {False}
    # Each read in a worker forked from the command's child, none in the child or the command: two workers, one
    # parent, which is not the command.
    parents = {parent for _, parent, _ in where}
    assert len(parents) == 1 and command.pid not in parents | {pid for pid, _, _ in where}
    assert len({pid for pid, _, _ in where}) <= 2 and parents.isdisjoint(pid for pid, _, _ in where)
    assert {s: (r["status"], r["reason"]) for s, r in rows.items()} == dict(EXPECTED)


def test_a_delivery_over_the_bounds_converts_on_a_cluster(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nreaders = {json.dumps(WHERE_PLUGINS)}\nin_process_files = 5\n")
    (d.raw / "case_950.bin").write_bytes(WHERE_MAGIC + bytes(100))
    command = _command(d.spec, "--quiet", "--workers", "1")
    out, err = command.communicate(timeout=300)
    assert (command.returncode, out, err) == (0, "", "")
    row = next(r for r in read_manifest(d.spec.parent / "manifest.csv") if r["source"] == "case_950.bin")
    assert _where(row)[2]  # a dask worker's


@pytest.mark.parametrize("forked", [False, True], ids=["in-the-child", "in-a-forked-worker"])
def test_a_crash_or_a_hang_without_a_cluster_ends_as_its_row_on_the_cluster(tmp_path: Path, forked: bool) -> None:
    d = make_delivery(tmp_path, extra=f"\n[run]\nitem_timeout = 3\ncrash_retries = 1\n"
                                      f"readers = {json.dumps(PLUGINS + WHERE_PLUGINS)}\n")
    (d.raw / "case_901.dcm").write_bytes(SEGFAULT_MAGIC + bytes(range(256)))
    (d.raw / "case_902.jpg").write_bytes(HANG_MAGIC + bytes(range(256)))
    (d.raw / "case_950.bin").write_bytes(WHERE_MAGIC + bytes(100))
    padding = _padded(d, 1, size=9 << 20) if forked else []  # one file: the cluster's rerun as in the child
    size = small_delivery(d.spec)
    assert size is not None and size.tiny() is not forked
    command = _command(d.spec, "--workers", "2")
    out, err = command.communicate(timeout=300)
    assert command.returncode == 0, err[-3000:]
    # The run stopped on whichever of the two came first; one line says so, and the cluster took over.
    died = "a worker process was killed by SIGSEGV" if forked else "killed by SIGSEGV"
    assert f"the conversion without a cluster stopped ({died})" in err or (
        "the conversion without a cluster stopped (no progress for 4.5 s)" in err), err
    assert err.count("converting on a cluster, where only the item at fault is lost") == 1, err
    assert "Traceback" not in err and "Fatal Python error" not in err, err
    rows = {r["source"]: r for r in read_manifest(d.spec.parent / "manifest.csv")}
    crash, hang, where = rows.pop("case_901.dcm"), rows.pop("case_902.jpg"), rows.pop("case_950.bin")
    assert (crash["status"], crash["reason"]) == ("rejected", "decoder_crash")
    assert "died while decoding this item, 2 of 2 attempts" in crash["detail"]
    assert (hang["status"], hang["reason"]) == ("rejected", "timeout")
    assert "no result after 3 s" in hang["detail"]
    assert _where(where)[2]  # converted again on the cluster: the final verdict is the cluster's
    for name in padding:
        assert (rows.pop(name)["reason"]) == "unsupported_format"
    assert {s: (r["status"], r["reason"]) for s, r in rows.items()} == dict(EXPECTED)  # nothing else lost


def test_what_counts_as_small(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    (raw / "a" / "b").mkdir(parents=True)
    for i in range(3):
        (raw / "a" / "b" / f"{i}.bin").write_bytes(bytes(100))
    (raw / "top.bin").write_bytes(bytes(50))
    assert is_small(raw, files=4, size=350) == Size(4, 350)
    assert is_small(raw, files=3, size=10_000) is None  # one file too many, wherever it lies
    assert is_small(raw, files=100, size=349) is None  # one byte too many
    assert is_small(raw, files=0, size=10_000) is None  # 0: always a cluster
    assert is_small(tmp_path / "missing", files=100, size=10_000) is None  # left to the run, which says what is wrong
    # Tiny (converted in the child alone): one probe batch of files, a few MB.
    assert Size(64, 8 << 20).tiny() and not Size(65, 100).tiny() and not Size(1, (8 << 20) + 1).tiny()
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
    assert (small_delivery(spec) == Size(5, 1500)) is small  # raw relative to the project root, as `load_spec` reads it


def test_a_small_delivery_is_small_before_anything_heavy_is_imported(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    script = ("import sys\nfrom pathlib import Path\nfrom labzarr.convert.run.small_run import small_delivery\n"
              f"print(small_delivery(Path({str(d.spec)!r})), sorted({{'numpy', 'dask'}} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout == f"{_size(d.raw)} []\n", done.stderr[-2000:]


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
