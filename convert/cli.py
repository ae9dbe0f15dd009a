"""The `labzarr` command: argument parsing, output, progress and log configuration live here only.

Every mistake a user can fix (bad spec, missing folder, bad option) ends as one
line saying what and where, a hint line saying what to do, and exit code 2.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from .errors import UsageError

if TYPE_CHECKING:
    from labzarr.store import Location

    from .progress import Progress, ProgressEvent
    from .run.small_run import Size, Watch
    from .run.starting import StartingCluster

__all__ = ["build_parser", "main"]

_EPILOG = """examples:
  labzarr demo data/raw/demo                          # write the messy sample delivery
  labzarr init lab-2026-11 --raw data/raw/lab-2026-11 # -> manifests/lab-2026-11/delivery.toml
  labzarr check manifests/demo/delivery.toml          # items, ID collisions, labels: nothing decoded
  labzarr convert manifests/demo/delivery.toml        # -> data/stores/demo.zarr + manifests/demo/manifest.csv
  labzarr report manifests/demo/delivery.toml         # -> data/reports/demo/index.html
  labzarr diff git:HEAD:manifests/demo/manifest.csv manifests/demo/manifest.csv
  labzarr verify data/stores/demo.zarr                # re-read every chunk, check checksums and hashes
  labzarr inspect data/stores/demo.zarr

Run `labzarr COMMAND --help` for each command's options and a worked example.
"""

_CONVERT_EPILOG = """worked example:
  $ labzarr convert manifests/demo/delivery.toml --workers 2
  probing: 100%|██████████| 33/33 [elapsed<left, files/s, bytes done/total, MB/s]
  converting: 100%|██████████| 18/18 [elapsed<left, items/s, bytes done/total, MB/s]
  demo: 27 items from 34 files

    status        items
    ok               11
    rejected         12
    ignored           4

    reason                          items
    corrupt_data                        1
    ...
    truncated                           2

    labels from labels/annotations.xlsx sheet 3 'Annotations v2' (header row 3):
      cell_type                    astrocyte 3, microglia 3, neuron 4, oligodendrocyte 1
      workbook IDs matching no item: 'case_099' (Annotations v2!A20)
      items without a label: 7 (see manifest.csv)

    18 converted, 0 unchanged

    time T s (start, discover, probe and convert, each in seconds)
    read 0.8 MB in T s (MB/s overall), decoded 0.8 MB in the convert time (MB/s)

  manifest: manifests/demo/manifest.csv
  store:    data/stores/demo.zarr

Writes the store named in the spec (a folder, or a URL such as s3://bucket/x.zarr with
credentials and endpoint from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL or
[store] storage_options), and manifest.csv + summary.json beside the spec.
Progress goes to stderr: a bar on a terminal; when stderr is not a terminal (a CI log)
a line like `labzarr: converting 9/18 items (50%), 390kB/781kB, <rate>MB/s, ETA <time>`
every --progress-every seconds; nothing with --quiet (errors only).
A rerun decodes only new and changed files ("0 converted, 18 unchanged") and resumes an
interrupted run; one run per store at a time: a second one exits at once (code 2) naming
the first one's pid, host and start time.
"""

_INIT_EPILOG = """worked example:
  $ labzarr init lab --raw data/raw/lab
  wrote manifests/lab/delivery.toml
    files:       34 under raw: nifti 19, dicom 10, other (no reader) 2, text 2, excluded 1
    id_pattern:  '(?P<id>[A-Za-z]+[-_ ]?\\d+)' (first match in the path, the default), id_normalize [...]:
                 22 IDs, 0 collision(s), 1 file(s) without an ID; tried 8 (see the comments in the file)
    labels:      labels/annotations.xlsx sheet 3 'Annotations v2', header row 3, IDs in column A: 18 of 19
                 IDs match an item; pick the label columns in [labels.columns]
  next: review it, then `labzarr check manifests/lab/delivery.toml`

The ID pattern is chosen among a few (the default; the ID in the file name, in the first folder,
in the file's own folder) by planning the delivery with each as convert would: fewest IDs shared
by distinct contents, then fewest files without an ID. The workbook's sheet and ID column are the
ones whose IDs match the most items. Paths in the spec are relative to the project root (--root,
default the working directory); an existing spec is kept unless --force.
"""

_CHECK_EPILOG = """worked example:
  $ labzarr check manifests/demo/delivery.toml
  check: demo (nothing decoded)
    spec:      /abs/manifests/demo/delivery.toml
    raw:       /abs/data/raw/demo
    ...
  files: 34 under raw: nifti 19, dicom 10, other (no reader) 2, text 2, excluded 1
  plan:  18 to convert, 0 unchanged, 9 decided without decoding

  items: 22 IDs in 27 rows (convert: decoded by the run; ...)
    case1            convert   nifti  case_001/anatomical.nii -> volumes/case1
    ...
  labels: labels/annotations.xlsx sheet 3 'Annotations v2' (header row 3, IDs in column A, 19 ID rows)
    items with a workbook row: 16 of 22; rejected for their labels: label_conflict 1, no_label 4
    workbook IDs matching no item (1): 'case_099' (Annotations v2!A20)

One ID given to distinct contents (a pattern matching a folder name) is a warning naming the
files; convert's summary and summary.json (id_collisions) carry it too. Exit code 0, or 2 for
a spec or workbook that cannot be used. `convert --dry-run` prints the same.
"""

_REPORT_EPILOG = """worked example:
  $ labzarr report manifests/demo/delivery.toml
  report: data/reports/demo/index.html (11 ok items, 11 thumbnails, 12 rejected)

Open index.html in a browser (it needs no server and no network): counts per status and
reason, label value charts, a contact sheet (three mid-slices per volume, read from the
store), rejected items with reason and detail, ignored files, unmatched workbook IDs.
Run it after `labzarr convert`; it refuses a store or manifest from another run.
"""

_DIFF_EPILOG = """worked example (after case_001 was re-delivered cut in half):
  $ labzarr diff git:HEAD:manifests/demo/manifest.csv manifests/demo/manifest.csv
  demo: manifest diff: git:HEAD:manifests/demo/manifest.csv -> manifests/demo/manifest.csv
  items 27 -> 27: ok 11 -> 10, rejected 12 -> 13, ignored 4 -> 4

  status or reason changed (1)
    ~ case_001/anatomical.nii [case1]: ok -> rejected truncated; content changed
        34,001 B of content, header implies 68,002 B (vox_offset 352 + 33x41x25x1 x 2 B)

OLD and NEW are manifest.csv paths or git:REV:PATH (PATH as `git show` takes it: from
the repository root). Items are matched by source path; sections: added, removed,
status or reason changed, label changed, content changed; then a count of rows
whose other cells changed (detail, item_id, ...).
`make diff DELIVERY=name` compares the working manifest with the committed one.
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and a hint (argparse prints the whole usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n"
                     f"  hint: see `{self.prog} --help` for the options and an example\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subcommand's `run` is set as a default."""
    raw = argparse.RawDescriptionHelpFormatter
    p = _Parser(prog="labzarr", description="Convert messy imaging deliveries into validated zarr v3 stores.",
                epilog=_EPILOG, formatter_class=raw)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("convert", help="convert one delivery (spec -> store + manifest)", formatter_class=raw,
                       description="Convert one delivery into its zarr store, manifest.csv and summary.json.",
                       epilog=_CONVERT_EPILOG)
    c.add_argument("spec", type=Path, help="the delivery's delivery.toml")
    c.add_argument("--workers", type=int, default=None, help="worker processes (default: ~0.75 x physical cores)")
    c.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="run on an existing dask.distributed scheduler, e.g. tcp://127.0.0.1:8786")
    c.add_argument("--quiet", action="store_true", help="no progress and no summary, only errors")
    c.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                   help="when stderr is not a terminal: seconds between progress lines (default 10)")
    c.add_argument("--dry-run", action="store_true", help="what `labzarr check SPEC` prints, and stop")
    c.add_argument("--verify", action="store_true",
                   help="verify the store first (every chunk re-read), convert what it finds damaged again with the "
                        "rest, and verify after; exit 1 if still damaged")
    c.set_defaults(run=_convert)

    r = sub.add_parser("report", help="write the QC page of a converted delivery", formatter_class=raw,
                       description="Write a static QC page (index.html + PNGs) for a converted delivery.",
                       epilog=_REPORT_EPILOG)
    r.add_argument("spec", type=Path, help="the delivery's delivery.toml (converted already)")
    r.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="folder to (re)write (default: data/reports/<delivery>)")
    r.add_argument("--max-thumbs", type=int, default=200, metavar="N",
                   help="contact sheet size; larger deliveries show N items evenly spread (default 200)")
    r.set_defaults(run=_report)

    f = sub.add_parser("diff", help="compare two manifests (paths or git:REV:PATH)", formatter_class=raw,
                       description="Print what changed between two manifests: items added, removed, changed "
                                   "status or reason, changed labels, changed content.",
                       epilog=_DIFF_EPILOG)
    f.add_argument("old", help="the earlier manifest.csv, or git:REV:PATH")
    f.add_argument("new", help="the later manifest.csv, or git:REV:PATH")
    f.add_argument("--limit", type=int, default=50, metavar="N", help="lines per section, 0 for all (default 50)")
    f.add_argument("--exit-code", action="store_true", help="exit 1 when the manifests differ (like git diff)")
    f.set_defaults(run=_diff)

    v = sub.add_parser("verify", help="re-read every chunk of a store, check checksums and content hashes",
                       formatter_class=raw,
                       description="Re-read every chunk of every array: crc32c, missing chunk files, and each "
                                   "array's content hash recorded at write time.",
                       epilog="worked example:\n  $ labzarr verify data/stores/demo.zarr\n"
                              "  data/stores/demo.zarr: 13 arrays, 68 chunks, 727,767 B re-read\n"
                              "  ok: every chunk present and intact, every content hash matches\n\n"
                              "Exit code 0: intact; 1: damaged items, listed in a table; 2: not a labzarr store.\n"
                              "With --repair SPEC the damaged items are converted again from the delivery (the "
                              "others are kept)\nand the store verified again: exit code 0 when it is intact then.")
    v.add_argument("store", metavar="STORE|SPEC",
                   help="a store folder, or its URL (s3://bucket/x.zarr; credentials and endpoint from "
                        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL)")
    v.add_argument("--threads", type=int, default=None, help="arrays checked in parallel (default: cores, max 8)")
    v.add_argument("--repair", action="store_true",
                   help="convert the damaged items again from the delivery (needs SPEC), then verify again")
    v.add_argument("--workers", type=int, default=None, help="with --repair: as for convert")
    v.add_argument("--scheduler", default=None, metavar="ADDR", help="with --repair: as for convert")
    v.set_defaults(run=_verify)

    i = sub.add_parser("inspect", help="summarise a converted store", formatter_class=raw,
                       description="List a store's ok items with shapes, bytes on disk and compression ratios.",
                       epilog="worked example:\n  $ labzarr inspect data/stores/demo.zarr\n"
                              "  store:     data/stores/demo.zarr\n  delivery:  demo\n  items:     11 ok\n"
                              "  item_id          array                        shape              dtype    ...")
    i.add_argument("store", metavar="STORE|SPEC",
                   help="a store folder or .zip, its URL (s3://bucket/x.zarr), or a delivery.toml naming it")
    i.add_argument("--stats", action="store_true",
                   help="also print the delivery's statistics: intensity percentiles, mean and std per channel, kind "
                        "and mask class; shape, spacing and orientation; class frequencies")
    i.add_argument("--split", default=None, metavar="NAME",
                   help="with --stats: only the items of split NAME (train, val or test), as training sees them")
    i.add_argument("--ignore", type=int, action="append", default=[], metavar="CLASS",
                   help="with --stats: a mask class left out of the foreground (an ignore label); repeatable")
    i.set_defaults(run=_inspect)

    n = sub.add_parser("init", help="write a first spec for a delivery, measured on its files", formatter_class=raw,
                       description="Write manifests/NAME/delivery.toml for the delivery at --raw: the formats found, "
                                   "an id_pattern tried on the files, the label workbook's sheet and ID column, and "
                                   "every other key with its default.",
                       epilog=_INIT_EPILOG)
    n.add_argument("name", help="the delivery's name (letters, digits, '.', '_', '-'): manifests/NAME/, the store")
    n.add_argument("--raw", type=Path, required=True, metavar="PATH", help="the folder the delivery was copied to")
    n.add_argument("--root", type=Path, default=None, metavar="DIR",
                   help="the project root, which holds manifests/ (default: the working directory)")
    n.add_argument("--force", action="store_true", help="overwrite an existing manifests/NAME/delivery.toml")
    n.set_defaults(run=_init)

    k = sub.add_parser("check", help="what a conversion would do, before anything is decoded", formatter_class=raw,
                       description="List the items with their files per ID, ID collisions, the label join and the "
                                   "paths a conversion reads and writes; probes the files, decodes nothing.",
                       epilog=_CHECK_EPILOG)
    k.add_argument("spec", type=Path, help="the delivery's delivery.toml")
    k.add_argument("--limit", type=int, default=200, metavar="N", help="rows listed, 0 for all (default 200)")
    k.set_defaults(run=_check)

    d = sub.add_parser("demo", help="write the messy sample delivery used by `make demo`", formatter_class=raw,
                       description="Write a messy sample delivery (good volumes, corruptions, notes) to a folder.",
                       epilog="worked example:\n  $ labzarr demo data/raw/demo\n"
                              "  wrote sample delivery to data/raw/demo (34 files)\n"
                              "  $ labzarr convert manifests/demo/delivery.toml")
    d.add_argument("raw", type=Path, help="folder to (re)create")
    d.set_defaults(run=_demo)
    return p


def main(argv: Sequence[str] | None = None, *, restartable: bool = False) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failed items where relevant, 2 bad usage).

    A Ctrl-C propagates as KeyboardInterrupt; the `labzarr` command (`labzarr.__main__`) turns it into one
    line and exit code 130. A reader that stops early (`labzarr inspect --stats | head`) ends the output
    quietly, exit code 141 as for a process SIGPIPE ends. `restartable`: this process is the `labzarr` command's
    own, which `convert` may start again with its workers' hash seed (`run/hash_seed.py`); a caller's process is
    never replaced.
    """
    args = build_parser().parse_args(argv)
    args.restartable = restartable
    # --quiet: errors only; warnings (hidden sheets, uncached formulas) are in summary.json and on the report page.
    level = logging.ERROR if getattr(args, "quiet", False) else logging.WARNING
    logging.basicConfig(level=level, format="labzarr: %(levelname)s: %(message)s")
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe then shows here, not as a traceback when the interpreter exits
        return code
    except UsageError as e:
        print(f"labzarr: error: {e}\n  hint: {e.hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Python ignores SIGPIPE, so a write to a closed pipe raises instead of ending the process as it ends
        # `cat`; what is still buffered goes nowhere, so the flush at exit cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _quiet_dask() -> None:
    """Silence distributed's loggers for a command that runs a cluster (convert, verify --repair).

    distributed logs through the root handler once it has one (ours): its scheduler and worker chatter would
    bury the run's own messages, which say what went wrong in the delivery's terms. Importing distributed
    sets its loggers' levels from its config, so the level is set after that import, never before it.
    """
    import distributed  # noqa: F401

    logging.getLogger("distributed").setLevel(logging.CRITICAL)


def _workers_environ() -> dict[str, str]:
    """Make this process's environment the embedded cluster's workers' before it imports numpy, as a worker's
    (`run/worker_start.py`), and return it; where a fork could not give the workers that environment, their
    server is started by exec at once."""
    from .run.hash_seed import CHOSEN, caller_environ
    from .run.server_fork import forkable
    from .run.worker_start import pre_spawn_environ, start_worker_server, worker_environ

    started = {k: v for k, v in os.environ.items() if k != CHOSEN}
    wanted = worker_environ(pre_spawn_environ(), caller_environ(os.environ))
    os.environ.pop(CHOSEN, None)
    os.environ.update(wanted)
    if "numpy" in sys.modules or forkable(started, wanted):  # too late for the BLAS counts, or read at start
        start_worker_server(wanted)
    return wanted


def _start_workers(spec: Path | None = None) -> None:
    """Start the embedded cluster's worker server (`run/worker_start.py`): forked from this process once it has
    imported what the server and the driver share (`run/server_fork.py`), or by exec at once where a fork cannot
    give the workers their environment (`_workers_environ`). `spec` is loaded first: a spec that does not load is
    one error line, with nothing started."""
    from .run.server_fork import fork_worker_server
    from .run.worker_start import start_worker_server

    wanted = _workers_environ()
    if spec is not None:
        from .spec import load_spec

        load_spec(spec)
    from .run.driver import import_writers  # the driver's imports: numpy, zarr, the store's writers

    import_writers()
    if not fork_worker_server(wanted):
        start_worker_server(wanted)  # where it runs already (started above), this finds it running


def _small(args: argparse.Namespace) -> Size | None:
    """The size of the delivery where it is small enough to convert without a cluster (`run/small_run.py`), and
    this process runs one thread (a fork keeps only that one: a library caller's may run more); else None."""
    from .run.server_fork import threads
    from .run.small_run import small_delivery

    return small_delivery(args.spec) if threads() == 1 else None


def _without_cluster(args: argparse.Namespace, size: Size) -> int | None:
    """Convert a small delivery (of `size`) without a cluster, in a child this process watches
    (`run/small_run.py`): its exit code, or None where the child died or stalled (one log line says so: the caller
    then converts on the cluster, which resumes from what the child finished). The child's usage error is raised
    here."""
    from .run.small_run import Failed, run_watched

    outcome = run_watched(partial(_converted_without_cluster, args, size))
    if isinstance(outcome, Failed):
        logging.getLogger(__name__).warning("%s: the conversion without a cluster stopped (%s); converting on a "
                                            "cluster, where only the item at fault is lost", args.spec, outcome.why)
        return None
    if outcome.error is not None:
        raise UsageError(*outcome.error)
    sys.stdout.write(outcome.out)
    return outcome.code


def _converted_without_cluster(args: argparse.Namespace, size: Size, watch: Watch) -> int:
    """The child's conversion (`_without_cluster`): in the child alone for a tiny delivery, else in `--workers`
    processes forked from it, each with one BLAS thread as a cluster's worker has (set before numpy loads, which
    reads it then: `run/forked.py`)."""
    from .run.cores import default_workers
    from .run.server_fork import READ_AT_IMPORT

    processes = 1 if size.tiny() else args.workers or default_workers()
    if processes > 1:
        os.environ.update(dict.fromkeys(READ_AT_IMPORT, "1"))
    return _convert_with(args, None, watch=watch, processes=processes)


def _start_cluster_early(workers: int | None) -> StartingCluster:
    """Start the embedded cluster in a thread now (`run/starting.py`): its workers fork and register while this
    process imports the driver, rather than after it."""
    from .run.starting import StartingCluster

    _quiet_dask()  # before the cluster's first log line
    return StartingCluster(workers)


def _shown(path: Path | Location) -> str:
    """`path` relative to the working directory when it lies below it: what the user typed, not /abs/olute."""
    from labzarr.store import as_location

    return as_location(path).shown(Path.cwd())


def _positive(name: str, value: float | int, hint: str) -> None:
    if value <= 0:
        raise UsageError(f"{name} {value}: must be greater than 0", hint)


def _convert(args: argparse.Namespace) -> int:
    from .run.driver_malloc import tune_driver_malloc

    embedded = args.scheduler is None and not args.dry_run and args.spec.is_file()  # a mistyped path starts nothing
    if not embedded:
        from .run.hash_seed import forget_chosen_seed

        forget_chosen_seed(os.environ)
    tune_driver_malloc()  # this process is the driver: what it frees goes back (driver_malloc.py)
    # The collector is off while the driver imports (dask's configuration, distributed, the driver: about 150,000
    # objects and almost no garbage), as in the worker server (run/_server_heap.py); on again before the run.
    gc.disable()
    try:
        starting = None
        if embedded:
            from .run.hash_seed import CHOSEN, restart_with_workers_seed

            plain = not args.verify and (args.workers is None or args.workers >= 1) and args.progress_every > 0
            # Started again with the workers' seed (below) only once the delivery was found not small.
            size = _small(args) if plain and CHOSEN not in os.environ else None
            if size is None:
                # The worker server is forked from this process and hashes with its seed, which an interpreter reads
                # when it starts: so the command starts again with the one dask gives its workers (run/hash_seed.py).
                # A run without a cluster needs no such seed and saves the second start.
                if args.restartable:
                    restart_with_workers_seed()
            elif (code := _without_cluster(args, size)) is not None:
                return code
            _start_workers(args.spec)
            if plain:
                starting = _start_cluster_early(args.workers)
        with starting or nullcontext():
            return _convert_with(args, starting)
    finally:
        gc.enable()


def _convert_with(args: argparse.Namespace, starting: StartingCluster | None, *, watch: Watch | None = None,
                  processes: int = 1) -> int:
    """Convert (or `--dry-run`, `--verify`) as `args` say: on `starting`'s cluster, on one `convert_delivery`
    starts, or with `watch` without a cluster, in `processes` processes (`_without_cluster`'s child), each step a
    beat."""
    from .console import progress_display, summary_table
    from .run.driver import convert_delivery

    if watch is None:
        _quiet_dask()
    # The imports are done (the writers' follow in `convert_delivery`, beside the cluster's start). Frozen first:
    # on again over unfrozen imports, the collector's first pass would scan every one of them at once, where the
    # run waits for it (the run freezes its heap anyway, `driver._heap_frozen`, and hands it back when it ends).
    gc.freeze()
    gc.enable()

    if args.dry_run:  # the older name of `labzarr check`
        return _check(args)
    _positive("--progress-every", args.progress_every, "drop the option to print a line every 10 s")
    from .repair import describe_checks, repair_delivery, repaired_line

    with progress_display(sys.stderr, quiet=args.quiet, interval=args.progress_every) as shown:
        progress = shown if watch is None else _beating(shown, watch)
        checked = (repair_delivery(args.spec, only_damaged=False, workers=args.workers, scheduler=args.scheduler,
                                   progress=progress) if args.verify else None)
        if checked is not None and checked.run is not None:
            result = checked.run
        elif watch is not None:
            from .run.import_heap import importing
            from .run.small_run import stall_after
            from .spec import load_spec

            with importing():  # `stall_after` imports the run's settings, and with them the writers (zarr)
                stall_s = stall_after(load_spec(args.spec).run.item_timeout)
            watch.limit(stall_s)
            result = convert_delivery(args.spec, progress=progress, in_process=True, workers=processes)
        else:
            result = convert_delivery(args.spec, workers=args.workers, scheduler=args.scheduler, progress=progress,
                                      cluster=starting)
    if not args.quiet:
        print(summary_table(result.summary, result.run_log))
        if result.repaired:
            print(f"\n  {repaired_line(result.repaired)}")
        print(f"\nmanifest: {_shown(result.manifest)}\nstore:    {_shown(result.spec.delivery.store)}")
    if checked is not None and not (args.quiet and checked.ok):
        print(f"\n{describe_checks(checked)}")
    return 0 if checked is None or checked.ok else 1


def _beating(progress: Progress | None, watch: Watch) -> Progress:
    """`progress` (None: nothing shown, `--quiet`), with a beat at each event: each is a step the run made."""

    def shown(event: ProgressEvent) -> None:
        watch.beat()
        if progress is not None:
            progress(event)

    return shown


def _report(args: argparse.Namespace) -> int:
    from .qc.report import write_report

    _positive("--max-thumbs", args.max_thumbs, "drop the option to show up to 200 items")
    result = write_report(args.spec, out=args.out, max_thumbs=args.max_thumbs)
    failed = f", {result.failed} thumbnails unreadable (run `labzarr verify`)" if result.failed else ""
    print(f"report: {_shown(result.index)} ({result.ok} ok items, {result.thumbnails} thumbnails, "
          f"{result.rejected} rejected{failed})")
    return 0


def _store_of(arg: str) -> Location:
    """The store `arg` names: itself, or the `[delivery] store` of the spec file it is (`*.toml`)."""
    from labzarr.store import as_location, is_url

    if arg.endswith(".toml") and not is_url(arg):
        from .spec import load_spec

        return load_spec(Path(arg)).delivery.store
    return as_location(arg)


def _diff(args: argparse.Namespace) -> int:
    from .qc.diff import committed, diff_manifests, load_manifest_rows, subject

    if args.limit < 0:
        raise UsageError(f"--limit {args.limit}: must be 0 (all) or more",
                         "drop the option to show 50 lines per section")
    cwd = Path.cwd()
    if committed(args.old, cwd=cwd) is False:  # a delivery's first manifest: everything in it is new
        added = load_manifest_rows(args.new, cwd=cwd)
        print(f"{subject(args.old, args.new)}\nnew: {len(added):,} added ({args.old} is not committed yet)")
        return 1 if args.exit_code and added else 0
    result = diff_manifests(load_manifest_rows(args.old, cwd=cwd), load_manifest_rows(args.new, cwd=cwd),
                            old_name=args.old, new_name=args.new)
    print(result.describe(limit=args.limit))
    return 1 if args.exit_code and not result.empty else 0


def _verify(args: argparse.Namespace) -> int:
    from .qc.verify import verify_store

    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads {args.threads}: must be at least 1", "drop the option to use the default")
    if args.repair:
        return _repair(args)
    try:
        report = verify_store(_store_of(args.store), threads=args.threads)
    except (FileNotFoundError, ValueError, ConnectionError) as exc:
        raise UsageError(str(exc), "pass the store path from the spec's [delivery] store") from exc
    print(report.describe())
    return 0 if report.ok else 1


def _repair(args: argparse.Namespace) -> int:
    from labzarr.store import as_location, is_url

    from .console import progress_display
    from .repair import describe_repair, repair_delivery

    if not args.store.endswith(".toml") and as_location(args.store).lock_kind == "none":
        raise UsageError(f"verify --repair {args.store}: a zipped store is read-only and cannot be repaired in place",
                         "repair the store folder it was zipped from (labzarr verify --repair SPEC), then zip that "
                         "folder again")
    if not args.store.endswith(".toml") or is_url(args.store):
        raise UsageError(f"verify --repair {args.store}: repairing needs the delivery's spec, not only its store",
                         "pass the delivery.toml, e.g. labzarr verify --repair manifests/demo/delivery.toml")
    _quiet_dask()
    with progress_display(sys.stderr, quiet=False) as progress:
        result = repair_delivery(Path(args.store), only_damaged=True, workers=args.workers, scheduler=args.scheduler,
                                 progress=progress, threads=args.threads)
    print(describe_repair(result))
    return 0 if result.ok else 1


def _inspect(args: argparse.Namespace) -> int:
    from labzarr.store import open_store

    from .qc.describe import describe_store

    try:
        view = open_store(_store_of(args.store))
    except (FileNotFoundError, ValueError, ConnectionError) as exc:
        raise UsageError(str(exc), "pass the store path from the spec's [delivery] store") from exc
    if (args.split is not None or args.ignore) and not args.stats:
        raise UsageError("--split and --ignore go with --stats", "add --stats, or drop them")
    print(describe_store(view))
    if args.stats:
        from labzarr.store.format.items import IndexItems

        from .qc.fingerprint import describe_stats

        items = IndexItems.of(view.items)  # chosen and merged from the index's columns: no item built
        if args.split is not None:
            codes, values = items.text("split")
            have = sorted({v for c in set(codes.tolist()) if c >= 0 and (v := values[c])})
            if args.split not in have:
                raise UsageError(f"--split {args.split}: the store's splits are {', '.join(have) or 'none'}",
                                 "pick one of those" if have else "add [splits] to the spec and convert again")
            items = items.take(codes == values.index(args.split))
        title = "statistics" if args.split is None else f"statistics of split {args.split}"
        print()
        print(describe_stats(view.stats(items), title=title, ignore=args.ignore))
    return 0


def _check(args: argparse.Namespace) -> int:
    from .check import check_delivery

    limit = getattr(args, "limit", 200)  # `convert --dry-run` has no --limit
    if limit < 0:
        raise UsageError(f"--limit {limit}: must be 0 (all) or more", "drop the option to list 200 rows")
    print(check_delivery(args.spec).describe(limit=limit))
    return 0


def _init(args: argparse.Namespace) -> int:
    from .init import init_delivery

    result = init_delivery(args.name, args.raw, root=args.root or Path.cwd(), force=args.force)
    print(result.describe(Path(_shown(result.path))))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import write_demo

    raw = write_demo(args.raw)
    print(f"wrote sample delivery to {raw} ({sum(1 for p in raw.rglob('*') if p.is_file())} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
