"""The task boundary (`convert/run/boundary.py`): every kind of job ends the same way for each kind of failure.

Each job kind -- a volume, a part of a volume written in parts, a sample, a shard of 2D images -- is built by the real
planner and staged as the driver stages it, then run through its worker function with a decoder that fails
as the case says (`tests/boundary_readers.py`): a refusal, a MemoryError and a decoder bug become the item's
rejected row; a read-only store escapes as `StoreWriteError` (the run stops, no item is blamed); a segfault
kills a real process, and the driver's side turns its fault report into a `decoder_crash` row.
"""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import Row, check_delivery, load_spec
from labzarr.convert.plan.build import VOLUMES
from labzarr.convert.plan.parts import VolumePart
from labzarr.convert.plan.stacks import STACKS
from labzarr.convert.run.boundary import Job, crashed
from labzarr.convert.run.part_task import convert_part, finish_parts, stage_parts
from labzarr.convert.run.sample_task import convert_sample
from labzarr.convert.run.settings import TaskSettings
from labzarr.convert.run.shard_task import convert_shard
from labzarr.convert.run.volume_task import convert_item
from labzarr.convert.write.arrays import StoreWriteError, open_root
from labzarr.convert.write.stacks import stage_stacks
from labzarr.convert.write.state import ensure_state
from labzarr.readers import Reason
from labzarr.store import Folder

from ..boundary_readers import PLUGINS, case_file
from ..tmpfs import mounted_tmpfs

KINDS = ("volume", "part", "sample", "shard")
REJECTED = {
    "rejected": (Reason.CORRUPT_DATA, "the test decoder refused this file"),
    "memory": (Reason.TOO_LARGE, "out of memory while decoding: cannot allocate 9 EiB"),
    "crash": (Reason.DECODER_CRASH, "ValueError: a decoder bug"),
}


@dataclass(frozen=True)
class Runner:
    """One job run as the worker runs it (picklable: a spawned process runs it too); returns its item rows."""

    kind: str
    job: Job
    settings: TaskSettings
    parts: tuple[VolumePart, ...] = ()
    folder: str = ""
    records: str = ""

    def __call__(self) -> list[Row]:
        if self.kind == "volume":
            return [convert_item(self.job, self.settings)]  # type: ignore[arg-type]
        if self.kind == "part":
            return [finish_parts(self.parts, [convert_part(p, self.settings) for p in self.parts], self.settings)]
        if self.kind == "sample":
            return [convert_sample(self.job, self.settings)]  # type: ignore[arg-type]
        return convert_shard(self.job, self.settings, folder=self.folder, records=self.records)  # type: ignore[arg-type]

    def array(self) -> str:
        """Where the job's item would be installed."""
        job = self.job
        if isinstance(job, VolumePart):
            return job.task.array
        return getattr(job, "group", None) or getattr(job, "array", None) or job.stack.array  # type: ignore[union-attr]


def _prepare(tmp_path: Path, store_root: Path, kind: str, case: str) -> Runner:
    raw = tmp_path / "raw"
    items = "[items]\nid_pattern = '(?P<id>case_\\d+)'\n"
    if kind == "shard":
        case_file(raw / "case_001.img", case, planar=True)
    elif kind == "sample":
        items += "roles = { image = '*_img*', mask = '*_seg*' }\n"
        case_file(raw / "case_001_img.case", case)
        nib.save(nib.Nifti1Image(np.zeros((8, 8, 40), np.uint8), np.eye(4)), raw / "case_001_seg.nii")
    else:
        case_file(raw / "case_001.case", case)
    readers = ", ".join(f'"{p}"' for p in PLUGINS)
    spec_path = tmp_path / "manifests" / "b" / "delivery.toml"
    spec_path.parent.mkdir(parents=True)
    spec_path.write_text(f'[delivery]\nname = "b"\nraw = "{raw}"\nstore = "{store_root / "s.zarr"}"\n\n{items}\n'
                         f"[store]\nchunks = [8, 8, 8]\n\n[run]\nreaders = [{readers}]\n")
    spec = load_spec(spec_path, root=tmp_path)
    plan = check_delivery(spec_path, root=tmp_path).plan
    store = spec.delivery.store
    assert isinstance(store, Folder)
    ensure_state(store)
    root = open_root(store)
    for group in (VOLUMES, STACKS):
        root.create_group(group)
    settings = TaskSettings(store=str(store), store_spec=spec.store, limits=spec.validate.limits(),
                            non_finite=spec.validate.non_finite, masks=spec.masks, fingerprint="test",
                            readers=spec.run.readers, crash_reports=str(tmp_path / "reports"))
    if kind == "volume":
        (task,) = plan.tasks
        return Runner(kind, task, settings)
    if kind == "part":
        (task,) = plan.tasks
        parts = stage_parts(store, task, settings, workers=2, parts_bytes=1024)
        assert len(parts) == 2
        return Runner(kind, parts[0], settings, parts=parts)
    if kind == "sample":
        (sample,) = plan.samples
        return Runner(kind, sample, settings)
    (shard,) = plan.shards
    staged = stage_stacks(store, plan, spec)[shard.stack.array]
    return Runner(kind, shard, settings, folder=str(staged.folder), records=str(staged.records))


@pytest.fixture
def read_only_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs, remounted read-only by the test once the job is staged."""
    with mounted_tmpfs(tmp_path / "fs", "16m") as mount:
        yield mount


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(REJECTED))
def test_a_failing_decoder_rejects_its_item(tmp_path: Path, kind: str, case: str) -> None:
    runner = _prepare(tmp_path, tmp_path, kind, case)
    rows = runner()
    reason, detail = REJECTED[case]
    assert [(r.item_id, r.status, r.reason) for r in rows] == [("case001", "rejected", reason)], rows
    assert detail in rows[0].detail
    store = Path(runner.settings.store)
    if kind != "shard":  # a shard's stack is the driver's to install; its slot stays zero
        assert not (store / runner.array() / "zarr.json").exists()
    assert not list((tmp_path / "reports").glob("*.txt"))  # a finished job removes its fault report


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_error_escapes_and_blames_no_item(tmp_path: Path, read_only_fs: Path, kind: str) -> None:
    runner = _prepare(tmp_path, read_only_fs, kind, "ok")
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_fs)], check=True)
    with pytest.raises(StoreWriteError, match="Read-only file system"):
        runner()


@pytest.mark.parametrize("kind", KINDS)
def test_a_segfault_kills_the_process_and_its_report_names_the_frame(tmp_path: Path, kind: str) -> None:
    runner = _prepare(tmp_path, tmp_path, kind, "segfault")
    child = multiprocessing.get_context("spawn").Process(target=runner)
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGSEGV
    rows = crashed(runner.job, tmp_path / "reports", None)
    assert [(r.item_id, r.status, r.reason) for r in rows] == [("case001", "rejected", Reason.DECODER_CRASH)]
    detail = rows[0].detail
    assert "the worker process died while decoding this item, 1 of 1 attempts" in detail
    assert "Segmentation fault in string_at (ctypes/__init__.py:" in detail, detail
    assert "<- fail (tests/boundary_readers.py:" in detail, detail  # the decoder's frame, from the fault report
    assert not list((tmp_path / "reports").glob("*.txt"))  # read once, then removed
