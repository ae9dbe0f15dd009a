"""Scale: a delivery of many tiny files (issue 36), converted by `labzarr convert --workers 2` in a subprocess.

Unique 64x64 greyscale JPEGs in folders of 1,000 (tests/scale_data.py). The driver (the `labzarr convert`
process) and every process below it (nannies, workers) are sampled every 100 ms. Per size it prints items/s,
the driver's peak RSS and the largest worker's, the store's, the manifest's and the store index's bytes per item,
and the time and RSS of `PatchDataset(store)` in a fresh process; between the two sizes (10,000 and 100,000 files,
the issue's), the driver's growth per item (target <= 2 KB) and items/s at the larger size over items/s at the
smaller (target >= 0.9). Each size runs twice: with `[store] statistics = false` (the driver's own per-item
cost) and with the default (statistics on). Named baselines: the issue's measurement (statistics on, 2,000 and
20,000 files, before this work: shown where those are the sizes run), and in the same run the smaller size again
with `[run] window` larger than the delivery (every task submitted at once, as before windows; only at the smaller
size, where it costs seconds rather than minutes).
`--quick`: 200 and 1,000 files; `--scale-sizes`: other sizes (e.g. 2000 20000, or 100000 1000000 in `make stress`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import psutil
from common import Result

from labzarr.convert.demo import write_spec

# sections import each other by name in worker processes too
sys.path.append(str(Path(__file__).resolve().parents[1]))
from tests.scale_data import tiny_jpegs  # noqa: E402

NAME = "scale: many tiny files (64x64 greyscale JPEGs), labzarr convert --workers 2"

SIZES = (10_000, 100_000)  # the issue's sizes for its targets
QUICK = (200, 1_000)  # `--quick`: a smoke run of every row in a minute or so
UNBOUNDED = 1 << 30  # `[run] window` larger than any delivery: every task submitted at once, as before windows
_MB = 1e6
# The issue's figures (same machine kind, `labzarr convert --workers 2`, statistics on, before this work), by size:
# (wall s, driver peak RSS, largest worker RSS, store bytes).
ISSUE = {2_000: (6.9, 221e6, 148e6, 33.6e6), 20_000: (36.4, 1_511e6, 156e6, 336e6)}
# `PatchDataset(store)` construction (s, RSS added), statistics on, before this work.
ISSUE_CONSTRUCTION = {2_000: (0.031, 4.4e6), 20_000: (0.72, 46e6)}
ISSUE_KB_PER_ITEM = {True: 73.0, False: 6.3}  # driver growth per item, statistics on / off
TARGET_KB_PER_ITEM = 2.0  # driver growth per item between the sizes, at most
TARGET_SPEED_RATIO = 0.9  # items/s at the larger size over items/s at the smaller, at least


@dataclass(frozen=True)
class Measured:
    """One conversion: wall seconds, peak RSS of the driver and of its largest descendant, store bytes, the
    manifest's and the store index's bytes, and opening the store: `PatchDataset(store)` seconds and RSS added."""

    items: int
    wall_s: float
    driver_peak: int
    worker_peak: int
    store_bytes: int
    manifest_bytes: int
    index_bytes: int
    construction_s: float
    construction_rss: int


# `PatchDataset(store)` in a fresh process: seconds and RSS added, measured after its imports.
_CONSTRUCT = """
import sys, time, psutil
from labzarr import PatchDataset
process = psutil.Process()
before = process.memory_info().rss
t = time.perf_counter()
ds = PatchDataset(sys.argv[1], patch_size=(32, 32))
print(time.perf_counter() - t, process.memory_info().rss - before, len(ds.items))
"""


def _construction(store: Path, items: int) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", _CONSTRUCT, str(store)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    seconds, rss, n = out.stdout.split()
    if int(n) != items:
        raise RuntimeError(f"PatchDataset({store}) has {n} items, the manifest {items} ok rows")
    return float(seconds), int(rss)


def delivery(root: Path, n: int, *, statistics: bool, window: int | None = None) -> Path:
    """A spec for `n` tiny JPEGs (generated once under root/raw-N), converting into a fresh store."""
    raw = tiny_jpegs(root / f"raw-{n}", n)
    tag = f"{n}-{'stats' if statistics else 'nostats'}" + (f"-w{window}" if window else "")
    store = root / "stores" / f"{tag}.zarr"
    if store.exists():
        shutil.rmtree(store)
    extra = "" if statistics else "statistics = false\n"
    if window is not None:
        extra += f"\n[run]\nwindow = {window}\n"
    return write_spec(root / "manifests" / tag / "delivery.toml", raw=raw, store=store, name=f"scale-{tag}",
                      labels=False, extra=extra)


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def convert(spec: Path, *, workers: int = 2) -> Measured:
    """Run `labzarr convert SPEC --workers N --quiet` in a subprocess, sampling RSS every 100 ms."""
    proc = psutil.Popen([sys.executable, "-m", "labzarr", "convert", str(spec), "--workers", str(workers), "--quiet"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    peaks = {"driver": 0, "worker": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                peaks["driver"] = max(peaks["driver"], proc.memory_info().rss)
                for child in proc.children(recursive=True):
                    try:
                        peaks["worker"] = max(peaks["worker"], child.memory_info().rss)
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            stop.wait(0.1)

    t = time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"labzarr convert {spec} failed ({proc.returncode}): {err.decode()[-2000:]}")
    store = Path(tomllib.loads(spec.read_text())["delivery"]["store"])
    manifest = spec.parent / "manifest.csv"
    items = sum(1 for _ in manifest.open()) - 1
    seconds, rss = _construction(store, items)
    return Measured(items=items, wall_s=wall, driver_peak=peaks["driver"], worker_peak=peaks["worker"],
                    store_bytes=_tree_bytes(store), manifest_bytes=manifest.stat().st_size,
                    index_bytes=_tree_bytes(store / "index"), construction_s=seconds, construction_rss=rss)


def _label(statistics: bool) -> str:
    return "statistics on (default)" if statistics else "[store] statistics = false"


def run(workdir: Path, *, quick: bool = False, sizes: tuple[int, ...] | None = None) -> list[Result]:
    sizes = tuple(sorted(sizes or (QUICK if quick else SIZES)))
    root = workdir / "scale"
    out: list[Result] = []
    for statistics in (False, True):
        got = {n: convert(delivery(root, n, statistics=statistics)) for n in sizes}
        # The smaller delivery with every task submitted at once: what windows change, in this run.
        before = convert(delivery(root, sizes[0], statistics=statistics, window=UNBOUNDED))
        out += results(statistics, got, before)
    return out


def results(statistics: bool, got: dict[int, Measured], before: Measured) -> list[Result]:
    """The rows of one statistics setting: growth per item and the items/s ratio between the smallest and the
    largest size of `got`, then each size's measures; `before` (the smallest size, window unbounded) beside that
    size's."""
    label = _label(statistics)
    small, large = min(got), max(got)
    out: list[Result] = []
    growth = f"{label}: driver growth per item, {small:,} -> {large:,} files"
    if small in ISSUE and large in ISSUE:
        out.append(Result("issue 36 (before)", ISSUE_KB_PER_ITEM[statistics], "KB/item", higher_is_better=False,
                          baseline=True, group=growth))
    kb = _growth(got[small], got[large])
    met = "met" if kb <= TARGET_KB_PER_ITEM else "NOT met"
    out.append(Result("labzarr convert --workers 2", kb, "KB/item", higher_is_better=False, group=growth,
                      note=f"target <= {TARGET_KB_PER_ITEM:g} KB/item: {met}"))
    speed = f"{label}: items/s at {large:,} files over items/s at {small:,}"
    ratio = _speed(got[large]) / _speed(got[small])
    out.append(Result("labzarr convert --workers 2", ratio, "ratio", group=speed,
                      note=f"target >= {TARGET_SPEED_RATIO:g}: {'met' if ratio >= TARGET_SPEED_RATIO else 'NOT met'}"))
    for n, m in got.items():
        issue = ISSUE.get(n) if statistics else None
        built = ISSUE_CONSTRUCTION.get(n) if statistics else None
        group = f"{label}, {n:,} files"
        rows = [("items/s", _speed(m), "items/s", True, issue and n / issue[0], _speed(before)),
                ("driver peak RSS", m.driver_peak / _MB, "MB", False, issue and issue[1] / _MB,
                 before.driver_peak / _MB),
                ("largest worker peak RSS", m.worker_peak / _MB, "MB", False, issue and issue[2] / _MB,
                 before.worker_peak / _MB),
                ("store bytes per item", m.store_bytes / m.items, "B", False, issue and issue[3] / n,
                 before.store_bytes / before.items),
                ("manifest bytes per item", m.manifest_bytes / m.items, "B", False, None,
                 before.manifest_bytes / before.items),
                ("index bytes per item", m.index_bytes / m.items, "B", False, None, before.index_bytes / before.items),
                ("PatchDataset(store) construction", m.construction_s, "s", False, built and built[0],
                 before.construction_s),
                ("PatchDataset(store) construction RSS", m.construction_rss / _MB, "MB", False,
                 built and built[1] / _MB, before.construction_rss / _MB)]
        for what, value, unit, higher, base, unbounded in rows:
            if base:
                out.append(Result(f"{what}: issue 36 (before)", base, unit, higher_is_better=higher, baseline=True,
                                  group=f"{group}: {what}"))
            if n == small and before.items == m.items:
                out.append(Result(f"{what}: window unbounded (this run)", unbounded, unit, higher_is_better=higher,
                                  group=f"{group}: {what}", note="every task submitted at once"))
            out.append(Result(f"{what}: labzarr convert --workers 2", value, unit, higher_is_better=higher,
                              group=f"{group}: {what}"))
    return out


def _speed(m: Measured) -> float:
    return m.items / m.wall_s


def _growth(small: Measured, large: Measured) -> float:
    """Driver peak RSS growth per item between two sizes, in KB."""
    return (large.driver_peak - small.driver_peak) / max(1, large.items - small.items) / 1e3
