"""The embedded cluster's workers fork from a server that imported a task's modules (convert/run/worker_start.py),
with the environment a spawned worker would start with."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
from pathlib import Path

import dask
import pytest
from distributed import Worker

from labzarr.convert.run.cluster import local_cluster_config
from labzarr.convert.run.server_fork import forkable
from labzarr.convert.run.worker_start import PRELOAD, WORKER_MALLOC, pre_spawn_environ, worker_environ

_SALT = "labzarr"  # hashed by each worker: the hash seed its process started with, not only the variable
_BLOCK = 40 << 20  # above glibc's largest mmap threshold of its own (32 MiB), below WORKER_MALLOC's


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mapped_alone(size: int) -> bool:
    """Whether glibc gives a block of `size` bytes a mapping of its own (its mmap threshold is below `size`)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    try:
        return bool(libc.mallinfo2().hblkhd - before >= size)
    finally:
        libc.free(block)


def _worker_state() -> tuple[list[str], dict[str, str | None], int, int, int, bool, int, bool, bool, bool]:
    names = ("OMP_NUM_THREADS", "PYTHONHASHSEED", *WORKER_MALLOC)
    server = os.getppid()
    # The server's threads: one, or numpy's BLAS started a pool there (its thread count not set before numpy loaded).
    threads = int(next(line.split()[1] for line in Path(f"/proc/{server}/status").read_text().splitlines()
                       if line.startswith("Threads:")))
    # A server started by exec runs multiprocessing's forkserver as its command; a forked one, its driver's.
    forked = b"forkserver" not in Path(f"/proc/{server}/cmdline").read_bytes()
    return ([m for m in PRELOAD if m in sys.modules], {n: os.environ.get(n) for n in names}, server, hash(_SALT),
            threads, gc.isenabled(), gc.get_freeze_count(), _mapped_alone(_BLOCK), forked, "requests" in sys.modules)


def _hash_with_seed(seed: str) -> int:
    out = subprocess.run([sys.executable, "-c", f"print(hash({_SALT!r}))"], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": seed})
    return int(out.stdout)


_STATES = """
import json, os, sys
sys.path.insert(0, {tests!r})
if __name__ == "__main__":
    if {cli!r}:  # as `labzarr convert` starts it, having started again with the workers' seed
        from labzarr.convert.cli import _start_workers
        _start_workers()
    from distributed import Client
    from labzarr.convert.run.cluster import local_cluster
    from convert.test_worker_start import _worker_state
    with local_cluster(2, crash_retries=1) as cluster, Client(cluster) as client:
        client.submit(sum, [1, 2]).result()  # a task ran: its modules are loaded either way
        print(json.dumps([client.run(_worker_state), os.getpid(), os.environ.get("PYTHONHASHSEED")]))
"""



@pytest.mark.parametrize(("cli", "configured"), [(False, None), (True, None), (True, "123")],
                         ids=["started-by-the-cluster", "started-by-the-cli", "cli-with-a-configured-seed"])
def test_workers_start_with_their_modules_imported(tmp_path, cli: bool, configured: str | None) -> None:
    """In a process of its own: the worker server is per process, and a test process may have started one of
    its own kind already (a forkserver DataLoader), whose workers then import their modules themselves.

    `labzarr convert` starts again with dask's default hash seed where its caller set none (`hash_seed.py`)
    and forks the worker server from itself (`server_fork.py`). A hash seed in dask's configuration and not in the
    environment (`configured`) is found only once the configuration is read: the server is then started by exec,
    with the configured seed."""
    import json

    from labzarr.convert.run.hash_seed import CHOSEN

    assert PRELOAD[0] == "labzarr.convert.run._server_heap"
    assert PRELOAD[-1] == "labzarr.convert.run._server_exit"
    script = tmp_path / "states.py"
    script.write_text(_STATES.format(tests=str(Path(__file__).parents[1]), cli=cli))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if cli:  # as the command started again (`restart_with_workers_seed`)
        env |= {"PYTHONHASHSEED": "6640", CHOSEN: "1"}
    if configured:
        (tmp_path / "dask").mkdir()
        (tmp_path / "dask" / "seed.yaml").write_text(
            f"distributed:\n  nanny:\n    pre-spawn-environ:\n      PYTHONHASHSEED: '{configured}'\n")
        env["DASK_CONFIG"] = str(tmp_path / "dask")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True,
                         env=env)
    states, driver, driver_seed = json.loads(out.stdout.strip().splitlines()[-1])
    seed = configured or "6640"
    assert len(states) == 2
    for modules, worker_env, parent, hashed, threads, collecting, frozen, mapped, forked, requests in states.values():
        # The server's own exit module is imported by the server and by nothing a task runs.
        assert modules == list(PRELOAD)
        # As a spawned worker's.
        with dask.config.set(local_cluster_config(crash_retries=1)):
            pre_spawn = dask.config.get("distributed.nanny.pre-spawn-environ") | {"PYTHONHASHSEED": seed}
            expected = worker_environ(pre_spawn, {k: v for k, v in env.items() if k != "PYTHONHASHSEED"})
        assert worker_env == {k: v for k, v in expected.items() if k in worker_env}
        assert worker_env["OMP_NUM_THREADS"] == "1" and worker_env["PYTHONHASHSEED"] == seed == driver_seed
        assert hashed == _hash_with_seed(seed)  # the server started with it: its workers hash with it
        assert threads == 1  # the server set the BLAS thread count before numpy loaded
        assert parent != driver  # forked by the server, not by the driver
        # The server imported with its collector off, then froze what it imported (`_server_heap`): a worker
        # collects, and leaves the server's hundreds of thousands of objects out of its collections.
        assert collecting and frozen > 100_000
        # As glibc reads MALLOC_MMAP_THRESHOLD_ at a spawned worker's start: a forked server sets it with `mallopt`.
        assert not mapped
        assert forked == (cli and configured is None)
        assert not requests  # pydicom loaded without it (`_lean_pydicom`)


def test_only_variables_read_at_start_that_nothing_sets_later_keep_the_server_from_being_forked() -> None:
    started = {"PYTHONHASHSEED": "6640", "MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "4", "HOME": "/h"}
    same = dict(started)
    assert forkable(started, same) == frozenset()
    # mallopt sets the malloc thresholds in the server; the BLAS counts are read when numpy loads.
    assert forkable(started, {**same, "MALLOC_TRIM_THRESHOLD_": "67108864", "MALLOC_MMAP_THRESHOLD_": "67108864",
                              "OMP_NUM_THREADS": "1"}) == frozenset()
    assert forkable(started, {**same, "PYTHONHASHSEED": "123", "PYTHONMALLOC": "malloc"}) == {"PYTHONHASHSEED",
                                                                                             "PYTHONMALLOC"}


_THREADED = """
import threading
from labzarr.convert.run.server_fork import fork_worker_server
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
print(fork_worker_server({}))
stop.set()
"""


def test_a_process_running_threads_does_not_fork_its_server() -> None:
    """A fork keeps only the forking thread: whatever another thread held (a lock, a half-written buffer) stays held."""
    out = subprocess.run([sys.executable, "-c", _THREADED], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False"]


_RESTART = """
import os
from labzarr.convert.run.hash_seed import restart_with_workers_seed
print(os.environ.get("PYTHONHASHSEED"), os.environ.get("LABZARR_SEED_CHOSEN"), hash({salt!r}), flush=True)
restart_with_workers_seed()
"""


@pytest.mark.parametrize("caller", [None, "0", "123"])
def test_the_command_starts_again_with_the_workers_seed_where_its_caller_set_none(caller: str | None) -> None:
    from labzarr.convert.run.hash_seed import caller_environ, forget_chosen_seed

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "LABZARR_SEED_CHOSEN")}
    if caller is not None:
        env["PYTHONHASHSEED"] = caller
    out = subprocess.run([sys.executable, "-c", _RESTART.format(salt=_SALT)], capture_output=True, text=True,
                         timeout=120, check=True, env=env)
    lines = [line.split() for line in out.stdout.splitlines()]
    if caller == "123":  # the caller's seed is kept, as dask's nanny keeps it
        assert len(lines) == 1 and lines[0][:2] == ["123", "None"]
    else:  # started again, once, hashing as a worker does
        assert len(lines) == 2 and lines[1] == ["6640", "1", str(_hash_with_seed("6640"))]
    restarted = {"PYTHONHASHSEED": "6640", "LABZARR_SEED_CHOSEN": "1", "HOME": "/h"}
    assert caller_environ(restarted) == {"HOME": "/h"}
    forget_chosen_seed(restarted)
    assert restarted == {"HOME": "/h"}
    own = {"PYTHONHASHSEED": "123"}
    forget_chosen_seed(own)
    assert own == {"PYTHONHASHSEED": "123"}
    assert caller_environ({"PYTHONHASHSEED": "123", "HOME": "/h"}) == {"PYTHONHASHSEED": "123", "HOME": "/h"}


_CALLER = """
import os, sys
from labzarr.convert.cli import main
print("started", os.getpid(), flush=True)
code = main(["convert", sys.argv[1], "--workers", "1", "--quiet"])
print("ended", code, flush=True)
"""


def test_a_caller_of_the_cli_is_never_started_again(tmp_path: Path) -> None:
    """Only the `labzarr` command's own process starts again with the workers' seed: `cli.main` called from a
    caller's process (unset seed, a delivery for the cluster) converts in it, its worker server started by exec."""
    from ..conftest import make_delivery

    d = make_delivery(tmp_path, extra="\n[run]\nin_process_files = 0\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "LABZARR_SEED_CHOSEN")}
    out = subprocess.run([sys.executable, "-c", _CALLER, str(d.spec)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line.split() for line in out.stdout.splitlines()]
    assert [line[0] for line in lines] == ["started", "ended"]  # not started a second time
    assert lines[1][1:] == ["0"]
    assert (d.spec.parent / "manifest.csv").exists()


def test_the_cli_starts_the_server_with_the_clusters_environment() -> None:
    """What the CLI computes before importing distributed's config equals what the cluster's nanny will use."""
    with dask.config.set(local_cluster_config(crash_retries=1)):
        late = dask.config.get("distributed.nanny.pre-spawn-environ")
        assert worker_environ(pre_spawn_environ()) == worker_environ(late)
        assert {"OMP_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_"} <= set(late)


_LOADED = """
import sys
import {module}
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}})))
"""


def _loaded(module: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _LOADED.format(module=module)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_the_cli_parses_its_arguments_before_importing_what_a_run_needs() -> None:
    # `labzarr convert` starts its worker server before importing the driver, so the server's imports and the
    # driver's overlap; nothing a run needs is imported just to parse the command line.
    assert _loaded("labzarr.convert.cli") & {"numpy", "dask", "distributed", "zarr", "pydicom", "nibabel", "openpyxl",
                                             "torch", "highdicom", "skimage", "PIL"} == set()


def test_a_run_imports_no_training_side_and_no_mask_readers() -> None:
    # highdicom and scikit-image are imported by the SEG and RTSTRUCT readers when a delivery has such a file.
    assert _loaded("labzarr.convert.run.driver") & {"torch", "highdicom", "skimage"} == set()


def _variable(name: str) -> str | None:
    return os.environ.get(name)


def test_a_variable_set_after_the_server_started_reaches_the_workers(dask_client) -> None:
    """The worker server keeps the environment it started with; a cluster started later still gives its workers
    the driver's environment as it is then (credentials for an s3 store set by a library caller, say)."""
    from distributed import Client

    from labzarr.convert.run.cluster import local_cluster

    dask_client.run(lambda: None)  # the suite's cluster, and so the worker server, are running
    name = "LABZARR_TEST_LATE_VARIABLE"
    os.environ[name] = "set after the server started"
    try:
        with local_cluster(1, crash_retries=1) as cluster, Client(cluster) as client:
            assert list(client.run(_variable, name).values()) == ["set after the server started"]
    finally:
        del os.environ[name]


_REMOVED = """
import os
from distributed import Client
from labzarr.convert.run.cluster import local_cluster

def names():
    return sorted(k for k in os.environ if k.startswith("LABZARR_TEST_"))

if __name__ == "__main__":
    with local_cluster(1, crash_retries=1) as cluster, Client(cluster) as client:  # starts the worker server
        before = list(client.run(names).values())
    del os.environ["LABZARR_TEST_REMOVED"]
    with local_cluster(1, crash_retries=1) as cluster, Client(cluster) as client:
        print(before, list(client.run(names).values()), names())
"""


def test_a_variable_removed_after_the_server_started_does_not_reach_the_workers() -> None:
    """The server's environment is the one it started with; a variable the caller removed since (credentials, say)
    is gone from the workers of a cluster started after that, as it is from the caller's."""
    env = {**os.environ, "LABZARR_TEST_REMOVED": "stale", "LABZARR_TEST_KEPT": "kept"}
    out = subprocess.run([sys.executable, "-c", _REMOVED], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == (
        "[['LABZARR_TEST_KEPT', 'LABZARR_TEST_REMOVED']] [['LABZARR_TEST_KEPT']] ['LABZARR_TEST_KEPT']"), out.stdout


def _periodic_callbacks(dask_worker: Worker) -> dict[str, float]:
    return {name: pc.callback_time for name, pc in dask_worker.periodic_callbacks.items()}


def test_the_workers_event_loops_wake_only_for_what_the_run_uses(dask_client) -> None:
    """The embedded cluster's workers run no statistical profiler (no dashboard reads it), and their event loops
    tick once a second, not every 20 ms, for blocked-loop warnings the run silences."""
    for callbacks in dask_client.run(_periodic_callbacks).values():
        assert "heartbeat" in callbacks and "profile" not in callbacks and "profile-cycle" not in callbacks
        assert callbacks["tick"] == 1000  # milliseconds


def test_only_the_servers_preload_turns_the_collector_off() -> None:
    """`_server_heap` holds the collector only where multiprocessing's forkserver imports it as its preload (the
    state test above); a process importing it otherwise, to list the preload say, keeps its collector on."""
    code = "import gc, labzarr.convert.run._server_heap as heap; print(heap.held, gc.isenabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]


_KILLED = """
import json, os, signal, sys, time
if __name__ == "__main__":
    from distributed import Client
    from labzarr.convert.run.cluster import local_cluster

    def compress():
        import numcodecs
        import numpy as np
        numcodecs.Blosc(cname="lz4").encode(np.arange(4096, dtype=np.uint16))  # numcodecs takes its blosc lock
        return os.getpid()

    def parent():
        return os.getpid(), os.getppid(), open("/proc/self/cmdline", "rb").read().decode(errors="replace")

    with local_cluster(1, crash_retries=0) as cluster, Client(cluster) as client:
        (before,) = client.run(parent).values()
        pid = client.submit(compress, pure=False).result()
        os.kill(pid, signal.SIGKILL)  # as a decoder's segfault ends a worker: nothing of it runs after
        while True:  # the nanny restarts it; meanwhile the scheduler may still list the dead one
            time.sleep(0.2)
            try:
                after = list(client.run(parent).values())
            except OSError:  # distributed's CommClosedError: the killed worker's connection
                continue
            if after and after[0][0] != pid:
                break
        print(json.dumps([before, after[0]]))
    import dask
    print("method after the close:", dask.config.get("distributed.worker.multiprocessing-method"))
    print("done")
"""


def test_a_killed_worker_leaves_nothing_for_the_resource_tracker_to_report(tmp_path: Path) -> None:
    """numcodecs makes its blosc lock at a process's first compression; in a worker the forkserver started, that
    was a named semaphore multiprocessing's resource tracker registers, and a worker killed by a signal left it
    to the tracker, which then printed "There appear to be 1 leaked semaphore objects" on the console after the
    command had ended. The worker server makes the lock before it forks a worker (`_server_blosc`): unnamed, and
    every worker's. The tracker, started by this process, shares its stderr: read here once it has ended."""
    import json

    script = tmp_path / "killed.py"
    script.write_text(_KILLED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip().endswith("done"), done.stderr[-3000:]
    assert "leaked semaphore" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr[-3000:]
    *_, restarts, method, _ = done.stdout.strip().splitlines()
    (_, server, started), (_, restarted_by, restarted) = json.loads(restarts)
    assert method == "method after the close: spawn"  # dask's default, put back as the cluster closed
    # The worker the nanny started in its place was forked by the same worker server, as the first was
    # (`cluster._EmbeddedCluster`), not spawned as a fresh interpreter.
    assert restarted_by == server and "spawn_main" not in restarted and "spawn_main" not in started, restarted
