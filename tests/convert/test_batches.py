"""How small volumes are grouped into tasks (`convert/run/batches.py`), and files into probe tasks; what a
failing batch costs is in test_faults.py (a segfault and a hang among batched items)."""

from __future__ import annotations

from labzarr.convert.plan.build import VolumeTask
from labzarr.convert.run.batches import _MOST, _SMALL_BYTES, batch_volumes
from labzarr.convert.run.driver import _probe_batches


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


def test_probe_batches_fill_every_round_of_the_workers() -> None:
    """At most 64 files a probe task, or 8 tasks a worker of at most 256 files for a larger delivery; as many tasks
    as a multiple of the workers, as even as can be, in order."""
    for n, workers, count, sizes in ((400, 2, 8, {50}), (640, 2, 10, {64}), (1024, 2, 16, {64}), (2000, 2, 16, {125}),
                                     (4376, 2, 18, {243, 244}), (20_000, 2, 80, {250}), (10, 2, 2, {5}),
                                     (3, 8, 3, {1}), (130, 3, 3, {43, 44}), (0, 2, 0, set())):
        batches = _probe_batches(list(range(n)), workers)
        assert (len(batches), {len(b) for b in batches}) == (count, sizes), n
        assert [f for b in batches for f in b] == list(range(n))
