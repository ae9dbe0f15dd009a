"""Conversion throughput and memory: labzarr (1 and 2 workers) against the straightforward path, on the same files.

Inputs (generated once, cached under WORKDIR/convert/): four 512x512x300 int16
CT-like `.nii.gz` (629 MB uncompressed) and one 1024x1024x1000 int16 volume
(2.1 GB uncompressed). Store: 64^3 chunks, blosc-zstd level 5 + crc32c.

Rows (uncompressed MB per wall second, one run, compare ratios):
- straightforward: one process, `nibabel.load` + `as_closest_canonical` + a
  zarr-python write of the whole array with the same codecs (the baseline);
- labzarr with 1 and 2 workers (a ready LocalCluster: `execute`, which also
  hashes every file and writes the manifest);
- labzarr with 2 workers on other layouts, with their compression ratios (the
  codec is most of the cost): the spec's default (32^3 chunks in 256x256x128
  shards, blosc-lz4-5, chosen for patch reads by bench/loaders.py), plain
  zstd-5 and blosc-zstd-3;
- gunzip only (python zlib, ISA-L), codec encode only (one thread);
- CPU cost (MB per CPU-second, all processes): comparable when the machine is
  shared, where wall-clock MB/s mostly measures this run's share of the cores;
- the 2 GB volume: labzarr's MB/s written by one task (`[run] parts_bytes = 0`)
  and in two parts, one per worker (the default), and the peak RSS of
  its largest process above that process's baseline (a worker right after its
  imports), next to the straightforward path's peak RSS.

A second group, peak RSS per worker: two 512x512x800 int16 `.nii.gz` (420 MB
each, one per worker) converted by 2 workers in the default layout and with
`chunks = [64, 64, 64]` (whose default shards are 512x512x256): each worker's
peak above its baseline, against the 256 MB bound of tests/convert/test_memory.py.

A third group, statistics off and on: the four 512x512x300 volumes converted by 2 workers in the default
layout with `[store] statistics = false` (the baseline) and `true`, alternated, best of five each, in wall
MB/s and in MB per CPU-second of all processes; the accumulator alone on one reoriented slab; and counting that
slab's values with numpy's bincount against labzarr's compiled loop (convert/_counting.py), and what loading
that loop costs a fresh worker (the conversions above load it beforehand, with the other imports).

A group "at the decode limit" (issue 36): two CT-like int16 `.nii.gz` volumes (512x512x800 each, 839 MB
decoded in all; `python bench/convert.py --decode-limit --size 512x512x200` runs this group alone, smaller),
converted in the default layout by 1 worker and by 2, each on a fresh cluster; against them the gzip-decode
limit, cores x single-core python-zlib inflate MB/s measured in the same run. Printed: 2 workers / 1 worker
(target >= 1.7) and 2 workers / that limit (target >= 0.6), the CPU seconds each item took in each run, one
worker again with every thread pinned to one core (so its task gets one encoding thread: the per-process
scaling the 1.7 target asks about, which a worker free to use every core cannot show on 2 cores), and the
rate this disk takes fsynced writes at, times the store's compression ratio: the decoded MB/s the store's disk
alone allows (every chunk is fsynced before an array is installed).

A fourth and fifth group, the writer's C-order copy: a reoriented slab (x fastest in memory, x and y
flipped) made C-contiguous whole and chunk by chunk, by numpy in one pass, tile by tile with the flips left
in (labzarr before 2026-12-05), and by labzarr's copies (the shard writer's: a job's 2x2x2 chunks gathered in
memory order, then each C-ordered from cache into one reused buffer; and, for items of at least 2^26 voxels,
each chunk transposed straight out of the slab by compiled tiles in vector registers, `transpose.py`; `--copy`
runs these two groups alone).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import dask
import nibabel as nib
import numcodecs
import numpy as np
from common import Result, median_p90, time_calls
from distributed import Client, LocalCluster
from isal import isal_zlib

from labzarr.convert._counting import COMPILED_FROM, count_into
from labzarr.convert.demo import write_spec
from labzarr.convert.intensity import BLOCK, Accumulator
from labzarr.convert.run.cluster import local_cluster_config
from labzarr.convert.run.driver import execute
from labzarr.convert.spec import StoreSpec, load_spec
from labzarr.convert.write.arrays import codecs
from labzarr.convert.write.writer import c_order_copy, copy_into, gather_copy, slab_copy_into
from labzarr.readers import Slab

NAME = "conversion: uncompressed MB/s, 4 x 512x512x300 int16 .nii.gz (629 MB), 64^3 blosc-zstd-5 + crc32c"
SPEC = StoreSpec(chunks=(64, 64, 64), compressor="blosc-zstd", level=5, checksum=True)
SMALL = (512, 512, 300)
BIG = (1024, 1024, 1000)
PEAK = (512, 512, 800)  # the peak-RSS group's volumes: 420 MB each
PEAK_BOUND = 256  # MB above a worker's baseline: the bound tests/convert/test_memory.py asserts
MB = 1e6


def _ct_planes(shape: tuple[int, int, int], seed: int, z0: int, z1: int) -> np.ndarray:
    """CT-like planes z0..z1: air outside an ellipsoid body, soft tissue inside, noise sd 20 HU."""
    X, Y, Z = shape
    x, y, z = np.ogrid[:X, :Y, z0:z1]
    body = ((x - X / 2) / (0.4 * X)) ** 2 + ((y - Y / 2) / (0.3 * Y)) ** 2 + ((z - Z / 2) / (0.47 * Z)) ** 2 < 1
    rng = np.random.default_rng([seed, z0])
    return (np.where(body, 40, -1000) + rng.normal(0, 20, body.shape)).astype(np.int16)


def _write_ct(path: Path, shape: tuple[int, int, int], seed: int) -> Path:
    """A gzip level-1 .nii.gz (nibabel's default level), written plane block by plane block."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    img = nib.Nifti1Image(np.zeros((1, 1, 1), np.int16), np.diag([-0.7, -0.7, 1.25, 1.0]))
    hdr = img.header.copy()
    hdr.set_data_shape(shape)
    hdr.set_data_dtype(np.int16)
    hdr["vox_offset"] = 352
    tmp = path.with_suffix(".tmp")
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with tmp.open("wb") as f:
        f.write(comp.compress(bytes(hdr.binaryblock) + b"\x00" * 4))
        for z0 in range(0, shape[2], 32):
            f.write(comp.compress(_ct_planes(shape, seed, z0, min(shape[2], z0 + 32)).tobytes(order="F")))
        f.write(comp.flush())
    tmp.replace(path)
    return path


def _inputs(workdir: Path) -> tuple[list[Path], Path]:
    root = workdir / "convert"
    small = [_write_ct(root / "raw4" / f"case_{i:03d}.nii.gz", SMALL, i) for i in range(4)]
    big = _write_ct(root / "raw1" / "case_100.nii.gz", BIG, 100)
    return small, big


def _peak_inputs(workdir: Path) -> Path:
    """The peak-RSS group's two volumes (generated once, cached like the others); returns their folder."""
    raw = workdir / "convert" / "raw2x800"
    for i in range(2):
        _write_ct(raw / f"case_{200 + i:03d}.nii.gz", PEAK, 200 + i)
    return raw


def _nbytes(shape: tuple[int, ...]) -> float:
    return float(np.prod(shape)) * 2


def _straightforward(paths: list[Path], store: Path) -> float:
    """nibabel full load, canonical, zarr-python write of the whole array: wall seconds."""
    import zarr

    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    for i, p in enumerate(paths):
        img = nib.as_closest_canonical(nib.load(p))
        data = np.asanyarray(img.dataobj)[np.newaxis]
        arr = zarr.create_array(zarr.storage.LocalStore(store), name=f"v{i}", shape=data.shape, dtype=data.dtype,
                                chunks=(1, 64, 64, 64), compressors=codecs(SPEC), fill_value=0, overwrite=True)
        arr[...] = data
    return time.perf_counter() - t


def _straightforward_peak_rss(path: Path, store: Path) -> float:
    """Peak RSS (B) of a fresh process running the straightforward path on `path`, minus its baseline."""
    code = (
        "import resource, sys; sys.path.insert(0, 'bench'); import convert as c; from pathlib import Path;"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        f"c._straightforward([Path({str(path)!r})], Path({str(store)!r}));"
        "print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    base, peak = map(int, out.stdout.split()[-2:])
    return (peak - base) * 1024.0


def _worker_rss(kind: str) -> int:
    """VmRSS or VmHWM (peak since the last reset) of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(kind + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{kind} missing from /proc/self/status")


def _reset_peak() -> int:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    return _worker_rss("VmRSS")


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process, all its threads."""
    t = os.times()
    return t.user + t.system


def _store_toml(compressor: str, level: int) -> str:
    """A `[store]` section of unsharded 64^3 chunks (the straightforward path's layout) with this codec + crc32c."""
    return (f'[store]\nchunks = [64, 64, 64]\nshards = false\ncompressor = "{compressor}"\nlevel = {level}\n'
            "checksum = true\n")


SAME_STORE = _store_toml("blosc-zstd", 5)  # what SPEC says, for the rows compared with the baseline
DEFAULT_STORE = "[store]\n"  # every key at the spec's default


@dataclass(frozen=True, slots=True)
class _Run:
    """One labzarr conversion: wall s of execute, CPU s of workers and driver, and per worker (in address order)
    its peak RSS above its baseline and that baseline (B)."""

    wall: float
    cpu: float
    peaks: tuple[tuple[int, int], ...]

    @property
    def worst(self) -> tuple[int, int]:
        """(peak above baseline, baseline) of the worker that rose most."""
        return max(self.peaks)


def _labzarr(raw: Path, root: Path, workers: int, store_toml: str = SAME_STORE,
             parts_bytes: int | None = None, *, repeat: int = 1) -> _Run:
    """Convert `raw` on a ready LocalCluster with the `[store]` section `store_toml`; with `repeat`, as many
    times from scratch on the same cluster, keeping the fastest run (as the DICOM section's baseline is)."""
    store = root / f"store-{workers}w.zarr"
    spec_path = write_spec(root / f"manifests-{workers}w" / raw.name / "delivery.toml", raw=raw, store=store,
                           name=raw.name, labels=False)
    # The demo spec's [store] section is swapped whole, so a row's layout never depends on the demo's defaults.
    text, n = re.subn(r"\[store\]\n(?:[a-z_]+ = [^\n]*\n)*", lambda _: store_toml, spec_path.read_text())
    assert n == 1, f"no [store] section in {spec_path}"
    if parts_bytes is not None:
        text += f"\n[run]\nparts_bytes = {parts_bytes}\n"
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    with dask.config.set(local_cluster_config(crash_retries=1)), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                         memory_limit=0) as cluster, Client(cluster) as client:
        # imports are the baseline, not the conversion: the modules, and the statistics' compiled counting loop
        # (which a worker otherwise loads at its first large slab; the statistics group shows what that costs)
        client.run(lambda: __import__("labzarr.convert.run.volume_task"))
        client.run(_load_counting_loop)
        runs = []
        for _ in range(repeat):
            shutil.rmtree(store, ignore_errors=True)
            base = client.run(_reset_peak)
            cpu0 = sum(client.run(_cpu_seconds).values()) + _cpu_seconds()
            t = time.perf_counter()
            result = execute(spec, client)
            wall = time.perf_counter() - t
            cpu = sum(client.run(_cpu_seconds).values()) + _cpu_seconds() - cpu0
            peaks = client.run(_worker_rss, "VmHWM")
            assert result.summary["counts"]["ok"] == len(result.rows), result.rows
            runs.append(_Run(wall, cpu, tuple((peaks[w] - base[w], base[w]) for w in sorted(peaks))))
    return min(runs, key=lambda r: r.wall)


def _load_counting_loop() -> None:
    """Load numba's compiled loops a large item uses in a worker (the counting loop and the chunk transposition,
    each from numba's cache): a cost per worker process, not per item."""
    from labzarr.convert._counting import _compiled
    from labzarr.convert.write.transpose import _kernel

    _compiled()
    _kernel()


def _counting_loop_load_seconds() -> float:
    """Wall seconds a fresh process takes to import numba and load the cached counting loop (best of 3)."""
    code = ("import time, labzarr.convert._counting as c; t = time.perf_counter(); c._compiled(); "
            "print(time.perf_counter() - t)")
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.split()[-1]) for _ in range(3))


def _gunzip(paths: list[Path], module: object) -> float:
    t = time.perf_counter()
    for p in paths:
        d = module.decompressobj(wbits=31)  # type: ignore[attr-defined]
        with p.open("rb") as f:
            while block := f.read(1 << 20):
                while block:
                    d.decompress(block, 4 << 20)
                    block = d.unconsumed_tail
    return time.perf_counter() - t


def _encode_one_thread(planes: np.ndarray) -> float:
    """numcodecs blosc-zstd-5 (1 thread) + crc32c on 64^3 chunks: wall seconds."""
    import crc32c

    numcodecs.blosc.set_nthreads(1)
    codec = numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    chunks = [np.ascontiguousarray(planes[i:i + 64, j:j + 64, :]) for i in range(0, planes.shape[0], 64)
              for j in range(0, planes.shape[1], 64)]
    t = time.perf_counter()
    for c in chunks:
        crc32c.crc32c(codec.encode(c))
    return time.perf_counter() - t


def run(workdir: Path) -> list[Result]:
    small, big = _inputs(workdir)
    root = workdir / "convert" / "out"
    root.mkdir(parents=True, exist_ok=True)
    total = 4 * _nbytes(SMALL) / MB
    out: list[Result] = []
    cpu0 = _cpu_seconds()
    t = _straightforward(small, root / "straight.zarr")
    sf_cpu = _cpu_seconds() - cpu0
    out.append(Result("straightforward: nibabel load + zarr write, 1 process", total / t, "MB/s", baseline=True))
    cpu_rows = [Result("CPU cost: straightforward", total / sf_cpu, "MB/cpu-s", note="load-independent")]
    for workers in (1, 2):
        r = _labzarr(small[0].parent, root, workers)
        out.append(Result(f"labzarr, {workers} worker{'s' if workers > 1 else ''} (incl. sha256 + manifest)",
                          total / r.wall, "MB/s"))
        cpu_rows.append(Result(f"CPU cost: labzarr, {workers} worker{'s' if workers > 1 else ''}", total / r.cpu,
                               "MB/cpu-s", note=f"{total / r.cpu / (total / sf_cpu):.2f}x the straightforward path"))
    for label, store_toml in (("default layout: 32^3 in shards, blosc-lz4-5", DEFAULT_STORE),
                              ("zstd-5", _store_toml("zstd", 5)), ("blosc-zstd-3", _store_toml("blosc-zstd", 3))):
        wall = _labzarr(small[0].parent, root, 2, store_toml).wall
        ratio = total * MB / sum(f.stat().st_size for f in (root / "store-2w.zarr").rglob("c/*/*/*/*"))
        out.append(Result(f"labzarr, 2 workers, {label} (codec choice)", total / wall, "MB/s",
                          note=f"compression ratio {ratio:.2f}"))
    out.append(Result("gunzip only, python zlib", total / _gunzip(small, zlib), "MB/s"))
    out.append(Result("gunzip only, ISA-L (isal_zlib)", total / _gunzip(small, isal_zlib), "MB/s"))
    planes = _ct_planes(SMALL, 0, 0, 64)
    out.append(Result("encode only, blosc-zstd-5 + crc32c, 1 thread", planes.nbytes / MB / _encode_one_thread(planes),
                      "MB/s"))
    out += cpu_rows
    big_mb = _nbytes(BIG) / MB
    wall = _labzarr(big.parent, root, 2, parts_bytes=0).wall
    out.append(Result("2.1 GB volume: labzarr, 2 workers, one task (parts_bytes = 0)", big_mb / wall, "MB/s"))
    r = _labzarr(big.parent, root, 2)
    peak, base = r.worst
    out.append(Result("2.1 GB volume: labzarr, 2 workers, in 2 parts (default)", big_mb / r.wall, "MB/s"))
    out.append(Result("2.1 GB volume: labzarr peak RSS above baseline", peak / MB, "MB", higher_is_better=False,
                      note=f"largest process; its baseline {base / MB:.0f} MB; target <= 256"))
    sf_peak = _straightforward_peak_rss(big, root / "straight-big.zarr")
    out.append(Result("2.1 GB volume: straightforward peak RSS above baseline", sf_peak / MB, "MB",
                      higher_is_better=False))
    out += decode_limit_rows(workdir, PEAK)
    out += _peak_rows(_peak_inputs(workdir), root)
    out += _statistics_rows(small[0].parent, root, total)
    out += _copy_rows()
    shutil.rmtree(root, ignore_errors=True)
    return out


def _statistics_rows(raw: Path, root: Path, total: float) -> list[Result]:
    """The statistics group: the same conversion with `[store] statistics` off and on, alternated, best of 5 each
    (the machine's noise is larger than the difference), in wall MB/s and in MB per CPU-second of all processes
    (which another job on the machine does not change); then the accumulator and its counting alone on one slab."""
    group = "statistics off vs on: 4 x 512x512x300 int16 .nii.gz, 2 workers, default layout (target within 5 %)"
    walls: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(5):
        for on in (False, True):
            r = _labzarr(raw, root, 2, f"[store]\nstatistics = {'true' if on else 'false'}\n")
            walls[on].append(r.wall)
            cpus[on].append(r.cpu)
    off, on = total / min(walls[False]), total / min(walls[True])
    cpu_off, cpu_on = total / min(cpus[False]), total / min(cpus[True])
    slab = np.asfortranarray(_ct_planes((512, 512, 64), 0, 0, 64))[np.newaxis]
    codes = np.ascontiguousarray(slab).reshape(-1).view(np.uint16)

    def accumulate() -> None:
        acc = Accumulator(slab.dtype)
        acc.update(Slab(region=tuple(slice(0, n) for n in slab.shape), data=slab))
        acc.result(1)

    def bincount() -> None:
        dense = np.zeros(1 << 16, np.int64)
        for lo in range(0, codes.size, BLOCK):
            dense += np.bincount(codes[lo : lo + BLOCK], minlength=1 << 16)

    def counting() -> None:
        count_into(codes, np.zeros(1 << 16, np.int64))

    alone, _ = median_p90(time_calls(accumulate, 5))
    numpy_s, _ = median_p90(time_calls(bincount, 5))
    loop_s, _ = median_p90(time_calls(counting, 5))
    mb = slab.nbytes / MB
    return [Result("labzarr, statistics = false", off, "MB/s", baseline=True, group=group),
            Result("labzarr, statistics = true (default)", on, "MB/s", group=group, note=_apart(off, on)),
            Result("CPU cost: statistics = false", cpu_off, "MB/cpu-s", group=group, note="all processes"),
            Result("CPU cost: statistics = true", cpu_on, "MB/cpu-s", group=group, note=_apart(cpu_off, cpu_on)),
            Result("statistics alone: one reoriented 512x512x64 int16 slab, 1 thread", mb / alone, "MB/s",
                   group=group, note="convert/intensity.py Accumulator"),
            Result("counting its values: numpy bincount in 2^18 blocks", mb / numpy_s, "MB/s", group=group,
                   note="copies each block to intp, then counts"),
            Result("counting its values: labzarr's count_into", mb / loop_s, "MB/s", group=group,
                   note="convert/_counting.py, compiled, in place"),
            Result("loading that compiled loop in a fresh process", _counting_loop_load_seconds(), "s",
                   higher_is_better=False, group=group,
                   note=f"once per worker, at its first slab of >= {COMPILED_FROM:,} values; bincount below")]


def _apart(base: float, value: float) -> str:
    return f"{(base - value) / base:+.1%} slower" if value < base else f"{(value - base) / base:.1%} faster (noise)"


def _copy_rows() -> list[Result]:
    """The C-order copy groups: a reoriented slab (x fastest in memory, x and y flipped as a radiological
    volume's are) made C-contiguous, as the writer does for unsharded arrays; and the same slab's 32^3 chunks
    copied one by one, as the shard writer did, or gathered a job (a 2x2x2 Morton run of chunks) at a time and
    then C-ordered chunk by chunk into one reused buffer, as it does now. Each against numpy's one pass and
    against copying each tile in its memory order with the flips left in (what labzarr did before it read
    flipped axes forwards). Outputs are dropped as they are made, as the shard writer drops each chunk once
    encoded."""
    slab = np.asfortranarray(_ct_planes((512, 512, 64), 0, 0, 64))[np.newaxis][:, ::-1, ::-1, :]
    mb = slab.nbytes / MB
    chunks = [slab[:, i:i + 32, j:j + 32, k:k + 32] for i in range(0, 512, 32) for j in range(0, 512, 32)
              for k in range(0, 64, 32)]
    cubes = [slab[:, i:i + 64, j:j + 64, k:k + 64] for i in range(0, 512, 64) for j in range(0, 512, 64)
             for k in range(0, 64, 64)]

    def flips_left_in(view: np.ndarray) -> np.ndarray:
        out = np.empty(view.shape, view.dtype)
        for starts in itertools.product(*(range(0, n, 64) for n in view.shape)):
            sel = tuple(slice(s, s + 64) for s in starts)
            out[sel] = view[sel].copy(order="K")
        return out

    def each(copy: object) -> None:
        for c in chunks:
            copy(c)  # type: ignore[operator]

    def by_job() -> None:
        buffer = np.empty((1, 32, 32, 32), slab.dtype)
        for cube in cubes:
            box = gather_copy(cube)
            for i, j, k in itertools.product((0, 32), repeat=3):
                copy_into(box[:, i:i + 32, j:j + 32, k:k + 32], buffer)

    def compiled() -> None:
        buffer = np.empty((1, 32, 32, 32), slab.dtype)
        for c in chunks:
            slab_copy_into(c, buffer)

    compiled()  # numba's import and the kernel's load (or compilation) are not what this group times
    out: list[Result] = []
    group = "C-order copy of a reoriented 512x512x64 int16 slab (convert/write/writer.py)"
    for label, copy in (("numpy ascontiguousarray (one pass)", np.ascontiguousarray),
                        ("64^3 tiles in memory order, flips left in (before)", flips_left_in),
                        ("labzarr c_order_copy (flipped axes read forwards)", c_order_copy)):
        seconds, _ = median_p90(time_calls(lambda copy=copy: copy(slab), 5))
        out.append(Result(label, mb / seconds, "MB/s", baseline=copy is np.ascontiguousarray, group=group))
    group = "the same slab's 32^3 chunks made C-contiguous (the shard writer's copy)"
    for label, run in (("numpy ascontiguousarray, chunk by chunk", lambda: each(np.ascontiguousarray)),
                       ("64^3 tiles in memory order, flips left in, chunk by chunk", lambda: each(flips_left_in)),
                       ("c_order_copy chunk by chunk (the shard writer before 2026-12-07)", lambda: each(c_order_copy)),
                       ("gather_copy of each job's 2x2x2 chunks, then copy_into a reused chunk", by_job),
                       ("compiled tile transposition of each chunk out of the slab (items >= 2^26 voxels)",
                        compiled)):
        seconds, _ = median_p90(time_calls(run, 5))
        out.append(Result(label, mb / seconds, "MB/s", baseline=label.startswith("numpy"), group=group))
    return out


def _item_cpu(raw: Path, root: Path, workers: int, *, one_core: bool = False) -> tuple[float, float, tuple[float, ...]]:
    """Convert `raw` in the default layout on a fresh cluster of `workers`: (wall s, CPU s of the driver, CPU s of
    each worker in address order). With `one_core`, each worker is pinned to one core of its own (every thread,
    before the run): its usable cores are then 1, so the driver gives its task one encoding thread."""
    store = root / f"store-{workers}w.zarr"
    spec_path = write_spec(root / f"manifests-{workers}w" / raw.name / "delivery.toml", raw=raw, store=store,
                           name=raw.name, labels=False)
    spec = load_spec(spec_path)  # the demo spec's [store] is the default layout
    with dask.config.set(local_cluster_config(crash_retries=1)), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                         memory_limit=0) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("labzarr.convert.run.volume_task"))
        client.run(_load_counting_loop)
        if one_core:
            cores = sorted(os.sched_getaffinity(0))
            for i, address in enumerate(sorted(client.scheduler_info()["workers"])):
                client.run(_pin, cores[i % len(cores)], workers=[address])
        shutil.rmtree(store, ignore_errors=True)
        before, driver = client.run(_cpu_seconds), _cpu_seconds()
        t = time.perf_counter()
        result = execute(spec, client)
        wall = time.perf_counter() - t
        after = client.run(_cpu_seconds)
        assert result.summary["counts"]["ok"] == len(result.rows), result.rows
    return wall, _cpu_seconds() - driver, tuple(after[w] - before[w] for w in sorted(after))


def _pin(core: int) -> None:
    """Pin every thread of this process to `core` (threads started later inherit it from their starter)."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


def _fsynced_write(folder: Path, nbytes: int) -> float:
    """Seconds to write `nbytes` of incompressible bytes to a file in `folder` in 8 MiB blocks and fsync it."""
    block = np.random.default_rng(0).integers(0, 256, 8 << 20, dtype=np.uint8).tobytes()
    path = folder / "fsync-probe.bin"
    t = time.perf_counter()
    with path.open("wb") as f:
        for _ in range(max(1, nbytes // len(block))):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - t
    path.unlink()
    return seconds


def decode_limit_rows(workdir: Path, shape: tuple[int, int, int]) -> list[Result]:
    """The decode-limit group: 2 volumes of `shape`, 1 worker and 2, against cores x single-core zlib inflate."""
    raw = workdir / "convert" / f"raw2x{'x'.join(map(str, shape))}"
    paths = [_write_ct(raw / f"case_{300 + i:03d}.nii.gz", shape, 300 + i) for i in range(2)]
    root = workdir / "convert" / "out-decode-limit"
    root.mkdir(parents=True, exist_ok=True)
    total = 2 * _nbytes(shape) / MB
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    zlib_1 = total / min(_gunzip(paths, zlib) for _ in range(2))
    limit = cores * zlib_1
    runs = {w: _item_cpu(raw, root, w) for w in (1, 2)}
    pinned = _item_cpu(raw, root, 1, one_core=True)
    stored = sum(f.stat().st_size for f in (root / "store-2w.zarr").rglob("*") if f.is_file())
    disk = stored / MB / _fsynced_write(root, stored)
    shutil.rmtree(root, ignore_errors=True)
    w1, w2 = (total / runs[w][0] for w in (1, 2))
    group = (f"at the decode limit: 2 x {'x'.join(map(str, shape))} int16 .nii.gz ({total:.0f} MB), default layout, "
             f"{cores} cores, load average {load:.1f} at the start")
    out = [Result(f"gzip-decode limit: {cores} cores x python zlib, one core", limit, "MB/s", baseline=True,
                  group=group, note=f"one core: {zlib_1:.0f} MB/s"),
           Result("labzarr, 1 worker", w1, "MB/s", group=group,
                  note=f"item CPU-s {runs[1][2][0]:.2f} for both; driver {runs[1][1]:.2f}"),
           Result("labzarr, 2 workers", w2, "MB/s", group=group,
                  note=f"{w2 / w1:.2f}x 1 worker (target >= 1.7), {w2 / limit:.2f}x the limit (target >= 0.6); "
                       f"worker CPU-s {', '.join(f'{c:.2f}' for c in runs[2][2])}; driver {runs[2][1]:.2f}"),
           Result("labzarr, 1 worker held to one core", total / pinned[0], "MB/s", group=group,
                  note=f"2 workers are {w2 * pinned[0] / total:.2f}x it; item CPU-s {pinned[2][0]:.2f} for both"),
           Result("CPU cost: labzarr, 1 worker", total / (sum(runs[1][2]) + runs[1][1]), "MB/cpu-s", group=group,
                  note="workers and driver"),
           Result("CPU cost: labzarr, 2 workers", total / (sum(runs[2][2]) + runs[2][1]), "MB/cpu-s", group=group,
                  note="workers and driver"),
           Result("what the disk allows: fsynced writes x compression ratio", disk * total * MB / stored, "MB/s",
                  group=group, note=f"fsynced writes {disk:.0f} MB/s; the store {stored / MB:.0f} MB")]
    return out


def _peak_rows(raw: Path, root: Path) -> list[Result]:
    """The peak-RSS group: each worker's peak above its baseline, in the default layout and with 64^3 chunks."""
    group = "peak RSS per worker: 2 x 512x512x800 int16 .nii.gz (420 MB each), 2 workers"
    out: list[Result] = []
    for label, store_toml in (("default layout (32^3 in 256x256x128 shards)", DEFAULT_STORE),
                              ("chunks = [64, 64, 64] (512x512x256 shards)", "[store]\nchunks = [64, 64, 64]\n")):
        r = _labzarr(raw, root, 2, store_toml)
        for i, (peak, base) in enumerate(r.peaks, 1):
            out.append(Result(f"{label}, worker {i}", peak / MB, "MB", higher_is_better=False, group=group,
                              note=f"above its baseline {base / MB:.0f} MB; bound {PEAK_BOUND}"))
    return out


if __name__ == "__main__":  # one group alone, e.g. `python bench/convert.py --decode-limit --size 512x512x200`
    import argparse

    from common import print_table

    parser = argparse.ArgumentParser(description="bench/convert.py's decode-limit group, or its copy groups, alone")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--decode-limit", action="store_true", help="run the decode-limit group")
    which.add_argument("--copy", action="store_true", help="run the two C-order copy groups")
    parser.add_argument("--size", default="x".join(map(str, PEAK)), help="each volume's shape, XxYxZ")
    parser.add_argument("--workdir", type=Path, default=Path("data/bench"), help="cached generated inputs")
    args = parser.parse_args()
    if args.copy:
        print_table(NAME, _copy_rows())
        sys.exit(0)
    size = tuple(int(n) for n in args.size.split("x"))
    if len(size) != 3 or min(size) < 1:
        parser.error(f"--size {args.size}: three extents, e.g. 512x512x200")
    args.workdir.mkdir(parents=True, exist_ok=True)
    print_table(NAME, decode_limit_rows(args.workdir.resolve(), (size[0], size[1], size[2])))
