"""Windowed submission (`convert/run/window.py`, `[run] window`): the scheduler holds a window of tasks, and the
run's manifest and store are those of a run that submits everything at once."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client
from PIL import Image

from labzarr.convert import load_spec
from labzarr.convert.demo import write_demo, write_spec
from labzarr.convert.progress import ProgressEvent
from labzarr.convert.run.cluster import local_cluster
from labzarr.convert.run.driver import execute
from labzarr.convert.run.on_cluster import ClusterRunner
from labzarr.convert.run.window import Feeder, window_size
from labzarr.loaders import open_store

from ..conftest import Delivery
from ..corpus._util import jpeg, put

SMALL = 5  # tasks in flight in the windowed run: the least 2 single-threaded workers allow (window.py)
WHOLE = 100_000  # larger than the delivery's jobs: everything submitted at once, as before windows


def _delivery(root: Path, window: int) -> Delivery:
    """The demo (volumes, several to a batch, and bad files), 600 RGB tiles and 40 grey PNGs (a shard each)."""
    extra = f"\n[run]\nwindow = {window}\n"
    raw = write_demo(root / "raw")
    d = Delivery(raw=raw, store=root / "store.zarr",
                 spec=write_spec(root / "m" / "delivery.toml", raw=raw, store=root / "store.zarr", name="w",
                                 labels=False, extra=extra))
    for i in range(600):
        put(d.raw, f"tiles/tile_{i:05d}.jpg", jpeg(i))
    rng = np.random.default_rng(1)
    for i in range(40):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(buf, format="PNG")
        put(d.raw, f"grey/g_{i:03d}.png", buf.getvalue())
    return d


def _arrays(store: Path) -> dict[str, zarr.Array]:
    root = zarr.open_group(store, mode="r")
    out: dict[str, zarr.Array] = {}
    for group in ("volumes", "stacks"):
        sub = root[group]
        assert isinstance(sub, zarr.Group)
        out |= {f"{group}/{n}": a for n, a in sub.members(max_depth=None) if isinstance(a, zarr.Array)}
    return out


def _held_by_scheduler(client: Client, seen: list[tuple[str, int]]) -> Callable[[ProgressEvent], None]:
    """A progress callback recording how many tasks the scheduler holds at each event, by phase."""
    def count(dask_scheduler) -> int:  # type: ignore[no-untyped-def]
        return len(dask_scheduler.tasks)

    return lambda event: seen.append((event.phase, client.run_on_scheduler(count)))


def test_windowed_submission_changes_nothing(tmp_path: Path) -> None:
    small, whole = _delivery(tmp_path / "small", SMALL), _delivery(tmp_path / "whole", WHOLE)
    held: dict[int, list[tuple[str, int]]] = {SMALL: [], WHOLE: []}
    with local_cluster(2, crash_retries=1) as cluster, Client(cluster) as client:  # its own: it counts tasks
        results = {window: execute(load_spec(d.spec), client, progress=_held_by_scheduler(client, held[window]))
                   for window, d in ((SMALL, small), (WHOLE, whole))}
    assert sum(r.status == "ok" for r in results[SMALL].rows) > 600
    assert small.spec.parent.joinpath("manifest.csv").read_bytes() == \
        whole.spec.parent.joinpath("manifest.csv").read_bytes()
    a, b = _arrays(small.store), _arrays(whole.store)
    assert sorted(a) == sorted(b) and any(n.startswith("stacks/") for n in a)
    for name in a:
        attrs = [{k: v for k, v in x[name].attrs.items() if k != "records"} for x in (a, b)]  # this run's id
        assert attrs[0] == attrs[1], name
        np.testing.assert_array_equal(a[name][...], b[name][...], err_msg=name)
    assert open_store(small.store).items == open_store(whole.store).items
    # The windowed run's scheduler held its window; the unbounded run's held every probe batch at once.
    probing = {w: max(n for phase, n in held[w] if phase == "probe") for w in held}
    assert probing[SMALL] <= SMALL < probing[WHOLE], held
    assert max(n for phase, n in held[SMALL] if phase == "convert") <= SMALL, held[SMALL]


@pytest.mark.parametrize(("size", "in_flight", "want"), [
    (3, 0, [0, 1, 2]),
    (3, 2, [0]),
    (3, 3, []),
    (3, 5, []),
])
def test_feeder_tops_up_to_the_window(size: int, in_flight: int, want: list[int]) -> None:
    submitted: list[list[int]] = []

    def submit(batch):  # type: ignore[no-untyped-def]
        submitted.append(list(batch))
        return [f"future-{j}" for j in batch]

    feeder = Feeder(range(10), submit, size)
    got = feeder.top_up(in_flight)
    assert [job for _, job in got] == want and [f for f, _ in got] == [f"future-{j}" for j in want]
    assert submitted == ([want] if want else [])


def test_feeder_submits_every_job_once_in_order() -> None:
    feeder = Feeder(range(7), lambda batch: [f"f{j}" for j in batch], 3)  # type: ignore[arg-type, misc]
    order = [job for _, job in feeder.top_up(0)]
    while not feeder.exhausted:
        order += [job for _, job in feeder.top_up(2)]  # one finished each time
    assert order == list(range(7)) and feeder.top_up(0) == []


def test_window_size_keeps_dask_queuing_on(dask_client) -> None:
    """On the suite's cluster (2 single-threaded workers): the default, a setting, and the floor a setting
    never goes under (twice the threads plus one: dask queues only a task group larger than twice the threads)."""
    threads = ClusterRunner(dask_client).threads()
    assert threads == 2
    assert window_size(threads, 0) == 32
    assert window_size(threads, 100) == 100
    assert window_size(threads, 1) == 5
    assert window_size(16, 0) == 64  # four a thread, once that is more than the smallest window
