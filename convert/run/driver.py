"""Execution: the thin I/O layer that walks, probes, converts on dask, and writes store and manifest.

Everything decided here was planned by pure functions (`discover`, `plan`);
this module only moves data between them, the dask cluster and the disk. A run
holds the store's lock throughout, sweeps what a killed run left, reuses what
earlier runs recorded (`plan/records.py`, `write/outcomes.py`), and writes the manifest last, atomically.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, TypeVar

import dask
import psutil
from distributed import Client, LocalCluster, as_completed

from labzarr.readers import LabelSheet, Reason, readers_with
from labzarr.store import Location, StoreIndex, open_store

from ..discover import Candidate, discover, walk
from ..errors import UsageError
from ..labels import join_labels, load_labels, workbook_rel
from ..manifest import (
    Row,
    atomic_write,
    earlier_index,
    manifest_bytes,
    number_rows,
    sort_rows,
    split_columns,
    summary_json,
)
from ..plan.build import VOLUMES, plan
from ..plan.collisions import collision_summary, find_collisions
from ..plan.dicom_masks import MASK_KINDS
from ..plan.records import Damage, Repair, merge_damage, settings_fingerprint
from ..plan.splits import duplicate_key
from ..plan.stacks import STACKS
from ..probe import Probe, probe_files
from ..progress import Progress, ProgressEvent
from ..spec import MASK_ROLE, REFERENCE_ROLE, Spec, SplitsSpec, load_spec
from ..survey import readable
from ..write.annotations import annotate_rows
from ..write.arrays import (
    compact_metadata,
    index_items,
    item_statistics,
    open_root,
    remove_array,
    remove_stale,
    set_array_labels,
    write_index,
    write_statistics,
)
from ..write.lock import LockInfo, store_lock
from ..write.outcomes import read_outcomes, write_outcomes
from ..write.stacks import install_stack, records_in_use, stage_stacks
from ..write.state import crash_dir, ensure_state, prune_records, run_log_path, sweep
from .batches import batch_volumes
from .part_task import stage_parts
from .settings import TaskSettings, threads_per_task, usable_cores
from .split_step import split_rows
from .supervise import Jobs, hang_report_after, run_tasks
from .warnings_log import RunWarnings, run_warnings
from .window import Feeder, job_keys, window_size
from .worker_start import METHOD, WORKER_MALLOC, start_worker_server, worker_environ

__all__ = ["Progress", "ProgressEvent", "RunResult", "WORKER_MALLOC", "convert_delivery", "default_workers",
           "execute", "local_cluster", "local_cluster_config"]

log = logging.getLogger(__name__)
_PROBE_BATCH = 64
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a conversion produced: rows in manifest order, where they went, and the summary."""

    spec: Spec
    rows: tuple[Row, ...]
    manifest: Path
    summary_path: Path
    summary: dict[str, Any] = field(hash=False)  # what summary.json holds: the same for the same delivery
    run_log: dict[str, Any] = field(default_factory=dict, hash=False)  # this run's timings and counters
    converted: int = 0  # items decoded by this run
    unchanged: int = 0  # items whose earlier outcome was reused
    repaired: tuple[Repair, ...] = ()  # of the converted, those decoded again only because their array was damaged


def tool_version() -> str:
    """The installed labzarr version (recorded in the store and summary)."""
    try:
        return version("labzarr")
    except PackageNotFoundError:
        return "0.0.0"


def default_workers() -> int:
    """About three quarters of the physical cores, at least one."""
    cores = psutil.cpu_count(logical=False) or 1
    return max(1, round(0.75 * cores))


def convert_delivery(
    spec: Path | str,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    root: Path | None = None,
    progress: Progress | None = None,
    repair: Mapping[str, Damage] | None = None,
) -> RunResult:
    """Convert one delivery into its zarr store, manifest.csv and summary.json.

    Parameters
    ----------
    spec:
        Path of the delivery's ``delivery.toml``.
    workers:
        Worker processes of the embedded ``LocalCluster`` (default: ~0.75 x physical cores).
    scheduler:
        Address of an existing dask.distributed scheduler (``tcp://host:8786``) whose workers see
        the same paths; when given, ``workers`` is ignored.
    root:
        Base for relative paths in the spec (default: its project root, the folder holding ``manifests/``,
        whatever the working directory; see ``project_root``).
    progress:
        Called with a ``ProgressEvent`` after each probed batch of files and each finished item.
    repair:
        Arrays to convert again however their records read, by array path (what ``labzarr verify`` found
        damaged; `labzarr.convert.repair`). Missing chunk files and unreadable attributes are found without it.

    Raises
    ------
    UsageError
        Bad spec, missing folders, a label workbook that cannot be read as the spec says (not an xlsx,
        no such sheet or header), unreachable scheduler, a store in use by another run (`StoreLocked`):
        before any item is converted. Also a store that cannot be written (disk full): finished items
        are kept and a rerun resumes.
    """
    started = time.perf_counter()
    parsed = load_spec(Path(spec), root=root)
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: must be at least 1", "drop the option to use the default")
    labels = load_labels(parsed)  # workbook problems are usage errors, found before the cluster starts
    client = _client(workers or default_workers(), scheduler, crash_retries=parsed.run.crash_retries)
    with _running(parsed.delivery.store, client) as (started_client, lock, warned):
        return _execute(parsed, started_client, lock, warned, progress=progress, started=started, labels=labels,
                        repair=repair or {})


@contextmanager
def _running(store: Location,
             client: AbstractContextManager[Client]) -> Iterator[tuple[Client, LockInfo, RunWarnings]]:
    """What a run holds while it converts, the same for `convert_delivery` and `execute` so that both write the
    same store bytes: the store's folder, its write errors as usage errors, its lock, then `client` entered (the
    lock first: a second run on this store fails at once, before starting a cluster), zarr's compact metadata
    documents and the frozen heap (after the cluster started, so that its objects are frozen too), and the record of
    the run's third-party warnings (`warnings_log.py`)."""
    _create_folder(store)
    with _store_errors(store), store_lock(store) as lock, client as entered, compact_metadata(), _heap_frozen():
        with run_warnings(entered, lock.run_id) as warned:  # to the run log, not the console (warnings_log.py)
            yield entered, lock, warned


@contextmanager
def _store_errors(store: Location) -> Iterator[None]:
    """A full or read-only filesystem (an object store that fails a request) is the user's to fix: one
    clear error, not a traceback."""
    try:
        yield
    except store.transport_errors() as exc:
        failure = store.write_failure(exc)
        if failure is None:
            raise
        what, fix = failure
        raise UsageError(f"{store}: cannot write the store: {what}",
                         f"{fix} and rerun the same command: finished items are kept "
                         "and the run resumes") from exc


def _refused(scheduler: str) -> None:
    """Raise ConnectionRefusedError at once when nothing listens at a tcp:// address (distributed would retry
    until its timeout); other schemes and addresses that do not parse are left to distributed."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, loc = parse_address(scheduler)
    if scheme != "tcp":
        return
    host, port = parse_host_port(loc)
    with socket.create_connection((host, port), timeout=5):
        pass


# dask keeps the last `distributed.admin.low-level-log-length` batches of every message stream for debugging (1000
# by default): the client's to the scheduler and, in the embedded cluster, the scheduler's to each worker. Those
# batches carry the tasks' arguments, so a delivery of a million small files had a thousand shards' worth of item
# records (or probe batches) held in the driver besides the plan (docs/benchmarks.md, "scale").
MESSAGE_LOG = 4


@contextmanager
def _client(workers: int, scheduler: str | None, *, crash_retries: int) -> Iterator[Client]:
    """A client of the scheduler at `scheduler`, or of an embedded cluster of `workers`; the driver's streams
    keep `MESSAGE_LOG` recent batches each, for the whole run (a restarted worker's stream too)."""
    with dask.config.set({"distributed.admin.low-level-log-length": MESSAGE_LOG}):
        with _connected(workers, scheduler, crash_retries=crash_retries) as client:
            yield client


@contextmanager
def _connected(workers: int, scheduler: str | None, *, crash_retries: int) -> Iterator[Client]:
    if scheduler:
        try:
            _refused(scheduler)
            client = Client(scheduler, timeout="10s")
        except ValueError as exc:  # distributed's address parser: unknown scheme, missing port
            raise UsageError(f"--scheduler {scheduler}: not a scheduler address ({exc})",
                             "write it as tcp://HOST:PORT, e.g. --scheduler tcp://127.0.0.1:8786") from exc
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"--scheduler {scheduler}: cannot connect ({exc})",
                             "start one with `dask scheduler` and `dask worker`, or drop --scheduler") from exc
        with client:
            yield client
        return
    with local_cluster(workers, crash_retries=crash_retries) as cluster, Client(cluster) as client:
        yield client


def local_cluster_config(crash_retries: int) -> dict[str, object]:
    """The dask config the embedded LocalCluster is started under (also what bench/convert.py uses)."""
    return {
        # The scheduler's own retry count bounds the attempts after a worker dies on an item; with saturation 1.0
        # a worker holds only the task it runs, so a crash never counts against an innocent queued item.
        "distributed.scheduler.allowed-failures": crash_retries,
        "distributed.scheduler.worker-saturation": 1.0,
        "distributed.admin.low-level-log-length": MESSAGE_LOG,  # see MESSAGE_LOG
        **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()},
        "distributed.worker.multiprocessing-method": METHOD,  # workers forked with their imports done (worker_start)
        # A worker's statistical profiler samples the running task's stack every 10 ms on its event loop, taking
        # CPU and the GIL from the task for as long as it runs; its only reader is a dashboard, which the embedded
        # cluster does not serve.
        "distributed.worker.profile.enabled": False,
        # Every server's event loop wakes each `tick.interval` (20 ms by default) only to log a warning when it was
        # blocked for longer than `tick.limit` (3 s); the embedded cluster silences those logs, and a 1 s tick still
        # sees a 3 s block. Most of an idle worker's CPU was these wake-ups.
        "distributed.admin.tick.interval": "1s",
    }


@contextmanager
def local_cluster(workers: int, *, crash_retries: int) -> Iterator[LocalCluster]:
    """The cluster `labzarr convert` starts for itself: `workers` single-threaded worker processes, started
    under `local_cluster_config`, stopped on exit (the test suite shares one between conversions)."""
    with dask.config.set(local_cluster_config(crash_retries)), _sigint_blocked():
        start_worker_server(worker_environ(dask.config.get("distributed.nanny.pre-spawn-environ")))
        cluster = _local_cluster(workers)
    with cluster:
        yield cluster


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while the cluster starts.

    Ctrl-C on a terminal signals the whole process group, worker processes included, and each would print
    its own KeyboardInterrupt traceback (while importing, or from inside a task). The threads created here,
    the cluster's event loop among them, inherit the blocked mask, and so does every worker process they
    spawn, restarted ones too: only this process sees Ctrl-C, and it stops the workers as it closes the
    cluster. A Ctrl-C while the cluster starts is held until it has started, so it never leaves half a
    cluster behind. Outside the main thread (which alone sees KeyboardInterrupt) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing starts its resource tracker at the first spawn and then unblocks SIGINT in the thread
    # that spawned (the event loop's), whatever its mask was: started here first, it leaves the mask alone.
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _local_cluster(workers: int) -> LocalCluster:
    """Start the embedded cluster; a worker killed while starting (e.g. by the OOM killer) gets one more try."""
    for attempt in (1, 2):
        try:
            # The scheduler serves HTTP even without a dashboard, on 8787 unless told otherwise; a second run on
            # the same machine would then warn "Port 8787 is already in use". Port 0: any free port, no noise.
            # Worker deaths and hangs end as rows (boundary.py); dask's ERROR lines about them would only alarm.
            # env: a worker forked from the worker server starts with the server's environment, which is this
            # process's as it was when the server started (a library caller may have set credentials since, e.g.
            # AWS_* for an s3 store); the nanny sets these in each worker before it runs anything.
            return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                                scheduler_kwargs={"dashboard": False}, silence_logs=logging.CRITICAL,
                                env=dict(os.environ))
        except RuntimeError as exc:  # distributed's "Nanny failed to start."
            if attempt == 2:
                raise UsageError(f"the local dask cluster ({workers} workers) did not start: {exc}",
                                 "rerun; if it keeps failing, check free memory or pass a smaller --workers") from exc
            log.warning("the local dask cluster did not start (%s); trying once more", exc)
    raise AssertionError("unreachable")


def execute(spec: Spec, client: Client, *, progress: Progress | None = None,
            started: float | None = None, labels: LabelSheet | None = None,
            repair: Mapping[str, Damage] | None = None) -> RunResult:
    """Run a delivery on `client` holding the store's lock: walk, probe, plan, convert, join labels, write.

    `labels` is the spec's workbook as `load_labels` read it; it is read here when not given. `repair`: as
    for `convert_delivery`.
    """
    with _running(spec.delivery.store, nullcontext(client)) as (client, lock, warned):
        return _execute(spec, client, lock, warned, progress=progress, started=started, labels=labels,
                        repair=repair or {})


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """Keep the objects alive when a run starts (modules, the cluster's scheduler, the caller's own) out of the
    collector's full collections until it ends: they are not garbage the run makes, and rescanning them is much
    of the driver's time on a large series (docs/benchmarks.md). They are handed back (`gc.unfreeze`) when the
    run ends, so nothing is kept from collection for longer."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _create_folder(store: Location) -> None:
    """Create a folder store (and its parents) before anything else, so a path that cannot be a folder (under a
    file, under /proc, too long) is one clear error; a URL store's prefix needs no creating."""
    try:
        store.mkdir(parents=True, exist_ok=True)  # nothing to do for a URL store's prefix
    except OSError as exc:
        raise UsageError(f"[delivery] store = {str(store)!r}: cannot create the store folder: "
                         f"{exc.strerror or exc} ({exc.filename or store})",
                         "point [delivery] store at a folder that can be created, e.g. "
                         "data/stores/<delivery>.zarr") from exc


def _execute(spec: Spec, client: Client, lock: LockInfo, warned: RunWarnings, *, progress: Progress | None,
             started: float | None, labels: LabelSheet | None, repair: Mapping[str, Damage]) -> RunResult:
    t_start = time.perf_counter()
    t0 = started if started is not None else t_start  # spec parsing and cluster start-up count as `start_s`
    if spec.labels is not None and labels is None:
        labels = load_labels(spec)
    store = spec.delivery.store
    left = sweep(store)
    if left.staged or left.partial:
        log.warning("%s: an earlier run was interrupted; removed %d unfinished array(s) and %d partial file(s)",
                    store, left.staged, left.partial)
    ensure_state(store)
    candidates = discover(walk(spec.delivery.raw), spec.items)
    t_discover = time.perf_counter()
    probes = _probe(client, candidates, spec, progress)
    fingerprint = settings_fingerprint(spec, tool_version())
    done = read_outcomes(store)  # with what the cheap check finds damaged; `repair` adds what verify found
    done = replace(done, damaged=merge_damage(done.damaged, repair))
    the_plan = plan(spec, candidates, probes, done, fingerprint=fingerprint)
    files_bytes = sum(c.entry.size for c in candidates)  # every file under raw, for summary.json
    # From here on the plan is all the driver keeps of each file: a walked entry and its probe (paths, headers,
    # magic bytes) would otherwise stay alive, per file, until the run ends.
    del candidates, probes
    if the_plan.repaired:
        log.info("%s: converting %d damaged item(s) again", store, len(the_plan.repaired))
    t_probe = time.perf_counter()
    root = open_root(store)
    for group in (VOLUMES, STACKS):
        if group not in root:
            root.create_group(group)
    with _crash_reports(store) as reports:
        task_settings = _task_settings(spec, client, lock, fingerprint, reports)
        staged = stage_stacks(store, the_plan, spec)
        workers = len(client.scheduler_info().get("workers", {}))
        in_parts = {t.array: parts for t in the_plan.tasks
                    if (parts := stage_parts(store, t, task_settings, workers=workers,
                                             parts_bytes=spec.run.parts_bytes))}
        volumes, batches = batch_volumes([t for t in the_plan.tasks if t.array not in in_parts], workers)
        jobs = Jobs(volumes=volumes, batches=batches, shards=the_plan.shards,
                    targets={a: (str(s.folder), str(s.records)) for a, s in staged.items()},
                    samples=the_plan.samples, parts=in_parts)
        converted = run_tasks(client, jobs, task_settings, item_timeout=spec.run.item_timeout,
                              window=spec.run.window, progress=progress)
    t_convert = time.perf_counter()
    # Samples (`[items] roles`) are the only items whose duplicates show only after decoding.
    decoded = _drop_duplicates([*converted, *the_plan.unchanged], store, splits=spec.splits)
    rows = sort_rows([*decoded, *the_plan.rows])
    label_names: tuple[str, ...] = ()
    label_summary: dict[str, Any] = {}
    if spec.labels is not None and labels is not None:
        joined = join_labels(rows, labels, spec.labels, spec.items.id_normalize, workbook=workbook_rel(spec))
        rows, label_names, label_summary = list(joined.rows), joined.names, joined.summary
        if spec.labels.annotations is not None:  # after the labels: a label conflict rejects the whole item
            annotated = annotate_rows(store, rows, joined.annotations, spec.labels.annotations)
            rows, label_summary = list(annotated.rows), label_summary | annotated.summary
    splits: dict[str, Any] = {}
    if spec.splits is not None:  # after the labels: a group, stratum or pin can come from the workbook
        assigned = split_rows(spec, rows, store)
        rows, splits = list(assigned.rows), {"splits": assigned.summary}
    # Arrays of items rejected only for their labels stay (outside the index): a corrected workbook
    # makes them ok next time without decoding them again; so do their stack slots.
    for stack in staged.values():
        install_stack(store, stack, decoded, lock.run_id, fingerprint)
    remove_stale(store, {r.group or r.array for r in decoded if r.status == "ok" and r.slot is None}
                  | {s.array for s in the_plan.stacks})
    prune_records(store, keep=records_in_use(store))
    planar = {r.source for r in decoded if r.slot is not None} | {i.source for s in the_plan.shards for i in s.items}
    write_outcomes(store, [r for r in decoded if r.source not in planar and not r.group], fingerprint)
    _write_array_labels(client, store, rows, written={r.array for r in converted if r.status == "ok"})
    manifest_path = spec.manifest_dir / "manifest.csv"
    summary_path = spec.manifest_dir / "summary.json"
    index, next_index = number_rows(rows, earlier_index(manifest_path, summary_path))
    manifest = manifest_bytes(rows, label_names, _role_names(spec, rows),
                              split_columns(bool(spec.splits.folds)) if spec.splits is not None else (),
                              spec.manifest.metadata, index=index)
    manifest_sha = hashlib.sha256(manifest).hexdigest()
    items = index_items(rows)
    records = item_statistics(items, rows)
    write_statistics(store, records)
    write_index(store, StoreIndex(delivery=spec.delivery.name, spec_sha256=spec.sha256, manifest_sha256=manifest_sha,
                                  tool_version=tool_version(), items=items))
    t_end = time.perf_counter()
    summary = (_summary(spec, rows, manifest_sha, files_bytes) | label_summary | _class_summary(spec, rows)
               | _dicom_mask_summary(rows) | splits
               | _statistics(store) | {"next_index": next_index})
    # What only this run did: in the store's bookkeeping, so the committed files stay byte-stable on a no-op rerun.
    run_log = {
        "delivery": spec.delivery.name,
        "timings": {k: round(v, 3) for k, v in {
            "start_s": t_start - t0, "discover_s": t_discover - t_start, "probe_s": t_probe - t_discover,
            "convert_s": t_convert - t_probe, "total_s": t_end - t0}.items()},
        # `files`: every file under raw; `converted`: the sources decoded by this run (throughput = converted /
        # convert_s).
        "bytes": {"files": summary["bytes"]["files"], "converted": sum(t.size for t in the_plan.tasks)},
        "run": {"converted": len(converted), "unchanged": len(the_plan.unchanged),
                "parts": len(in_parts)},  # parts: of the converted, volumes written in parts ([run] parts_bytes)
        # Of the converted, those decoded again only because the store's copy was damaged, and why.
        "repaired": [{"item_id": r.item_id, "source": r.source, "array": r.array, "why": r.why}
                     for r in the_plan.repaired],
        "warnings": warned.collected(),  # third-party warnings of the driver and the workers, each once
    }
    run_log_path(store).write_atomic(summary_json(run_log))
    atomic_write(manifest_path, manifest)
    atomic_write(summary_path, summary_json(summary))
    sweep(store)  # crash reports of items that ended as rows, and anything a restarted worker left
    return RunResult(spec=spec, rows=tuple(rows), manifest=manifest_path, summary_path=summary_path, summary=summary,
                     run_log=run_log, converted=len(converted), unchanged=len(the_plan.unchanged),
                     repaired=the_plan.repaired)


def _to_probe(candidates: Sequence[Candidate]) -> list[tuple[str, str]]:
    return [(c.rel, str(c.entry.path)) for c in candidates if readable(c)]


def _probe(client: Client, candidates: Sequence[Candidate], spec: Spec,
           progress: Progress | None) -> dict[str, Probe]:
    """Every readable candidate's probe, by rel: batches of files on the workers, a window of them in flight."""
    todo = _to_probe(candidates)
    workers = len(client.scheduler_info().get("workers", {}))
    readers = readers_with(spec.run.readers)
    feeder = Feeder(_probe_batches(todo, workers),
                    lambda batch: client.map(probe_files, batch, readers=readers, key=job_keys("probe", len(batch))),
                    window_size(client, spec.run.window))
    out: dict[str, Probe] = {}
    bytes_total = sum(c.entry.size for c in candidates
                      if not c.excluded_by and not c.entry.outside and not c.entry.special)
    bytes_done = 0
    if progress:
        progress(ProgressEvent("probe", 0, len(todo), 0, bytes_total))
    first = feeder.top_up(0)
    running, in_flight = as_completed([f for f, _ in first]), len(first)
    for future in running:
        for p in future.result():
            out[p.rel] = p
            bytes_done += p.size
        future.release()
        in_flight -= 1
        for more, _ in feeder.top_up(in_flight):
            running.add(more)
            in_flight += 1
        if progress:
            progress(ProgressEvent("probe", len(out), len(todo), bytes_done, bytes_total))
    return out


def _probe_batches(files: Sequence[_T], workers: int) -> list[Sequence[_T]]:
    """`files` in batches of at most `_PROBE_BATCH`, as many batches as a multiple of `workers` and as even as
    can be: with 400 files and 2 workers, 8 of 50 rather than 7 of 64, whose last round kept one worker idle."""
    count = math.ceil(len(files) / _PROBE_BATCH)
    count = min(len(files), math.ceil(count / max(1, workers)) * max(1, workers))
    if not count:
        return []
    size, extra = divmod(len(files), count)
    starts = [i * size + min(i, extra) for i in range(count + 1)]
    return [files[a:b] for a, b in zip(starts, starts[1:])]


@contextmanager
def _crash_reports(store: Location) -> Iterator[Path]:
    """The folder workers write fault reports to: the store's `.labzarr/crash/`, or for a URL store a local
    temp folder of this run (faulthandler writes to a file descriptor; an object has none), removed after it.

    On a cluster whose workers run on other hosts, their reports for a URL store stay on those hosts, so a
    crashed item's `detail` then lacks the traceback.
    """
    if not store.remote:
        yield crash_dir(store).local_path()
        return
    temp = Path(tempfile.mkdtemp(prefix="labzarr-crash-"))
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _task_settings(spec: Spec, client: Client, lock: LockInfo, fingerprint: str, reports: Path) -> TaskSettings:
    workers = client.scheduler_info().get("workers", {}).values()
    store = spec.delivery.store
    return TaskSettings(store=str(store), store_spec=spec.store, limits=spec.validate.limits(),
                        non_finite=spec.validate.non_finite, masks=spec.masks, run_id=lock.run_id,
                        fingerprint=fingerprint,
                        readers=spec.run.readers, hang_report_after=hang_report_after(spec.run.item_timeout),
                        fault_reports=all(w.get("nthreads") == 1 for w in workers),
                        store_options=dict(store.options), crash_reports=str(reports),
                        threads=_encode_threads(client))


def _encode_threads(client: Client) -> int:
    """Each task's encoding threads: every host's usable cores shared out among the worker threads there."""
    info = client.scheduler_info().get("workers", {})
    cores = client.run(usable_cores)
    return threads_per_task((info[a]["host"], int(info[a].get("nthreads", 1)), n) for a, n in cores.items()
                            if a in info)


def _drop_duplicates(rows: list[Row], store: Location, *, splits: SplitsSpec | None) -> list[Row]:
    """The second ok file with the same bytes (by source order; with `[splits]`, of the same item: `duplicate_key`)
    is `duplicate_content`."""
    first: dict[tuple[str, str], str] = {}
    out = []
    for row in sorted(rows, key=lambda r: r.source):
        if row.status == "ok":
            key = duplicate_key(splits, row.item_id, row.sha256)
            if key in first:
                if row.slot is None:  # a stack slot is emptied with the others, in _clear_slots
                    remove_array(store, row.group or row.array)
                row = row.rejected(Reason.DUPLICATE_CONTENT, f"same sha256 as {first[key]}")
            else:
                first[key] = row.source
        out.append(row)
    return sort_rows(out)


def _write_array_labels(client: Client, store: Location, rows: Sequence[Row], *, written: set[str]) -> None:
    """Each ok volume's `labels` attr, set on the workers in batches (a no-op where already equal). An array this
    run `written` was created with no labels (`attrs_for`), so it is only looked at when its row has some."""
    todo = [(r.array, dict(r.labels)) for r in rows
            if r.status == "ok" and r.array and r.slot is None and (r.labels or r.array not in written)]
    if not todo:
        return
    batches = [todo[i : i + _PROBE_BATCH] for i in range(0, len(todo), _PROBE_BATCH)]
    client.gather(client.map(set_array_labels, [store] * len(batches), batches, pure=False))


def _statistics(store: Location) -> dict[str, Any]:
    """`statistics`: the delivery's fingerprint, merged from the index and statistics tables just written (from
    their columns, `labzarr.store.table_stats`: what `inspect --stats`, the report and `ds.stats()` give)."""
    return {"statistics": open_store(store).stats().summary()}


def _role_names(spec: Spec, rows: Sequence[Row]) -> list[str]:
    """The manifest's role columns: the spec's roles, or image and mask where DICOM SEG/RTSTRUCT objects made
    samples of a delivery without roles."""
    if spec.items.roles:
        return [r for r, _ in spec.items.roles]
    return [REFERENCE_ROLE, MASK_ROLE] if any(r.roles for r in rows) else []


def _dicom_mask_summary(rows: Sequence[Row]) -> dict[str, Any]:
    """`dicom_masks` (only where there is something to list): the SEG and RTSTRUCT objects whose referenced series
    is not here (by file, with the detail naming the series), and per RTSTRUCT the ROIs it left out."""
    kinds = set(MASK_KINDS.values())
    missing = {r.source: r.detail for r in rows if r.kind in kinds and r.reason is Reason.MISSING_ROLE}
    unmapped = {next(x.source for x in r.roles if x.role == MASK_ROLE): list(r.unmapped) for r in rows if r.unmapped}
    if not missing and not unmapped:
        return {}
    return {"dicom_masks": {"missing_series": dict(sorted(missing.items())),
                            "unmapped_rois": dict(sorted(unmapped.items()))}}


def _class_summary(spec: Spec, rows: Sequence[Row]) -> dict[str, Any]:
    """`classes`: per mask class, voxels over all ok samples and how many samples hold it (only with masks)."""
    if not _role_names(spec, rows):
        return {}
    voxels: Counter[int] = Counter()
    samples: Counter[int] = Counter()
    for r in rows:
        if r.status == "ok":
            for c in r.classes:
                voxels[c.value] += c.voxels
                samples[c.value] += 1 if c.voxels else 0
    listed = set(spec.masks.classes or ())
    return {"classes": {str(v): {"voxels": voxels.get(v, 0), "samples": samples.get(v, 0)}
                        for v in sorted(set(voxels) | listed)}}


def _summary(spec: Spec, rows: Sequence[Row], manifest_sha: str, files_bytes: int) -> dict[str, Any]:
    status = Counter(r.status for r in rows)
    reasons = Counter(r.reason.value for r in rows if r.reason)
    return {
        "delivery": spec.delivery.name,
        "counts": {"items": len(rows), "files": sum(r.n_files for r in rows),
                   **{s: status.get(s, 0) for s in ("ok", "rejected", "ignored")}},
        "reasons": dict(sorted(reasons.items())),
        "bytes": {"files": files_bytes},  # every file under raw
        "labels": {},
        "unmatched_workbook_ids": [],
        "id_collisions": collision_summary(find_collisions(rows)),  # one ID on distinct contents: a warning
        "unlabelled_items": [],
        "label_workbook": None,
        "spec_sha256": spec.sha256,
        "manifest_sha256": manifest_sha,
        "tool_version": tool_version(),
    }
