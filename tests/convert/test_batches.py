"""How small volumes are grouped into tasks (`convert/run/batches.py`); what a failing batch costs is in
test_faults.py (a segfault and a hang among batched items)."""

from __future__ import annotations

from labzarr.convert.plan.build import VolumeTask
from labzarr.convert.run.batches import _MOST, _SMALL_BYTES, batch_volumes


def _tasks(n: int, size: int, prefix: str = "c") -> list[VolumeTask]:
    return [VolumeTask(item_id=f"{prefix}{i}", source=f"{prefix}{i}.nii", path=f"/raw/{prefix}{i}.nii", kind="nifti",
                       sha256=f"{i:064x}", array=f"volumes/{prefix}{i}/0", size=size) for i in range(n)]


def test_small_items_share_tasks_and_every_worker_still_gets_several() -> None:
    small = _tasks(40, 150_000)
    alone, batches = batch_volumes(small, workers=2)
    assert alone == [] and [len(b.tasks) for b in batches] == [5] * 8  # 4 batches a worker at least
    assert [t for b in batches for t in b.tasks] == small  # each item once, in plan order


def test_large_items_and_few_small_ones_run_alone() -> None:
    large, small = _tasks(3, _SMALL_BYTES + 1, "big"), _tasks(7, 1000)
    alone, batches = batch_volumes([*large, *small], workers=2)
    assert alone == [*large, *small] and batches == []  # 7 small items spread over 2 workers: one a task


def test_a_batch_holds_at_most_a_few_items_and_none_of_one() -> None:
    small = _tasks(1001, _SMALL_BYTES)
    alone, batches = batch_volumes(small, workers=2)
    assert {len(b.tasks) for b in batches} == {_MOST} and alone == [small[-1]]  # 125 batches, one left over
    assert sorted(t.item_id for t in [*alone, *(t for b in batches for t in b.tasks)]) == sorted(
        t.item_id for t in small)
