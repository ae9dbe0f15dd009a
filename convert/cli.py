"""The `labzarr` command: argument parsing, output, progress and log configuration live here only."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError

__all__ = ["build_parser", "main"]

_EPILOG = """examples:
  labzarr convert manifests/lab-2026-11/delivery.toml --workers 2
  labzarr inspect data/stores/lab-2026-11.zarr
  labzarr demo data/raw/demo
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subcommand's `run` is set as a default."""
    p = argparse.ArgumentParser(prog="labzarr", description="Convert messy imaging deliveries into validated zarr v3 stores.",
                                epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("convert", help="convert one delivery (spec -> store + manifest)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  labzarr convert manifests/demo/delivery.toml --workers 2\n\n"
                              "Writes the store named in the spec, and manifest.csv + summary.json beside the spec.")
    c.add_argument("spec", type=Path, help="the delivery's delivery.toml")
    c.add_argument("--workers", type=int, default=None, help="worker processes (default: ~0.75 x physical cores)")
    c.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="run on an existing dask.distributed scheduler, e.g. tcp://127.0.0.1:8786")
    c.add_argument("--quiet", action="store_true", help="no progress, only errors")
    c.add_argument("--dry-run", action="store_true", help="print the plan (discovery + probes) and stop")
    c.set_defaults(run=_convert)

    i = sub.add_parser("inspect", help="summarise a converted store",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  labzarr inspect data/stores/demo.zarr")
    i.add_argument("store", type=Path, help="a store folder or .zip")
    i.set_defaults(run=_inspect)

    d = sub.add_parser("demo", help="write the messy sample delivery used by `make demo`",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  labzarr demo data/raw/demo")
    d.add_argument("raw", type=Path, help="folder to (re)create")
    d.set_defaults(run=_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failed items where relevant, 2 bad usage)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="labzarr: %(levelname)s: %(message)s")
    try:
        return int(args.run(args))
    except UsageError as e:
        print(f"labzarr: error: {e}\n  hint: {e.hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("labzarr: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


def _convert(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .run import convert_delivery, dry_run

    if args.dry_run:
        print(dry_run(args.spec, cwd=Path.cwd()).describe())
        return 0
    bar = None

    def progress(done: int, total: int, row: object) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="item", desc="converting", file=sys.stderr)
        bar.update(1)

    try:
        result = convert_delivery(args.spec, workers=args.workers, scheduler=args.scheduler,
                                  progress=None if args.quiet else progress)
    finally:
        if bar is not None:
            bar.close()
    if not args.quiet:
        s = result.summary
        c = s["counts"]
        print(f"{s['delivery']}: {c['ok']} ok, {c['rejected']} rejected, {c['ignored']} ignored "
              f"({c['files']} files) in {s['timings']['total_s']:.1f} s")
        for reason, n in s["reasons"].items():
            print(f"  {reason:<30} {n}")
        if s["label_workbook"]:
            _print_labels(s)
        print(f"manifest: {result.manifest}\nstore:    {result.spec.delivery.store}")
    return 0


def _print_labels(s: dict[str, Any]) -> None:
    book = s["label_workbook"]
    print(f"labels from {book['path']} sheet {book['sheet_index']} {book['sheet']!r} (header row {book['header_row']}):")
    for name, counts in s["labels"].items():
        values = ", ".join(f"{v} {n}" for v, n in counts.items()) or "none"
        print(f"  {name:<30} {values}")
    if s["unmatched_workbook_ids"]:
        ids = ", ".join(f"{u['id'].strip()!r} ({u['cell']})" for u in s["unmatched_workbook_ids"][:5])
        more = len(s["unmatched_workbook_ids"]) - 5
        print(f"  workbook IDs matching no item: {ids}" + (f" and {more} more" if more > 0 else ""))
    if s["unlabelled_items"]:
        print(f"  items without a label: {len(s['unlabelled_items'])} (see manifest.csv)")


def _inspect(args: argparse.Namespace) -> int:
    from labzarr.loaders.store import open_store

    from .inspect import describe_store

    try:
        view = open_store(args.store)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc), "pass the store path from the spec's [delivery] store") from exc
    print(describe_store(view))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import write_demo

    raw = write_demo(args.raw)
    print(f"wrote sample delivery to {raw} ({sum(1 for p in raw.rglob('*') if p.is_file())} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
