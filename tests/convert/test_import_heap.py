"""A run without a cluster imports its runner, the jobs' modules and the writers with the collector off, and
freezes what they made (convert/run/import_heap.py)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from labzarr.convert.run.import_heap import importing


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the collections that start while the test runs."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()  # what the tests froze goes back, as a run's `_heap_frozen` hands its heap back


def test_the_collector_is_off_inside_and_what_was_made_is_frozen_after(collections: list[int]) -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with importing():
        assert not gc.isenabled()
        made = [[i] for i in range(50_000)]  # containers enough for many young collections, had it been on
    assert collections == []
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)


def test_a_caller_holding_the_collector_keeps_it_held_and_nothing_is_frozen(collections: list[int]) -> None:
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        with importing():
            made = [[i] for i in range(1_000)]
        held, during = not gc.isenabled(), list(collections)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.enable()
    assert held and made and during == []


def test_an_error_inside_still_turns_the_collector_on_again() -> None:
    with pytest.raises(ImportError), importing():
        import labzarr.no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert gc.isenabled()
    gc.unfreeze()


_RUNNER = """
import gc, json, sys
from labzarr.convert.run.driver import load_spec  # the driver, as the command has imported it before the run
starts = []
gc.callbacks.append(lambda phase, info: starts.append(info["generation"]) if phase == "start" else None)
from labzarr.convert.run.import_heap import importing
with importing():
    from labzarr.convert.run.forked import ForkedRunner  # as `convert_delivery` imports it
with ForkedRunner(2) as runner:
    during = list(starts)
    frozen = gc.get_freeze_count()
    zarr = "zarr" in sys.modules and "pydicom" in sys.modules
print(json.dumps([during, frozen, zarr, gc.isenabled()]))
"""


def test_the_forked_runner_imports_the_jobs_and_writers_without_a_collection() -> None:
    done = subprocess.run([sys.executable, "-c", _RUNNER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    during, frozen, imported, enabled = json.loads(done.stdout.strip().splitlines()[-1])
    assert imported  # the writers (zarr) and the readers' pydicom came in while entering it
    assert during == []  # no collection while importing them
    assert frozen > 100_000 and enabled
