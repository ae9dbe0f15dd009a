"""Execution: the thin I/O layer that walks, probes, converts on dask, and writes store and manifest.

Everything decided here was planned by pure functions (`discover`, `plan`);
this module only moves data between them, the dask cluster and the disk.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil
from dask.typing import Key
from distributed import Client, Future, KilledWorker, LocalCluster, as_completed

from labzarr.readers import LabelSheet, Reason

from .discover import Candidate, discover, walk
from .errors import UsageError
from .labels import join_labels, load_labels, workbook_rel
from .manifest import Row, atomic_write, manifest_bytes, sort_rows, summary_json
from .plan import VOLUMES, Plan, Task, plan
from .probe import Probe, probe_files
from .sample_task import convert_sample
from .samples import SampleTask
from .progress import Progress, ProgressEvent
from .spec import Spec, load_spec
from .stack_task import convert_shard
from .stacks import STACKS, ShardTask, Stack
from .store import (array_paths, clear_slot, create_stack, finish_stack, group_paths, open_root, remove_array,
                    set_array_labels, write_index)
from .task import TaskSettings, convert_item

__all__ = ["Progress", "ProgressEvent", "RunResult", "convert_delivery", "default_workers", "dry_run", "execute"]

log = logging.getLogger(__name__)
_PROBE_BATCH = 64


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a conversion produced: rows in manifest order, where they went, and the summary."""

    spec: Spec
    rows: tuple[Row, ...]
    manifest: Path
    summary_path: Path
    summary: dict[str, Any] = field(hash=False)


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
    cwd: Path | None = None,
    progress: Progress | None = None,
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
    cwd:
        Base for relative paths in the spec (default: the current directory).
    progress:
        Called with a ``ProgressEvent`` after each probed batch of files and each finished item.

    Raises
    ------
    UsageError
        Bad spec, missing folders, a label workbook that cannot be read as the spec says (not an xlsx,
        no such sheet or header), unreachable scheduler: before any item is converted.
    """
    started = time.perf_counter()
    parsed = load_spec(Path(spec), cwd=cwd or Path.cwd())
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: must be at least 1", "drop the option to use the default")
    labels = load_labels(parsed)  # workbook problems are usage errors, found before the cluster starts
    with _client(workers or default_workers(), scheduler) as client:
        return execute(parsed, client, progress=progress, started=started, labels=labels)


@contextmanager
def _client(workers: int, scheduler: str | None) -> Iterator[Client]:
    if scheduler:
        try:
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
    # The scheduler serves HTTP even without a dashboard, on 8787 unless told otherwise; a second run on the
    # same machine would then warn "Port 8787 is already in use". Port 0: any free port, no dashboard, no noise.
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      scheduler_kwargs={"dashboard": False}, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        yield client


def execute(spec: Spec, client: Client, *, progress: Progress | None = None,
            started: float | None = None, labels: LabelSheet | None = None) -> RunResult:
    """Run a delivery on `client`: walk, probe, plan, convert, join labels, then write store index and manifest.

    `labels` is the spec's workbook as `load_labels` read it; it is read here when not given.
    """
    t_start = time.perf_counter()
    t0 = started if started is not None else t_start  # spec parsing and cluster start-up count as `start_s`
    if spec.labels is not None and labels is None:
        labels = load_labels(spec)
    candidates = discover(walk(spec.delivery.raw), spec.items)
    t_discover = time.perf_counter()
    probes = _probe(client, candidates, progress)
    the_plan = plan(spec, candidates, probes)
    t_probe = time.perf_counter()
    store = spec.delivery.store
    root = open_root(store)
    for group in (VOLUMES, STACKS):
        if group not in root:
            root.create_group(group)
    for stack in the_plan.stacks:  # created here, once, so tasks only ever write chunks of their own shards
        create_stack(store, stack, spec=spec.store)
    rows = _convert(client, the_plan, spec, progress)
    t_convert = time.perf_counter()
    written = {(r.array, r.slot) for r in rows if r.status == "ok" and r.slot is not None}  # set[tuple[str, int]]
    rows = _drop_duplicates(sort_rows([*rows, *the_plan.rows]), store)
    label_names: tuple[str, ...] = ()
    label_summary: dict[str, Any] = {}
    if spec.labels is not None and labels is not None:
        joined = join_labels(rows, labels, spec.labels, spec.items.id_normalize, workbook=workbook_rel(spec))
        rows, label_names, label_summary = list(joined.rows), joined.names, joined.summary
    _clear_slots(store, written, rows)  # 2D images rejected after decoding (duplicates, labels)
    _remove_stale(store, rows)  # also drops arrays of items just rejected for their labels
    _finish_stacks(store, the_plan.stacks, rows)
    _write_array_labels(client, store, rows)
    manifest = manifest_bytes(rows, label_names, [r for r, _ in spec.items.roles])
    manifest_sha = hashlib.sha256(manifest).hexdigest()
    write_index(store, rows=rows, root_attrs={
        "delivery": spec.delivery.name, "spec_sha256": spec.sha256, "manifest_sha256": manifest_sha,
        "tool_version": tool_version(),
    })
    t_end = time.perf_counter()
    summary = _summary(spec, rows, manifest_sha, candidates, the_plan, {
        "start_s": t_start - t0, "discover_s": t_discover - t_start, "probe_s": t_probe - t_discover, "convert_s": t_convert - t_probe,
        "total_s": t_end - t0,
    }) | label_summary | _class_summary(spec, rows)
    manifest_path = spec.manifest_dir / "manifest.csv"
    summary_path = spec.manifest_dir / "summary.json"
    atomic_write(manifest_path, manifest)
    atomic_write(summary_path, summary_json(summary))
    return RunResult(spec=spec, rows=tuple(rows), manifest=manifest_path, summary_path=summary_path, summary=summary)


def dry_run(spec: Path | str, *, cwd: Path) -> Plan:
    """Discover, probe (in this process) and plan, converting nothing: what `--dry-run` prints."""
    parsed = load_spec(Path(spec), cwd=cwd)
    load_labels(parsed)  # a workbook problem shows in a dry run too
    candidates = discover(walk(parsed.delivery.raw), parsed.items)
    probes = {p.rel: p for p in probe_files(_to_probe(candidates))}
    return plan(parsed, candidates, probes)


def _to_probe(candidates: Sequence[Candidate]) -> list[tuple[str, str]]:
    return [(c.rel, str(c.entry.path)) for c in candidates if not c.excluded_by and not c.entry.outside]


def _probe(client: Client, candidates: Sequence[Candidate], progress: Progress | None) -> dict[str, Probe]:
    todo = _to_probe(candidates)
    batches = [todo[i : i + _PROBE_BATCH] for i in range(0, len(todo), _PROBE_BATCH)]
    futures = client.map(probe_files, batches, pure=False)
    out: dict[str, Probe] = {}
    bytes_total = sum(c.entry.size for c in candidates if not c.excluded_by and not c.entry.outside)
    bytes_done = 0
    if progress:
        progress(ProgressEvent("probe", 0, len(todo), 0, bytes_total))
    for future in as_completed(futures):
        for p in future.result():
            out[p.rel] = p
            bytes_done += p.size
        if progress:
            progress(ProgressEvent("probe", len(out), len(todo), bytes_done, bytes_total))
    return out


def _convert(client: Client, the_plan: Plan, spec: Spec, progress: Progress | None) -> list[Row]:
    settings = TaskSettings(store=str(spec.delivery.store), store_spec=spec.store,
                            limits=spec.validate.limits(), non_finite=spec.validate.non_finite)
    total = the_plan.n_items
    if not total:
        return []
    work: list[Task | ShardTask | SampleTask] = [*the_plan.tasks, *the_plan.shards, *the_plan.samples]
    futures: list[Future[Any]] = [*client.map(convert_item, the_plan.tasks, settings=settings, pure=False),
                                  *client.map(convert_shard, the_plan.shards, settings=settings, pure=False),
                                  *client.map(convert_sample, the_plan.samples, settings=settings, masks=spec.masks,
                                              pure=False)]
    jobs: dict[Key, Task | ShardTask | SampleTask] = {f.key: t for f, t in zip(futures, work)}
    then: dict[Key, list[ShardTask]] = {}  # a lost shard's images, redone one at a time (see below)
    rows: list[Row] = []
    sizes = ({t.source: t.size for t in the_plan.tasks} | {i.source: i.size for s in the_plan.shards for i in s.items}
             | {s.source: s.size for s in the_plan.samples})
    bytes_total = sum(sizes.values())
    bytes_done = 0
    if progress:
        progress(ProgressEvent("convert", 0, total, 0, bytes_total))
    pending = as_completed(futures)
    for future in pending:
        job = jobs.pop(future.key)
        if future.status == "error" and isinstance(job, ShardTask) and len(job.items) > 1:
            # A worker died in this shard (a decoder segfault, the memory limit) or its write failed.
            # Redo its images one task at a time, each after the previous, so only the culprit is lost
            # and the shard is still written by one task at a time.
            singles = [ShardTask(stack=job.stack, shard=job.shard, items=(item,)) for item in job.items]
            log.warning("shard %d of %s failed (%s); retrying its %d images one by one",
                        job.shard, job.stack.array, future.exception(), len(singles))
            _chain(client, singles, settings, jobs, then, pending)
            future.release()
            continue
        done = _crashed(job, future.exception()) if future.status == "error" else _as_rows(future.result())
        future.release()
        if future.key in then:
            _chain(client, then.pop(future.key), settings, jobs, then, pending)
        for row in done:
            rows.append(row)
            bytes_done += sizes.get(row.source, 0)
            if progress:
                progress(ProgressEvent("convert", len(rows), total, bytes_done, bytes_total, row))
    return rows


def _chain(client: Client, singles: list[ShardTask], settings: TaskSettings,
           jobs: dict[Key, Task | ShardTask | SampleTask],
           then: dict[Key, list[ShardTask]], pending: as_completed) -> None:
    if not singles:
        return
    future = client.submit(convert_shard, singles[0], settings=settings, pure=False)
    jobs[future.key] = singles[0]
    then[future.key] = singles[1:]
    pending.add(future)


def _as_rows(result: Row | list[Row]) -> list[Row]:
    return [result] if isinstance(result, Row) else list(result)


def _crashed(job: Task | ShardTask | SampleTask, exc: BaseException | None) -> list[Row]:
    # A worker died (segfault, memory limit) on this item more often than dask allows, or the task failed.
    what = "worker lost while converting" if isinstance(exc, KilledWorker) else "task failed"
    detail = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(job, SampleTask):
        return [job.base_row().rejected(Reason.DECODER_CRASH, detail)]
    if isinstance(job, Task):
        return [Row(item_id=job.item_id, status="rejected", source=job.source, kind=job.kind, sha256=job.sha256,
                    reason=Reason.DECODER_CRASH, detail=detail, n_files=max(1, len(job.members)),
                    members=job.members)]
    return [Row(item_id=i.item_id, status="rejected", source=i.source, kind=i.kind, sha256=i.sha256,
                reason=Reason.DECODER_CRASH, detail=detail) for i in job.items]


def _drop_duplicates(rows: list[Row], store: Path) -> list[Row]:
    """The second ok file with the same bytes (by source order) is `duplicate_content`."""
    first: dict[str, str] = {}
    out = []
    for row in sorted(rows, key=lambda r: r.source):
        if row.status == "ok":
            if row.sha256 in first:
                if row.slot is None:  # a stack slot is emptied with the others, in _clear_slots
                    remove_array(store, row.group or row.array)
                row = row.rejected(Reason.DUPLICATE_CONTENT, f"same sha256 as {first[row.sha256]}")
            else:
                first[row.sha256] = row.source
        out.append(row)
    return sort_rows(out)


def _remove_stale(store: Path, rows: Sequence[Row]) -> None:
    keep = {r.group or r.array for r in rows if r.status == "ok"}
    for path in [*array_paths(store, VOLUMES), *group_paths(store, VOLUMES), *array_paths(store, STACKS)]:
        if path not in keep:
            remove_array(store, path)


def _clear_slots(store: Path, written: set[tuple[str, int]], rows: Sequence[Row]) -> None:
    """Empty the slots written by a task whose item was rejected afterwards; the driver alone writes them now."""
    ok = {(r.array, r.slot) for r in rows if r.status == "ok" and r.slot is not None}
    for array, slot in sorted(written - ok):
        clear_slot(store, array, slot)


def _finish_stacks(store: Path, stacks: Sequence[Stack], rows: Sequence[Row]) -> None:
    """Set each kept stack's `complete` last: a digest of which source (by hash) fills which slot."""
    ok = sorted((r.array, r.slot or 0, r.sha256) for r in rows if r.status == "ok" and r.slot is not None)
    for stack in stacks:
        mine = [f"{slot}:{sha}" for array, slot, sha in ok if array == stack.array]
        if mine:
            digest = hashlib.sha256("\n".join(mine).encode()).hexdigest()
            finish_stack(store, stack.array, complete=digest, ok=len(mine))


def _write_array_labels(client: Client, store: Path, rows: Sequence[Row]) -> None:
    """Each ok volume's `labels` attr, set on the workers in batches (a no-op where already equal)."""
    todo = [(r.array, dict(r.labels)) for r in rows if r.status == "ok" and r.array and r.slot is None]
    batches = [todo[i : i + _PROBE_BATCH] for i in range(0, len(todo), _PROBE_BATCH)]
    client.gather(client.map(set_array_labels, [str(store)] * len(batches), batches, pure=False))


def _class_summary(spec: Spec, rows: Sequence[Row]) -> dict[str, Any]:
    """`classes`: per mask class, voxels over all ok samples and how many samples hold it (only with roles)."""
    if not spec.items.roles:
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


def _summary(spec: Spec, rows: Sequence[Row], manifest_sha: str, candidates: Sequence[Candidate], the_plan: Plan,
             timings: dict[str, float]) -> dict[str, Any]:
    status = Counter(r.status for r in rows)
    reasons = Counter(r.reason.value for r in rows if r.reason)
    return {
        "delivery": spec.delivery.name,
        "counts": {"items": len(rows), "files": sum(r.n_files for r in rows),
                   **{s: status.get(s, 0) for s in ("ok", "rejected", "ignored")}},
        "reasons": dict(sorted(reasons.items())),
        # `files`: every file under raw; `converted`: the sources decoded by this run (throughput = converted / convert_s).
        "bytes": {"files": sum(c.entry.size for c in candidates), "converted": sum(t.size for t in the_plan.tasks)},
        "labels": {},
        "unmatched_workbook_ids": [],
        "unlabelled_items": [],
        "label_workbook": None,
        "spec_sha256": spec.sha256,
        "manifest_sha256": manifest_sha,
        "tool_version": tool_version(),
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }
