"""Each task's share of the cores: workers x encoding threads <= cores, on every host of the cluster."""

from __future__ import annotations

import pytest

from labzarr.convert.run.in_process import InProcessRunner
from labzarr.convert.run.on_cluster import ClusterRunner
from labzarr.convert.run.settings import TaskSettings, threads_per_task, usable_cores
from labzarr.convert.spec import StoreSpec
from labzarr.convert.write.writer import DEFAULT_THREADS
from labzarr.readers import Limits


@pytest.mark.parametrize(("workers", "threads"), [
    pytest.param([("a", 1, 2)], 2, id="one-worker-two-cores"),
    pytest.param([("a", 1, 2), ("a", 1, 2)], 1, id="two-workers-two-cores"),
    pytest.param([("a", 1, 2)] * 3, 1, id="more-workers-than-cores-still-one"),
    pytest.param([("a", 2, 16), ("a", 2, 16)], 4, id="worker-threads-are-task-slots"),
    pytest.param([("a", 1, 16), ("a", 1, 16), ("b", 1, 2), ("b", 1, 2)], 1, id="the-tightest-host-decides"),
    pytest.param([], 1, id="no-workers"),
])
def test_threads_per_task_shares_each_hosts_cores(workers: list[tuple[str, int, int]], threads: int) -> None:
    assert threads_per_task(workers) == threads


def test_the_driver_shares_the_clusters_cores(dask_client: object) -> None:
    # the suite's cluster: 2 single-threaded workers on this host
    assert ClusterRunner(dask_client).encode_threads() == max(1, usable_cores() // 2)  # type: ignore[arg-type]


def test_a_run_in_process_is_the_one_task_on_this_host() -> None:
    assert InProcessRunner().encode_threads() == usable_cores()


def test_settings_without_a_share_use_the_writers_default() -> None:
    base = TaskSettings(store="s.zarr", store_spec=StoreSpec(), limits=Limits(), non_finite="reject")
    assert base.writer_threads() == DEFAULT_THREADS
    assert TaskSettings(store="s.zarr", store_spec=StoreSpec(), limits=Limits(), non_finite="reject",
                        threads=1).writer_threads() == 1


def test_other_libraries_log_to_the_run_log_on_a_cluster(dask_client: object) -> None:
    """What distributed's client logs in the driver during a run ("Couldn't gather 1 keys, rescheduling" after a
    worker died: its logger keeps a level of its own under the `distributed` one the command silences) goes to the
    run log, not the console; labzarr's own lines still show."""
    import io
    import logging

    shown = io.StringIO()
    handler = logging.StreamHandler(shown)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with ClusterRunner(dask_client).warnings("run") as seen:  # type: ignore[arg-type]
            logging.getLogger("distributed.client").warning("Couldn't gather %s keys, rescheduling %s", 1, ("k",))
            logging.getLogger("labzarr.convert.run.driver").warning("an earlier run was interrupted")
        logging.getLogger("distributed.client").warning("after the run")
    finally:
        root.removeHandler(handler)
    assert "WARNING logged by distributed.client: Couldn't gather 1 keys, rescheduling ('k',)" in seen.collected()
    lines = shown.getvalue().splitlines()  # (the client's own INFO lines, registering the plugin, aside)
    assert not [line for line in lines if "Couldn't gather" in line]
    assert lines[-2:] == ["an earlier run was interrupted", "after the run"]
