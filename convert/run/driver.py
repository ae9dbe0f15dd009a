"""Execution: the thin I/O layer that walks, probes, converts through a runner, and writes store and manifest.

Everything decided here was planned by pure functions (`discover`, `plan`);
this module only moves data between them, the runner of its jobs (`runner.py`: a dask cluster, `on_cluster.py`,
or this process, `in_process.py`) and the disk. A run
holds the store's lock throughout, sweeps what a killed run left, reuses what
earlier runs recorded (`plan/records.py`, `write/outcomes.py`), and writes the manifest last, atomically.

Importing this module imports only what walking and probing need. The modules that write the store (zarr) and the
tasks are imported while the driver would otherwise wait (`import_writers`): for its cluster, when one is starting
in a thread of its own (the `labzarr` command's), else for its first probe results. The tasks import the readers'
libraries (pydicom, nibabel, Pillow) where they read, on the workers: the driver never does
(docs/benchmarks.md, "Fixed cost"; `tests/convert/test_driver_imports.py`).
"""

from __future__ import annotations

import gc
import importlib
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from labzarr.store import Location, StoreIndex, table_stats
from labzarr.store.format.index import item_key
from labzarr.store.format.items import IndexItems
from labzarr.store.format.stats_spill import StatsSpill, write_spilled

from ..discover import Candidate, discover, walk
from ..errors import UsageError
from ..labels import LabelJoiner, load_labels, workbook_rel
from ..manifest import Numbering, Row, atomic_write, earlier_index, split_columns, summary_json
from ..manifest_file import ManifestFile
from ..plan.build import VOLUMES, Plan, VolumeTask, plan
from ..plan.records import Damage, Repair, merge_damage, settings_fingerprint
from ..plan.stacks import STACKS
from ..progress import Progress, ProgressEvent
from ..spec import MASK_ROLE, REFERENCE_ROLE, Spec, load_spec
from ..survey import readable
from ..write.lock import LockInfo, store_lock
from ..write.state import crash_dir, ensure_state, prune_records, run_log_path, spill_dir, sweep
from .driver_malloc import give_back_freed
from .import_heap import importing
from .probe_table import ProbeTable
from .runner import Runner
from .starting import StartingCluster
from .tally import Tally
from .warnings_log import RunWarnings

if TYPE_CHECKING:
    from distributed import Client

    from labzarr.readers import LabelSheet

    from ..plan.parts import VolumePart
    from ..write.annotations import Annotator
    from ..write.stacks import StagedStack
    from .row_spill import RowSpill
    from .settings import TaskSettings

__all__ = ["Progress", "ProgressEvent", "RunResult", "convert_delivery", "execute", "import_writers"]

log = logging.getLogger(__name__)
_PROBE_BATCH = 64  # files a probe task reads at most in a small delivery; a larger one's grow (`_probe_batches`)
_PROBE_ROUNDS, _PROBE_MOST = 8, 256
# What the run imports after the probe (`_convert`, `_write`): the store's writers (zarr) and the tasks it submits,
# and numpy.ma, which numpy imports at the plan's first `np.median` (a DICOM series' slice spacing).
_WRITERS = ("labzarr.convert.write.annotations", "labzarr.convert.write.arrays", "labzarr.convert.write.outcomes",
            "labzarr.convert.write.stacks", "labzarr.convert.run.batches", "labzarr.convert.run.part_task",
            "labzarr.convert.run.split_step", "labzarr.convert.run.jobs", "labzarr.convert.run.settings",
            "labzarr.convert.run.finish", "labzarr.convert.run.row_spill", "numpy.ma")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a conversion produced: rows in manifest order, where they went, and the summary."""

    spec: Spec
    rows: Sequence[Row]  # read from a temporary file as they are used (`row_spill.RowFile`), not held
    manifest: Path
    summary_path: Path
    summary: dict[str, Any] = field(hash=False)  # what summary.json holds: the same for the same delivery
    run_log: dict[str, Any] = field(default_factory=dict, hash=False)  # this run's timings and counters
    converted: int = 0  # items decoded by this run
    unchanged: int = 0  # items whose earlier outcome was reused
    repaired: tuple[Repair, ...] = ()  # of the converted, those decoded again only because their array was damaged


@dataclass(frozen=True, slots=True)
class Planned:
    """What the run needs of its plan once the items are converted: nothing per item."""

    stacks: tuple[str, ...]  # the stacks' arrays
    converted_bytes: int  # of the volumes' sources decoded by this run
    unchanged: int  # items whose earlier outcome was reused
    repaired: tuple[Repair, ...]

    @classmethod
    def of(cls, the_plan: Plan) -> Planned:
        return cls(stacks=tuple(s.array for s in the_plan.stacks), converted_bytes=sum(t.size for t in the_plan.tasks),
                   unchanged=len(the_plan.unchanged), repaired=the_plan.repaired)


def tool_version() -> str:
    """The installed labzarr version (recorded in the store and summary)."""
    try:
        return version("labzarr")
    except PackageNotFoundError:
        return "0.0.0"


def convert_delivery(
    spec: Path | str,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    root: Path | None = None,
    progress: Progress | None = None,
    repair: Mapping[str, Damage] | None = None,
    cluster: StartingCluster | None = None,
    in_process: bool = False,
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
    cluster:
        An embedded cluster already starting (``StartingCluster``: the ``labzarr`` command starts one while it
        imports this module), used instead of starting one; ``workers`` and ``scheduler`` are then ignored. The
        run closes it when it ends; one the run never used is its owner's to close.
    in_process:
        Convert with no cluster and no dask imported: for a small delivery, whose run on a cluster is then mostly
        the cluster's start. With ``workers`` of 2 or more, in that many worker processes forked from this one
        (`forked.py`), which must then run one thread; otherwise in this process, one item after the other
        (`in_process.py`). A reader that crashes or hangs takes the run with it (a worker's death raises
        `WorkerDied`); the ``labzarr`` command runs it in a child it watches and converts on a cluster where the
        child fails (`small_run.py`). ``scheduler`` and ``cluster`` are then ignored.

    Raises
    ------
    UsageError
        Bad spec, missing folders, a label workbook that cannot be read as the spec says (not an xlsx,
        no such sheet or header), unreachable scheduler, a store in use by another run (`StoreLocked`):
        before any item is converted. Also a store that cannot be written (disk full): finished items
        are kept and a rerun resumes.
    WorkerDied
        ``in_process`` with ``workers`` of 2 or more: a worker process died (`runner.WorkerDied`); finished items
        are kept, and a run on a cluster resumes and isolates the item at fault.
    """
    started = time.perf_counter()
    parsed = load_spec(Path(spec), root=root)
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: must be at least 1", "drop the option to use the default")
    labels = load_labels(parsed)  # workbook problems are usage errors, found before the cluster starts
    runner: AbstractContextManager[Runner]
    if in_process and (workers or 1) > 1:
        with importing():  # the writers, zarr among them, come with it
            from .forked import ForkedRunner

        runner = ForkedRunner(workers or 1)
    elif in_process:
        from .in_process import InProcessRunner

        runner = nullcontext(InProcessRunner())
    else:
        if cluster is not None:  # starting in its thread: the wait for it would leave this one idle
            import_writers()
        runner = _on_cluster(workers, scheduler, crash_retries=parsed.run.crash_retries, starting=cluster)
    with _running(parsed.delivery.store, runner) as (entered, lock, warned):
        return _execute(parsed, entered, lock, warned, progress=progress, started=started, labels=labels,
                        repair=repair or {})


@contextmanager
def _on_cluster(workers: int | None, scheduler: str | None, *, crash_retries: int,
                starting: StartingCluster | None) -> Iterator[Runner]:
    """The runner of the cluster a run converts on (`cluster.client_of`)."""
    from .cluster import client_of, default_workers
    from .on_cluster import ClusterRunner

    with client_of(workers or default_workers(), scheduler, crash_retries=crash_retries,
                   starting=starting) as client:
        yield ClusterRunner(client)


@contextmanager
def _running(store: Location,
             runner: AbstractContextManager[Runner]) -> Iterator[tuple[Runner, LockInfo, RunWarnings]]:
    """What a run holds while it converts, the same for `convert_delivery` and `execute` so that both write the
    same store bytes: the store's folder, its write errors as usage errors, its lock, then `runner` entered (the
    lock first: a second run on this store fails before it starts a cluster of its own; the `labzarr` command has
    started its cluster already, `starting.py`, and stops it then), the frozen heap (after the cluster started, so
    that its objects are frozen too), and the record of the run's third-party warnings (`warnings_log.py`). zarr's
    compact metadata documents are set where the run first writes with zarr, after the probe (`_convert`)."""
    _create_folder(store)
    with _store_errors(store), store_lock(store) as lock, runner as entered, _heap_frozen():
        with entered.warnings(lock.run_id) as warned:  # to the run log, not the console (warnings_log.py)
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


def execute(spec: Spec, client: Client, *, progress: Progress | None = None,
            started: float | None = None, labels: LabelSheet | None = None,
            repair: Mapping[str, Damage] | None = None) -> RunResult:
    """Run a delivery on `client` holding the store's lock: walk, probe, plan, convert, join labels, write.

    `labels` is the spec's workbook as `load_labels` read it; it is read here when not given. `repair`: as
    for `convert_delivery`.
    """
    from .on_cluster import ClusterRunner

    with _running(spec.delivery.store, nullcontext(ClusterRunner(client))) as (runner, lock, warned):
        return _execute(spec, runner, lock, warned, progress=progress, started=started, labels=labels,
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


def _execute(spec: Spec, runner: Runner, lock: LockInfo, warned: RunWarnings, *, progress: Progress | None,
             started: float | None, labels: LabelSheet | None, repair: Mapping[str, Damage]) -> RunResult:
    t_start = time.perf_counter()
    if spec.labels is not None and labels is None:
        labels = load_labels(spec)
    store = spec.delivery.store
    left = sweep(store)
    if left.staged or left.partial:
        log.warning("%s: an earlier run was interrupted; removed %d unfinished array(s) and %d partial file(s)",
                    store, left.staged, left.partial)
    # Every ok item's full statistics record waits on disk, not in the driver, until the table is written: beside
    # a folder store, in the temporary folder for a URL store.
    with StatsSpill(_spill_folder(store)) as spill:
        return _convert(spec, runner, lock, warned, spill, progress=progress, started=started, labels=labels,
                        repair=repair, t_start=t_start)


def _convert(spec: Spec, runner: Runner, lock: LockInfo, warned: RunWarnings, spill: StatsSpill, *,
             progress: Progress | None, started: float | None, labels: LabelSheet | None,
             repair: Mapping[str, Damage], t_start: float) -> RunResult:
    t0 = started if started is not None else t_start  # spec parsing and cluster start-up count as `start_s`
    store = spec.delivery.store
    candidates = discover(walk(spec.delivery.raw), spec.items)
    t_discover = time.perf_counter()
    probes = _probe(runner, candidates, spec, progress)
    # The store's writers (zarr) and the tasks are imported from here on, not with this module (its docstring).
    from ..write.arrays import compact_metadata
    from ..write.outcomes import read_outcomes

    fingerprint = settings_fingerprint(spec, tool_version())
    done = read_outcomes(store)  # with what the cheap check finds damaged; `repair` adds what verify found
    done = replace(done, damaged=merge_damage(done.damaged, repair))
    the_plan = plan(spec, candidates, probes, done, fingerprint=fingerprint)
    files_bytes = sum(c.entry.size for c in candidates)  # every file under raw, for summary.json
    # From here on the plan is all the driver keeps of each file: a walked entry and its probe (paths, headers,
    # magic bytes) would otherwise stay alive, per file, until the run ends.
    probes.close()
    del candidates, probes
    give_back_freed()  # the walk's and the probes' objects, a few per file (driver_malloc.py)
    if the_plan.repaired:
        log.info("%s: converting %d damaged item(s) again", store, len(the_plan.repaired))
    t_probe = time.perf_counter()
    with compact_metadata():
        ensure_state(store)
        # Handed over in a box that `_write` empties: this frame would otherwise keep every planned item alive
        # until the run ends.
        box = [the_plan]
        del the_plan
        return _write(spec, runner, lock, warned, spill, box, fingerprint=fingerprint, files_bytes=files_bytes,
                      progress=progress, labels=labels, timings=(t0, t_start, t_discover, t_probe))


def _write(spec: Spec, runner: Runner, lock: LockInfo, warned: RunWarnings, spill: StatsSpill, box: list[Plan], *,
           fingerprint: str, files_bytes: int, progress: Progress | None, labels: LabelSheet | None,
           timings: tuple[float, float, float, float]) -> RunResult:
    """Convert what the plan in `box` says on the workers, then write the rest of the store, the manifest and
    summary. The plan is taken out of `box`, and let go once its items are converted (`Planned` is what is kept)."""
    from ..write.arrays import open_root
    from ..write.stacks import stage_stacks
    from .batches import batch_volumes
    from .jobs import Jobs
    from .row_spill import RowSpill

    gc.freeze()  # the modules just imported, as `_heap_frozen` froze those imported before the run began
    store = spec.delivery.store
    the_plan = box.pop()
    root = open_root(store)
    for group in (VOLUMES, STACKS):
        if group not in root:
            root.create_group(group)
    # Each row goes to disk as it arrives (`row_spill.py`), with its statistics record (`_spilled`).
    with _crash_reports(store) as reports, RowSpill(_spill_folder(store), splits=spec.splits) as spilled:
        task_settings = _task_settings(spec, runner, lock, fingerprint, reports)
        staged = stage_stacks(store, the_plan, spec)
        workers = runner.workers()
        in_parts = _staged_parts(runner, store, the_plan.tasks, task_settings, workers=workers,
                                 parts_bytes=spec.run.parts_bytes)
        volumes, batches = batch_volumes([t for t in the_plan.tasks if t.array not in in_parts], workers)
        jobs = Jobs(volumes=volumes, batches=batches, shards=the_plan.shards,
                    targets={a: (str(s.folder), str(s.records)) for a, s in staged.items()},
                    samples=the_plan.samples, parts=in_parts)
        converted = runner.run_tasks(jobs, task_settings, item_timeout=spec.run.item_timeout,
                                     window=spec.run.window, progress=progress,
                                     sink=lambda row, planar: spilled.add(_spilled(spill, row), planar=planar))
        t_convert = time.perf_counter()
        for row in the_plan.unchanged:
            spilled.add(_spilled(spill, row))
        for row in the_plan.rows:  # decided without decoding: never a `duplicate_content`
            spilled.add(row, compared=False)
        planned = Planned.of(the_plan)
        del the_plan, jobs, volumes, batches
        give_back_freed()  # the plan's records, a few per item
        return _finish(spec, runner, lock, warned, spill, spilled, planned, staged, fingerprint=fingerprint,
                       files_bytes=files_bytes, labels=labels, converted=converted, parts=len(in_parts),
                       timings=(*timings, t_convert))


def _finish(spec: Spec, runner: Runner, lock: LockInfo, warned: RunWarnings, spill: StatsSpill, spilled: RowSpill,
            planned: Planned, staged: Mapping[str, StagedStack], *, fingerprint: str, files_bytes: int,
            labels: LabelSheet | None, converted: int, parts: int,
            timings: tuple[float, float, float, float, float]) -> RunResult:
    """From the converted rows (in `spilled`) to the installed stacks, the labels, the splits, the index, the
    statistics table, the manifest and summary.json (`finish.py`)."""
    from ..write.annotations import Annotator
    from ..write.arrays import remove_stale, write_index
    from ..write.outcomes import write_outcomes
    from ..write.stacks import install_stack, records_in_use
    from .finish import Decoded, write_rows
    from .split_step import split_rows

    t0, t_start, t_discover, t_probe, t_convert = timings
    store = spec.delivery.store
    # Samples (`[items] roles`) are the only items whose duplicates show only after decoding.
    rows = Decoded(spilled, store, decoded=converted + planned.unchanged, converted=converted)
    final: Iterable[Row] = rows.in_manifest_order()
    label_names: tuple[str, ...] = ()
    joiner: LabelJoiner | None = None
    annotator: Annotator | None = None
    if spec.labels is not None and labels is not None:
        joiner = LabelJoiner(labels, spec.labels, spec.items.id_normalize, workbook=workbook_rel(spec))
        if spec.labels.annotations is not None:  # after the labels: a label conflict rejects the whole item
            annotator = Annotator(store, spec.labels.annotations)
        final, label_names = _joined(final, joiner, annotator), joiner.names
    splits: dict[str, Any] = {}
    if spec.splits is not None:  # after the labels: a group, stratum or pin can come from the workbook
        # The split assignment takes every row at once: with `[splits]`, the rows are held here.
        assigned = split_rows(spec, list(final), store)
        final, splits = assigned.rows, {"splits": assigned.summary}
    # Arrays of items rejected only for their labels stay (outside the index): a corrected workbook
    # makes them ok next time without decoding them again; so do their stack slots.
    for stack in staged.values():
        install_stack(store, stack, rows.decoded(), lock.run_id, fingerprint)
    volumes = rows.volumes()
    remove_stale(store, volumes.kept | set(planned.stacks))
    prune_records(store, keep=records_in_use(store))
    write_outcomes(store, volumes.outcomes, fingerprint)
    manifest_path = spec.manifest_dir / "manifest.csv"
    summary_path = spec.manifest_dir / "summary.json"
    role_names = _role_names(spec, spilled.roles)
    numbering = Numbering(earlier_index(manifest_path, summary_path))
    with ManifestFile(manifest_path, label_names, role_names,
                      split_columns(bool(spec.splits.folds)) if spec.splits is not None else (),
                      spec.manifest.metadata) as manifest:
        out = write_rows(final, manifest, numbering, written=volumes.written, folder=_spill_folder(store))
        del final, numbering
        give_back_freed()  # each row's objects, made and dropped a row at a time
        _write_array_labels(runner, store, out.labels)
        manifest_sha = manifest.sha256
        # The index and the summary's statistics first, then the index's columns let go before the statistics
        # table is written: the two phases' memory does not add up (docs/benchmarks.md, "Scale: many tiny files").
        index = out.take_index()
        write_index(store, StoreIndex(delivery=spec.delivery.name, spec_sha256=spec.sha256,
                                      manifest_sha256=manifest_sha, tool_version=tool_version(), items=index))
        statistics = _statistics(index, spill)
        del index
        give_back_freed()
        write_spilled(store, spill, out.take_stats_keys())
        t_end = time.perf_counter()
        label_summary = ({} if joiner is None else joiner.summary()) | ({} if annotator is None else
                                                                        annotator.summary())
        summary = (_summary(spec, out.tally, manifest_sha, files_bytes) | label_summary
                   | out.tally.classes(spec, role_names) | out.tally.dicom_masks() | splits
                   | statistics | {"next_index": out.next_index})
        # What only this run did: in the store's bookkeeping, so the committed files stay byte-stable on a no-op
        # rerun.
        run_log = {
            "delivery": spec.delivery.name,
            "timings": {k: round(v, 3) for k, v in {
                "start_s": t_start - t0, "discover_s": t_discover - t_start, "probe_s": t_probe - t_discover,
                "convert_s": t_convert - t_probe, "total_s": t_end - t0}.items()},
            # `files`: every file under raw; `converted`: the sources decoded by this run (throughput = converted /
            # convert_s).
            "bytes": {"files": summary["bytes"]["files"], "converted": planned.converted_bytes},
            "run": {"converted": converted, "unchanged": planned.unchanged,
                    "parts": parts},  # parts: of the converted, volumes written in parts ([run] parts_bytes)
            # Of the converted, those decoded again only because the store's copy was damaged, and why.
            "repaired": [{"item_id": r.item_id, "source": r.source, "array": r.array, "why": r.why}
                         for r in planned.repaired],
            "warnings": warned.collected(),  # third-party warnings of the driver and the workers, each once
        }
        run_log_path(store).write_atomic(summary_json(run_log))
        manifest.commit()
    atomic_write(summary_path, summary_json(summary))
    sweep(store)  # crash reports of items that ended as rows, and anything a restarted worker left
    return RunResult(spec=spec, rows=out.rows, manifest=manifest_path, summary_path=summary_path, summary=summary,
                     run_log=run_log, converted=converted, unchanged=planned.unchanged,
                     repaired=planned.repaired)


def _joined(rows: Iterable[Row], joiner: LabelJoiner, annotator: Annotator | None) -> Iterator[Row]:
    """`rows` with their labels (`labels.LabelJoiner`) and annotations (`write.annotations.Annotator`), a row at a
    time."""
    for row in rows:
        joined, cells = joiner.join(row)
        yield joined if annotator is None else annotator.place(joined, cells)


def _to_probe(candidates: Sequence[Candidate]) -> list[tuple[str, str]]:
    return [(c.rel, str(c.entry.path)) for c in candidates if readable(c)]


def _probe(runner: Runner, candidates: Sequence[Candidate], spec: Spec,
           progress: Progress | None) -> ProbeTable:
    """Every readable candidate's probe, by rel (on disk until the plan reads it: `probe_table.py`): batches of files
    run by `runner`, a window of them in flight; the store's writers are imported while the first ones run."""
    todo = _to_probe(candidates)
    out = ProbeTable(_spill_folder(spec.delivery.store))
    bytes_total = sum(c.entry.size for c in candidates
                      if not c.excluded_by and not c.entry.outside and not c.entry.special)
    bytes_done = 0
    if progress:
        progress(ProgressEvent("probe", 0, len(todo), 0, bytes_total))
    for probed in runner.probe(_probe_batches(todo, runner.workers()), spec.run.readers, spec.run.window,
                               meanwhile=import_writers):
        out.add_batch(probed)
        bytes_done += probed.size
        del probed
        if progress:
            progress(ProgressEvent("probe", len(out), len(todo), bytes_done, bytes_total))
    return out


def _staged_parts(runner: Runner, store: Location, tasks: Sequence[VolumeTask], settings: TaskSettings, *,
                  workers: int, parts_bytes: int) -> dict[str, tuple[VolumePart, ...]]:
    """The parts of every volume worth writing in parts, by array, each staged by `runner`
    (`part_task.stage_parts`)."""
    from .part_task import worth_opening

    todo = [t for t in tasks if worth_opening(t, settings, workers=workers, parts_bytes=parts_bytes)]
    if not todo:
        return {}
    return runner.stage_parts(store, todo, settings, workers=workers, parts_bytes=parts_bytes)


def import_writers() -> None:
    """Import `_WRITERS`, which the run needs after its probe, at a moment the driver would otherwise wait: the
    imports (zarr's 0.3 s of CPU, docs/benchmarks.md) then run beside the cluster's start or the probe, rather than
    between the probe and the conversion tasks. The `labzarr` command imports them before it forks its worker server
    (`cli._start_workers`, `server_fork.py`), which then has them too. The collector is held meanwhile
    (`import_heap.py`)."""
    with importing():
        for name in _WRITERS:
            importlib.import_module(name)


def _probe_batches(files: Sequence[_T], workers: int) -> list[Sequence[_T]]:
    """`files` in batches of at most `_PROBE_BATCH`, or for a delivery of more than `_PROBE_ROUNDS` such batches a
    worker, that many a worker of at most `_PROBE_MOST`; as many batches as a multiple of `workers` and as even as
    can be: with 400 files and 2 workers, 8 of 50 rather than 7 of 64, whose last round kept one worker idle.

    Each batch costs the driver (where the embedded cluster's scheduler runs) about 4 ms of its own beside the
    workers it shares the cores with, and each starts a template of its own (`_dicom_walk.py`): 4,376 files in 69
    batches cost it 0.45-0.49 CPU s, in 18 of at most 256 files 0.24-0.27 (`dcm_qa_ge`, docs/benchmarks.md)."""
    per = min(_PROBE_MOST, max(_PROBE_BATCH, math.ceil(len(files) / (_PROBE_ROUNDS * max(1, workers)))))
    count = math.ceil(len(files) / per)
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


def _task_settings(spec: Spec, runner: Runner, lock: LockInfo, fingerprint: str, reports: Path) -> TaskSettings:
    from .settings import TaskSettings, hang_report_after

    store = spec.delivery.store
    return TaskSettings(store=str(store), store_spec=spec.store, limits=spec.validate.limits(),
                        non_finite=spec.validate.non_finite, masks=spec.masks, run_id=lock.run_id,
                        fingerprint=fingerprint,
                        readers=spec.run.readers, hang_report_after=hang_report_after(spec.run.item_timeout),
                        fault_reports=runner.fault_reports(),
                        store_options=dict(store.options), crash_reports=str(reports),
                        threads=runner.encode_threads())


def _write_array_labels(runner: Runner, store: Location, todo: Sequence[tuple[str, dict[str, str]]]) -> None:
    """Each ok volume's `labels` attr (`finish.write_rows` says which), set by `runner` in batches (a no-op where
    already equal)."""
    if not todo:
        return
    runner.set_labels(store, [todo[i : i + _PROBE_BATCH] for i in range(0, len(todo), _PROBE_BATCH)])


def _spill_folder(store: Location) -> Path | None:
    if store.remote:
        return None
    folder = spill_dir(store).local_path()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _statistics(items: IndexItems, spill: StatsSpill) -> dict[str, Any]:
    """`statistics`: the delivery's fingerprint, merged from the index's columns and the spilled records the
    statistics table was written from (`labzarr.store.table_stats`: what `inspect --stats`, the report and
    `ds.stats()` give from the tables), without reading either table back."""
    return {"statistics": table_stats(items, spill.record_table()).summary()}


def _spilled(spill: StatsSpill, row: Row) -> Row:
    """`row` as the driver keeps it: an ok item's full statistics record goes to `spill` (by its `IndexItem.key`),
    and the row keeps only their moments (what the index holds)."""
    if row.stats is None or row.status != "ok":
        return row
    spill.add(item_key(row.array, row.slot), row.stats)
    return replace(row, stats=row.stats.moments())


def _role_names(spec: Spec, roles: bool) -> list[str]:
    """The manifest's role columns: the spec's roles, or image and mask where DICOM SEG/RTSTRUCT objects made
    samples of a delivery without roles (`roles`: some row has roles)."""
    if spec.items.roles:
        return [r for r, _ in spec.items.roles]
    return [REFERENCE_ROLE, MASK_ROLE] if roles else []


def _summary(spec: Spec, tally: Tally, manifest_sha: str, files_bytes: int) -> dict[str, Any]:
    return {
        "delivery": spec.delivery.name,
        **tally.counts(),  # counts, reasons, id_collisions
        "bytes": {"files": files_bytes},  # every file under raw
        "labels": {},
        "unmatched_workbook_ids": [],
        "unlabelled_items": [],
        "label_workbook": None,
        "spec_sha256": spec.sha256,
        "manifest_sha256": manifest_sha,
        "tool_version": tool_version(),
    }
