"""One big volume written by several workers (`[run] parts_bytes`): the same store, rows and rejections as one task.

The deliveries here use thin shards (4 planes) so that small real files stream as many slabs,
and `parts_bytes = 1` so every streamed volume is written in parts across the two workers.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import convert_delivery, load_spec
from labzarr.convert.plan.parts import part_slabs
from labzarr.convert.run import part_task
from labzarr.convert.run.driver import execute
from labzarr.convert.run.part_task import DICOM_PARTS_DIVISOR
from labzarr.readers import Reason

from ..dicom_data import ct_series, four_d
from ..faulty_readers import SLAB_PLUGINS, SLAB_SEGFAULT_MAGIC

MiB = 1 << 20


# -- planning -------------------------------------------------------------------------------------------------------

def test_parts_cover_every_slab_once_in_file_order() -> None:
    for slabs, volume_bytes, workers in [(16, 2100 * MiB, 2), (23, 5000 * MiB, 8), (5, 10_000 * MiB, 8),
                                         (3, 600 * MiB, 2), (100, 513 * MiB, 4)]:
        ranges = part_slabs(slabs, volume_bytes, workers=workers, parts_bytes=512 * MiB)
        assert ranges[0][0] == 0 and ranges[-1][1] == slabs
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no slab twice
        assert all(stop > first for first, stop in ranges)
        assert 2 <= len(ranges) <= min(workers, slabs)
        sizes = [stop - first for first, stop in ranges]
        assert max(sizes) - min(sizes) <= 1  # balanced


def test_part_sizes_follow_parts_bytes() -> None:
    assert part_slabs(16, 2100 * MiB, workers=2, parts_bytes=512 * MiB) == ((0, 8), (8, 16))
    assert len(part_slabs(64, 2100 * MiB, workers=8, parts_bytes=512 * MiB)) == 5  # ceil(2100 / 512)
    assert len(part_slabs(64, 2100 * MiB, workers=8, parts_bytes=1)) == 8  # one part per worker at most


@pytest.mark.parametrize(("slabs", "volume_bytes", "workers", "parts_bytes"), [
    (16, 2100 * MiB, 1, 512 * MiB),  # one worker
    (16, 2100 * MiB, 4, 0),  # parts_bytes 0: never
    (16, 512 * MiB, 4, 512 * MiB),  # not more than parts_bytes
    (1, 2100 * MiB, 4, 512 * MiB),  # a single slab cannot be shared
])
def test_one_part(slabs: int, volume_bytes: int, workers: int, parts_bytes: int) -> None:
    assert part_slabs(slabs, volume_bytes, workers=workers, parts_bytes=parts_bytes) == ((0, slabs),)


# -- conversion -----------------------------------------------------------------------------------------------------

def _nifti(path: Path, data: np.ndarray, affine: np.ndarray) -> Path:
    nib.save(nib.Nifti1Image(data, affine), path)
    return path


def _write_delivery(raw: Path) -> dict[str, str]:
    """Real NIfTI and DICOM files, good and bad; returns the expected status (or reason) per item."""
    raw.mkdir(parents=True)
    rng = np.random.default_rng(7)
    flipped = np.diag([-0.8, 0.8, -1.5, 1.0])
    ct = rng.normal(0, 300, (40, 36, 90)).astype(np.int16)
    _nifti(raw / "case001.nii.gz", ct, flipped)
    _nifti(raw / "case002.nii", rng.normal(0, 1, (30, 20, 50)).astype(np.float32), np.diag([1.0, 1.0, 2.0, 1.0]))
    nan = rng.normal(0, 1, (30, 20, 50)).astype(np.float32)
    nan[3, 4, 41], nan[7, 1, 44] = np.nan, np.inf  # only in the last part of the file
    _nifti(raw / "case003.nii.gz", nan, np.eye(4))
    whole = _nifti(raw / "case004.nii.gz", ct, np.eye(4)).read_bytes()
    (raw / "case004.nii.gz").write_bytes(whole[: int(len(whole) * 0.8)])  # an interrupted copy
    bad_crc = bytearray(whole)
    bad_crc[-8] ^= 0xFF  # the gzip trailer's CRC32: only the end of the stream shows it
    (raw / "case005.nii.gz").write_bytes(bytes(bad_crc))
    _nifti(raw / "case006.nii.gz", rng.integers(0, 4000, (24, 20, 30, 2)).astype(np.uint16), flipped)  # 2 channels
    four_d(raw / "case007")  # 3 time points of CT5N's 5 real slices
    ct_series(raw / "case008", "case008")
    (raw / "case009.nii.gz").write_bytes(gzip.compress(np.zeros(100, np.uint8).tobytes()))  # not a NIfTI
    return {"case001": "ok", "case002": "ok", "case003": "non_finite", "case004": "truncated",
            "case005": "corrupt_data", "case006": "ok", "case007": "ok", "case008": "ok",
            "case009": "unsupported_format"}


def _spec(root: Path, raw: Path, *, parts_bytes: int, non_finite: str = "reject", readers: str = "[]") -> Path:
    path = root / "manifests" / "parts" / "delivery.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'[delivery]\nname = "parts"\nraw = "{raw}"\nstore = "{root / "store.zarr"}"\n\n'
        "[items]\nid_pattern = '(?P<id>case\\d+)'\n\n"
        "[store]\nchunks = [16, 16, 2]\nshards = [32, 32, 4]\ncompressor = \"blosc-lz4\"\nlevel = 5\n\n"
        f'[validate]\nnon_finite = "{non_finite}"\n\n'
        f"[run]\nparts_bytes = {parts_bytes}\nreaders = {readers}\n")
    return path


def _volume_files(store: Path) -> dict[str, bytes]:
    """Every file of every volume array (metadata and chunks), by path."""
    root = store / "volumes"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def parts_and_whole(tmp_path_factory: pytest.TempPathFactory, dask_client):
    base = tmp_path_factory.mktemp("parts")
    raw = base / "raw"
    expected = _write_delivery(raw)
    whole = execute(load_spec(_spec(base / "whole", raw, parts_bytes=0), root=base), dask_client)
    in_parts = execute(load_spec(_spec(base / "parts", raw, parts_bytes=1), root=base), dask_client)
    return base, expected, whole, in_parts


def test_volumes_in_parts_store_the_same_bytes_as_one_task(parts_and_whole) -> None:
    base, expected, whole, in_parts = parts_and_whole
    streamed = [i for i in expected if i not in ("case009",)]
    assert whole.run_log["run"]["parts"] == 0
    assert in_parts.run_log["run"]["parts"] == len(streamed)  # every streamed volume, bad ones too, went in parts
    assert in_parts.manifest.read_bytes() == whole.manifest.read_bytes()
    files = _volume_files(base / "parts" / "store.zarr")
    assert files == _volume_files(base / "whole" / "store.zarr")
    assert any(name.startswith("case001/0/c/") for name in files)  # chunk files, not only metadata
    # The parts' statistics, absorbed in file order, are exactly those of one task (they are in the attrs too)
    stats = {r.item_id: r.stats for r in whole.rows if r.status == "ok"}
    assert all(s is not None and s.channels[0].count for s in stats.values())
    assert {r.item_id: r.stats for r in in_parts.rows if r.status == "ok"} == stats
    # Nothing staged is left behind, for the ok volumes nor for the rejected ones.
    assert not any((base / "parts" / "store.zarr" / ".labzarr" / "staging").iterdir())


def test_rejections_in_parts_are_those_of_one_task(parts_and_whole) -> None:
    _, expected, whole, in_parts = parts_and_whole
    got = {r.item_id: (r.status if r.status == "ok" else r.reason.value) for r in in_parts.rows if r.reason or
           r.status == "ok"}
    assert got == expected
    by_id = {r.item_id: r for r in in_parts.rows}
    assert "2 of 30,000 voxels are NaN/Inf (first at (c,x,y,z) = (0, 3, 4, 41))" in by_id["case003"].detail
    assert "Incorrect checksum" in by_id["case005"].detail  # found by the last part, at the end of the stream
    assert [(r.item_id, r.detail) for r in in_parts.rows] == [(r.item_id, r.detail) for r in whole.rows]


def test_a_volume_in_parts_equals_its_source(parts_and_whole) -> None:
    import zarr

    base, _, _, in_parts = parts_and_whole
    row = next(r for r in in_parts.rows if r.item_id == "case001")
    arr = zarr.open_array(base / "parts" / "store.zarr" / row.array, mode="r")
    want = np.asanyarray(nib.as_closest_canonical(nib.load(base / "raw" / "case001.nii.gz")).dataobj)
    np.testing.assert_array_equal(arr[0], want)
    assert arr.attrs["complete"] == row.sha256


def test_a_rerun_reuses_volumes_in_parts(parts_and_whole, dask_client) -> None:
    base, _, _, in_parts = parts_and_whole
    again = execute(load_spec(base / "parts" / "manifests" / "parts" / "delivery.toml", root=base), dask_client)
    assert again.run_log["run"] == {"converted": 0, "unchanged": in_parts.run_log["run"]["converted"], "parts": 0}
    assert again.manifest.read_bytes() == in_parts.manifest.read_bytes()


def test_non_finite_warning_counts_every_part(tmp_path: Path, dask_client) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    data = np.ones((30, 20, 50), np.float32)
    data[5, 6, 2], data[9, 9, 47] = np.nan, np.nan  # one in the first part, one in the last
    _nifti(raw / "case001.nii.gz", data, np.eye(4))
    rows = {}
    for parts_bytes in (0, 1):
        result = execute(load_spec(_spec(tmp_path / str(parts_bytes), raw, parts_bytes=parts_bytes,
                                         non_finite="warn"), root=tmp_path), dask_client)
        assert result.run_log["run"]["parts"] == parts_bytes
        (rows[parts_bytes],) = result.rows
    assert rows[1] == rows[0] and rows[1].status == "ok"
    assert any("2 of 30,000 voxels are NaN/Inf (first at (c,x,y,z) = (0, 5, 6, 2))" in w for w in rows[1].warnings)


def test_a_part_whose_worker_dies_costs_its_volume_only(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "case001.crash").write_bytes(SLAB_SEGFAULT_MAGIC)
    _nifti(raw / "case002.nii.gz", np.arange(40 * 36 * 90, dtype=np.int32).reshape(40, 36, 90), np.eye(4))
    # Its own cluster, set up as `convert` sets it (a worker holds only the task it runs): the shared test
    # cluster would let the dying worker take an innocent queued part down with it.
    result = convert_delivery(_spec(tmp_path, raw, parts_bytes=1, readers=json.dumps(SLAB_PLUGINS)), workers=2)
    assert result.run_log["run"]["parts"] == 2
    by_id = {r.item_id: r for r in result.rows}
    assert by_id["case002"].status == "ok", by_id["case002"].detail
    crashed = by_id["case001"]
    assert crashed.reason is Reason.DECODER_CRASH, crashed.detail
    assert "the worker process died" in crashed.detail and "Segmentation fault" in crashed.detail
    assert not any((tmp_path / "store.zarr" / ".labzarr" / "staging").iterdir())
    assert not (tmp_path / "store.zarr" / "volumes" / "case001").exists()
    assert sorted(os.listdir(tmp_path / "store.zarr" / "volumes")) == ["case002", "zarr.json"]


def test_a_dicom_series_is_in_parts_from_a_32nd_of_parts_bytes(parts_and_whole, dask_client) -> None:
    """A DICOM part reads only its own files (nothing to inflate up to its start), so a series is in parts from
    parts_bytes / DICOM_PARTS_DIVISOR, where a NIfTI volume of that size is still written by one task."""
    base, _, whole, _ = parts_and_whole
    dicom = {r.item_id: math.prod(r.shape) * np.dtype(r.dtype).itemsize for r in whole.rows if r.kind == "dicom"}
    assert len(dicom) == 2
    parts_bytes = DICOM_PARTS_DIVISOR * (min(dicom.values()) - 1)
    raw = base / "raw-eighth"
    for item in dicom:
        shutil.copytree(base / "raw" / item, raw / item)
    # A NIfTI volume over parts_bytes / DICOM_PARTS_DIVISOR and under parts_bytes, its file big enough to be looked at
    side = round((parts_bytes / 2 / 4) ** (1 / 3))
    noise = np.random.default_rng(1).normal(0, 1, (side, side, side)).astype(np.float32)
    _nifti(raw / "case010.nii", noise, np.eye(4))
    assert parts_bytes / DICOM_PARTS_DIVISOR < noise.nbytes < parts_bytes
    got = execute(load_spec(_spec(base / "eighth", raw, parts_bytes=parts_bytes), root=base), dask_client)
    assert [r.status for r in got.rows] == ["ok"] * 3
    assert got.run_log["run"]["parts"] == 2  # the two series, not the NIfTI volume
    whole_files = _volume_files(base / "whole" / "store.zarr")
    got_files = _volume_files(base / "eighth" / "store.zarr")
    assert {k: v for k, v in got_files.items() if k.split("/")[0] in dicom} == {
        k: v for k, v in whole_files.items() if k.split("/")[0] in dicom}
    assert any(k.startswith("case007/0/c/") for k in got_files)


def test_a_dicom_series_that_fits_one_part_is_not_opened_on_the_driver(parts_and_whole, dask_client,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a series is worth parts follows from the plan's stack alone when it fits one part: the driver then
    has none of its files read (each open reads a dataset and the acquisition metadata), and the store is the
    same."""
    base, _, whole, _ = parts_and_whole
    dicom = {r.item_id: math.prod(r.shape) * np.dtype(r.dtype).itemsize for r in whole.rows if r.kind == "dicom"}
    raw = base / "raw-fits"
    for item in dicom:
        shutil.copytree(base / "raw" / item, raw / item)
    opened: list[str] = []
    real = part_task.worth_opening

    def counted(task, settings, **kwargs):
        worth = real(task, settings, **kwargs)
        if worth:  # the driver has a worker open it (`driver._staged_parts`)
            opened.append(task.item_id)
        return worth

    monkeypatch.setattr(part_task, "worth_opening", counted)  # asked in this process, the driver
    smaller, larger = sorted(dicom, key=dicom.__getitem__)
    assert dicom[smaller] < dicom[larger]
    got = execute(load_spec(_spec(base / "fits", raw, parts_bytes=DICOM_PARTS_DIVISOR * dicom[smaller]), root=base),
                  dask_client)
    assert [r.status for r in got.rows] == ["ok"] * 2
    assert opened == [larger]  # only the series over a part is looked at, and it is written in parts
    assert got.run_log["run"]["parts"] == 1
    whole_files = _volume_files(base / "whole" / "store.zarr")
    assert _volume_files(base / "fits" / "store.zarr") == {k: v for k, v in whole_files.items()
                                                           if k.split("/")[0] in {*dicom, "zarr.json"}}
