"""Training-side reads on CT-like volumes: labzarr's reader vs zarr-python, a bare read loop, tensorstore, nibabel,
numpy, MONAI and TorchIO, and the store layouts.

Inputs are generated once and cached under `workdir/ct/`: `N_VOLUMES` int16
volumes of 512x512x300 (air, body, fat, lungs, spine, 12 HU noise, like a CT),
each as .nii.gz (what labs deliver; what MONAI and TorchIO load), plain .nii
(nibabel memory-maps it) and .npy (the no-decode limit), and converted with
`labzarr convert` into stores of several `[store]` layouts (the default layout
and the baseline's hold every volume, the others the first one).

The baseline is what one writes first: a zarr-python Dataset (`_PlainZarr`) on
a store of 64³ blosc-zstd chunks (`BASELINE_LAYOUT`). labzarr reads through
`labzarr.store.StoreReader` in every process (main, fork, spawn, forkserver);
tensorstore appears only as a library to compare with, opened on labzarr's
store directly, never inside a DataLoader.

Rows, all from this one run (each group below in fresh processes, so its memory
is its own):
- one 64³ patch (ms, median, p90 in the note), in a process whose start method
  is fork, as a training script's main process: labzarr `ds[i]` (default,
  `backend="zarr"`, and on a copy of the store without its record of stored
  files: the read before the record, so the record's cost is measured in the
  same run), the baseline Dataset, a bare pread + blosc decode loop over
  the same chunks (the floor), tensorstore, .npy and .nii memory maps, and a
  .nii.gz full load; the calls of the cheap rows are interleaved, so the
  machine's noise hits every row alike;
- DataLoader, batch 8: samples/s over up to `BATCHES` batches after the first
  (capped at `TIME_CAP_S` seconds, `SLOW_CAP_S` for MONAI and TorchIO) with
  num_workers 0 and 2, the CPU time per sample and the peak RSS and PSS of the
  loader's process tree (CPU time is the view the machine's noise moves least):
  labzarr, the baseline, MONAI and TorchIO (those two skipped when not
  installed: `pip install -e ".[bench]"`); the rows a target is checked on are
  the best of `ROUNDS` runs, taken in turns (this machine is shared and noisy);
- start methods: labzarr with 2 workers under fork, spawn and forkserver, after
  the parent itself read `ds[0]` (best of `ROUNDS` runs each);
- layout: one random 64³ patch of one volume per `[store]` layout, through
  labzarr's reader, with zarr-python and tensorstore in the note;
- batched reads (`THREAD_VOLUMES` volumes of their own, default layout, so read by
  the compiled batched path, `store/_batched.py`): num_workers
  0, 2 and 4, each with `ReadOptions(threads=1)` and with one decode thread per
  core in every process, against the decode limit (cores x 1000 / p50 ms of a
  bare pread + decode of the same chunks), each row's CPU per sample and the
  rate it allows on every core, and its process-tree RSS (`THREAD_ROUNDS` runs
  of `THREAD_CAP_S` seconds each, in turns); then, in a group of its own,
  labzarr's batched read without a DataLoader (`threads=1`) against the bare
  read, CPU per sample, the two alternated in one process (`CPU_ROUNDS`).
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import itertools
import json
import logging
import math
import multiprocessing as mp
import os
import shutil
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from common import Result, median_p90

NAME = "loaders: random 64³ patches from 512x512x300 int16 CT volumes"

N_VOLUMES = 8
SHAPE = (512, 512, 300)
PATCH = (64, 64, 64)
LATENCY_CALLS = 100
FULL_LOAD_CALLS = 5  # a .nii.gz full load takes seconds: a few calls tell its median
LAYOUT_CALLS = 60
BATCH = 8
BATCHES = 500
TIME_CAP_S = 10.0
GENERATOR_VERSION = 1

# [store] sections compared; "default" must match convert/spec.py's StoreSpec defaults.
LAYOUTS: dict[str, str] = {
    "default": "",  # chunks 32³ in 256x256x128 shards, blosc-lz4 5
    "c64-zstd5": 'chunks = [64, 64, 64]\nshards = false\ncompressor = "zstd"\nlevel = 5\n',
    "c64-bzstd5": 'chunks = [64, 64, 64]\nshards = false\ncompressor = "blosc-zstd"\nlevel = 5\n',
    "c64-lz4": 'chunks = [64, 64, 64]\nshards = false\n',
    "c64s-lz4": 'chunks = [64, 64, 64]\nshards = [256, 256, 128]\n',
    "c32-lz4": 'chunks = [32, 32, 32]\nshards = false\n',
    "c32s-bzstd3": 'compressor = "blosc-zstd"\nlevel = 3\n',
    "c32s-none": 'compressor = "none"\n',
    "c16s-lz4": 'chunks = [16, 16, 16]\nshards = [256, 256, 128]\n',
}
BASELINE_LAYOUT = "c64-bzstd5"  # the straightforward store: one file per 64³ chunk, blosc-zstd
FULL_LAYOUTS = ("default", BASELINE_LAYOUT)  # stores holding every volume (the others hold the first one)
BASELINE = "zarr Dataset, 64³ blosc-zstd chunks"

log = logging.getLogger(__name__)


# -- inputs ---------------------------------------------------------------------------------------------------


def ct_volume(seed: int, shape: tuple[int, int, int] = SHAPE) -> np.ndarray:
    """A CT-like int16 volume: -1024 outside the field of view, air, body, fat rim, lungs, spine, 12 HU noise."""
    nx, ny, nz = shape
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(np.linspace(-1, 1, nx, dtype=np.float32), np.linspace(-1, 1, ny, dtype=np.float32),
                       indexing="ij")
    fov = x**2 + y**2 < 0.98
    phase = rng.uniform(0, 2 * np.pi, 2)
    out = np.empty(shape, np.int16)
    for z in range(nz):
        t = z / nz
        a = 0.78 + 0.05 * np.sin(2 * np.pi * t + phase[0])
        b = 0.58 + 0.04 * np.sin(2 * np.pi * t + phase[1])
        body = (x / a) ** 2 + (y / b) ** 2 < 1
        hu = np.where(body, np.float32(40), np.float32(-1000))
        hu[body & ((x / (a - 0.05)) ** 2 + (y / (b - 0.05)) ** 2 >= 1)] = -90
        if 0.25 < t < 0.8:
            r = 0.18 + 0.05 * np.sin(np.pi * (t - 0.25) / 0.55)
            lungs = (((x - 0.33) / r / 1.3) ** 2 + ((y - 0.05) / r) ** 2 < 1) | \
                    (((x + 0.33) / r / 1.3) ** 2 + ((y - 0.05) / r) ** 2 < 1)
            hu[lungs] = -850
        hu[(x**2 + (y + 0.38) ** 2) < 0.012] = 700
        hu += rng.standard_normal((nx, ny), dtype=np.float32) * 12
        hu[~fov] = -1024
        out[:, :, z] = hu
    return out


class Inputs:
    """The cached files: `gz[k]`, `nii[k]`, `npy[k]` per volume, and the converted stores per layout."""

    def __init__(self, workdir: Path, n: int = N_VOLUMES) -> None:
        self.root = workdir / ("ct" if n == N_VOLUMES else f"ct-{n}")  # a smaller set is cached on its own
        self.n = n
        self.raw = self.root / "raw"
        self.gz = [self.raw / f"ct_{k:03d}.nii.gz" for k in range(n)]
        self.nii = [self.root / "plain" / f"ct_{k:03d}.nii" for k in range(n)]
        self.npy = [self.root / "plain" / f"ct_{k:03d}.npy" for k in range(n)]

    def ensure(self) -> None:
        import nibabel as nib

        stamp = self.root / "inputs.json"
        want = {"n": self.n, "shape": list(SHAPE), "version": GENERATOR_VERSION}  # as JSON reads it back
        if stamp.exists() and json.loads(stamp.read_text()) == want and all(p.exists() for p in self.npy):
            return
        shutil.rmtree(self.root, ignore_errors=True)
        self.raw.mkdir(parents=True)
        (self.root / "plain").mkdir()
        affine = np.diag([0.7, 0.7, 1.0, 1.0])  # RAS already: the store holds the same voxel order as the .npy
        for k in range(self.n):
            t = time.perf_counter()
            data = ct_volume(seed=k)
            img = nib.Nifti1Image(data, affine)
            img.header.set_xyzt_units("mm")
            nib.save(img, self.gz[k])
            nib.save(img, self.nii[k])
            np.save(self.npy[k], data)
            log.info("volume %d generated in %.1f s", k, time.perf_counter() - t)
        stamp.write_text(json.dumps(want))

    def store(self, layout: str) -> Path:
        """The store of `layout` (every volume for `FULL_LAYOUTS`, the first volume for the others), converted once."""
        from labzarr.convert import convert_delivery
        from labzarr.convert.demo import write_spec

        full = layout in FULL_LAYOUTS
        raw = self.raw if full else self.root / "raw-one"
        if not (raw / self.gz[0].name).exists():
            raw.mkdir(exist_ok=True)
            os.link(self.gz[0], raw / self.gz[0].name)  # a hard link: a symlink out of raw is refused
        store = self.root / "stores" / f"{layout}.zarr"
        spec = self.root / "specs" / layout / "delivery.toml"
        write_spec(spec, raw=raw, store=store, name=f"bench-{layout}", labels=False)
        text = spec.read_text()
        text = text[: text.index("[store]")] + "[store]\n" + LAYOUTS[layout]  # this layout, else the defaults
        done = self.root / "stores" / f"{layout}.spec"
        if not (store.exists() and done.exists() and done.read_text() == text):
            spec.write_text(text)
            shutil.rmtree(store, ignore_errors=True)
            t = time.perf_counter()
            result = convert_delivery(spec, workers=2)
            assert result.summary["counts"]["ok"] == (self.n if full else 1), result.summary
            log.info("store %s converted in %.1f s", layout, time.perf_counter() - t)
            done.write_text(text)
        return store

    def volume_of(self, source: str) -> int:
        """The volume number of a store item, from its `source` (the raw file it came from)."""
        return [p.name for p in self.gz].index(Path(source).name)


# -- helpers --------------------------------------------------------------------------------------------------


def _du(path: Path) -> tuple[int, int]:
    files = [Path(d) / f for d, _, fs in os.walk(path) for f in fs]
    return len(files), sum(f.stat().st_size for f in files)


def _origins(n: int, seed: int, shape: tuple[int, ...] = SHAPE) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(0, s - p + 1)) for s, p in zip(shape, PATCH)) for _ in range(n)]


def _box(o: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(x, x + p) for x, p in zip(o, PATCH))


def _crop(a: Any, o: Sequence[int]) -> Any:
    return a[_box(o)]


def _volume_names(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "volumes").iterdir() if p.is_dir())


def _interleaved(calls: dict[str, Callable[[int], object]], n: int) -> dict[str, list[float]]:
    """Wall seconds of `fn(j)` for j < n, for every entry, the entries taking turns (rotated each round)."""
    names = list(calls)
    out: dict[str, list[float]] = {name: [] for name in names}
    for j in range(n):
        for name in names[j % len(names):] + names[:j % len(names)]:
            t = time.perf_counter()
            calls[name](j)
            out[name].append(time.perf_counter() - t)
    return out


def _skipped(name: str, unit: str, group: str, why: str, *, higher_is_better: bool = True) -> Result:
    """A row that could not be measured here: value 0 (no ratio is printed for it) and why in the note."""
    return Result(name, 0.0, unit, higher_is_better=higher_is_better, group=group, note=f"skipped: {why}")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _tensorstore() -> Any | None:
    try:
        import tensorstore as ts
    except ImportError:
        return None
    return ts


def _ts_open(ts: Any, path: Path) -> Any:
    """A tensorstore handle on one zarr v3 array, with no cache of decoded chunks (none of the others has one)."""
    ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, read=True,
                   context=ctx).result()


class _BareRead:
    """The floor for one array of the default layout: pread the shard index once per shard, pread each touched
    chunk, blosc-decode it (its crc32c is not checked) and copy its part into the patch. Nothing else."""

    def __init__(self, path: Path) -> None:
        import numcodecs

        meta = json.loads((path / "zarr.json").read_text())
        (sharding,) = meta["codecs"]
        cfg = sharding["configuration"]
        if sharding["name"] != "sharding_indexed" \
                or [c["name"] for c in cfg["codecs"]] != ["bytes", "blosc", "crc32c"] \
                or cfg.get("index_location", "end") != "end":
            raise ValueError(f"{path}: not the default layout (sharded, blosc + crc32c, index at the end): {sharding}")
        self.path, self.shape = path, tuple(meta["shape"])
        self.chunk = tuple(cfg["chunk_shape"])
        self.per_shard = tuple(s // c for s, c in zip(meta["chunk_grid"]["configuration"]["chunk_shape"], self.chunk))
        self.dtype = np.dtype(meta["data_type"]).newbyteorder("<")
        self.fill = meta["fill_value"]
        self.fds: dict[tuple[int, ...], int] = {}
        self.indexes: dict[tuple[int, ...], np.ndarray | None] = {}
        self.blosc = numcodecs.Blosc()
        self.buf = np.empty(self.chunk, self.dtype)

    def _index(self, shard: tuple[int, ...]) -> np.ndarray | None:
        if shard not in self.indexes:
            try:
                fd = os.open(self.path / "c" / "/".join(map(str, shard)), os.O_RDONLY)
            except FileNotFoundError:
                self.indexes[shard] = None
                return None
            nbytes = 16 * math.prod(self.per_shard) + 4
            raw = os.pread(fd, nbytes, os.fstat(fd).st_size - nbytes)
            self.fds[shard] = fd
            self.indexes[shard] = np.frombuffer(raw[:-4], "<u8").reshape(*self.per_shard, 2)
        return self.indexes[shard]

    def read(self, start: Sequence[int], size: Sequence[int]) -> np.ndarray:
        out = np.empty(tuple(size), self.dtype)
        ranges = [range(a // c, (a + n - 1) // c + 1) for a, n, c in zip(start, size, self.chunk)]
        for cc in itertools.product(*ranges):
            lo = [c * w for c, w in zip(cc, self.chunk)]
            src = tuple(slice(max(a, x) - x, min(a + n, x + w) - x) for a, n, x, w in zip(start, size, lo, self.chunk))
            dst = tuple(slice(max(a, x) - a, min(a + n, x + w) - a) for a, n, x, w in zip(start, size, lo, self.chunk))
            shard = tuple(c // p for c, p in zip(cc, self.per_shard))
            index = self._index(shard)
            offset, nbytes = (int(v) for v in index[tuple(c % p for c, p in zip(cc, self.per_shard))]) \
                if index is not None else (2**64 - 1, 0)
            if offset == 2**64 - 1:
                out[dst] = self.fill
                continue
            data = os.pread(self.fds[shard], nbytes, offset)
            self.blosc.decode(memoryview(data)[:-4], out=self.buf)  # the last 4 B are the crc32c: skipped
            out[dst] = self.buf[src]
        return out


class _PlainZarr:
    """What one writes first: open the zarr array on first use, slice a random patch with numpy's global RNG."""

    def __init__(self, paths: list[Path], n: int) -> None:
        self.paths, self.n, self.arrays = paths, n, {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch
        import zarr

        k = i % len(self.paths)
        if k not in self.arrays:
            self.arrays[k] = zarr.open_array(self.paths[k], mode="r")
        a = self.arrays[k]
        o = [np.random.randint(0, s - p + 1) for s, p in zip(a.shape[1:], PATCH)]
        return torch.from_numpy(a[(slice(None), *_box(o))])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "arrays": {}}


def _plain_zarr_dataset(baseline_store: Path, n: int) -> _PlainZarr:
    return _PlainZarr([baseline_store / "volumes" / p / "0" for p in _volume_names(baseline_store)], n)


# -- fresh processes and their memory -------------------------------------------------------------------------


def _tree_memory(pid: int) -> tuple[int, int, int, list[int]]:
    """Summed RSS, PSS and USS of a process and its descendants, and each one's RSS (the root first)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0, []
    rss = pss = uss = 0
    each = []
    for p in procs:
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
        uss += getattr(info, "uss", info.rss)
        each.append(info.rss)
    return rss, pss, uss, each


class _Peak:
    """Polls a process tree's summed RSS, PSS and USS every 100 ms in a thread: the peak of each, and each
    process's RSS when the sum of RSS peaked (forked workers' RSS counts the pages they share with the parent,
    torch's own heap among them, once per process: PSS splits them, USS leaves them out)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss, self.pss, self.uss = pid, 0, 0, 0
        self.each: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            rss, pss, uss, each = _tree_memory(self.pid)
            if rss > self.rss:
                self.rss, self.each = rss, each
            self.pss, self.uss = max(self.pss, pss), max(self.uss, uss)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def breakdown(self) -> str:
        """Each process's RSS at the peak: the loader's process, then its workers."""
        if len(self.each) < 2:
            return ""
        return f"; at the peak {_mb(self.each[0])} in the main process, " + \
            "/".join(f"{n / 2**20:,.0f}" for n in self.each[1:]) + " MB in the others"


def _in_fresh_process(target: Callable[..., None], *args: Any, timeout: float = TIME_CAP_S + 900
                      ) -> tuple[Any, _Peak]:
    """Run `target(*args, queue)` in a spawned process; its report and its process tree's peak memory."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    peak = _Peak(p.pid)  # type: ignore[arg-type]
    try:
        res = q.get(timeout=timeout)
    finally:
        peak.stop()
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    return res, peak


def _tree_cpu_s() -> float:
    """CPU seconds used so far by this process and its descendants, live (loader workers) or exited and reaped
    (a TorchIO Queue's workers come and go): their own user + system time and that of their reaped children."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


# -- one patch ------------------------------------------------------------------------------------------------

OF_BASELINE = 0.25  # labzarr's ds[i] takes at most this fraction of the baseline's time
OF_BARE = 1.5  # and at most this multiple of the bare read loop's
BARE = "bare pread + blosc decode, same chunks"
TS = "tensorstore on labzarr's default store"
LATENCY_GROUP = ("single random 64³ patch (ms), in a main process that will later fork DataLoader workers "
                 "(start method fork)")


UNRECORDED = "labzarr ds[i], store without its record of stored files"
RECORD_COST = 0.05  # checking each read against the record costs at most this much of ds[i]'s time


def _without_record(store: Path) -> Path:
    """A copy of `store` (chunk files hard-linked) whose arrays have no record of their stored files: what the
    reader did before the record existed, for an in-run comparison. The bench edits `zarr.json` directly: it
    makes a store labzarr would not write."""
    copy = store.with_name(f"{store.name}.unrecorded")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store, copy, copy_function=os.link)
    for meta in copy.rglob("zarr.json"):
        doc = json.loads(meta.read_bytes())
        if doc.get("node_type") == "array" and "stored" in doc.get("attributes", {}):
            del doc["attributes"]["stored"]
            meta.unlink()  # a hard link: replaced, not written through
            meta.write_text(json.dumps(doc))
    return copy


def _latency_trial(inputs_root: str, store: str, baseline_store: str, out: Any) -> None:
    """Runs in a spawned process that, like `python train.py` on Linux, forks its DataLoader workers."""
    from labzarr.store import UncheckedStoreWarning

    mp.set_start_method("fork", force=True)
    warnings.simplefilter("ignore", UncheckedStoreWarning)  # the unrecorded copy warns, as it should, once
    out.put(_latency_rows(Inputs(Path(inputs_root).parent), Path(store), Path(baseline_store)))


def _latency_rows(inputs: Inputs, store: Path, baseline_store: Path) -> list[Result]:
    import nibabel as nib

    from labzarr import PatchDataset
    from labzarr.loaders import ReadOptions

    group, n = LATENCY_GROUP, LATENCY_CALLS
    ds = PatchDataset(store, PATCH, patches_per_item=n, seed=0)
    ds_zarr = PatchDataset(store, PATCH, patches_per_item=n, seed=0, read=ReadOptions(backend="zarr"))
    keys = np.random.default_rng(2).permutation(len(ds))[:n].tolist()
    located = [ds.locate(key) for key in keys]  # the same (item, origin) for every row on the default store
    plan = [(k, reg.origin) for k, reg in located]
    bare = {k: _BareRead(store / item.array) for k, item in enumerate(ds.items)}
    vol = {k: inputs.volume_of(item.source) for k, item in enumerate(ds.items)}
    truth = np.load(inputs.npy[vol[plan[0][0]]], mmap_mode="r")
    k0, o0 = plan[0]
    np.testing.assert_array_equal(bare[k0].read((0, *o0), (1, *PATCH))[0], _crop(truth, o0))
    np.testing.assert_array_equal(ds[keys[0]]["image"][0].numpy(), _crop(truth, o0))
    np.random.seed(3)
    plain = _plain_zarr_dataset(baseline_store, n)
    maps = [np.load(path, mmap_mode="r") for path in inputs.npy]
    images = [nib.load(path, mmap=True) for path in inputs.nii]  # opened once, sliced per call, as a Dataset would
    for k in range(len(ds.items)):  # open every array first: a training loop pays that once per worker
        ds[k * ds.patches_per_item]
        ds_zarr[k * ds.patches_per_item]
        bare[k].read((0, 0, 0, 0), (1, *PATCH))
    for k in range(len(plain.paths)):
        plain[k]
    ts = _tensorstore()  # a library to compare with: its threads are never forked (this process forks nothing)
    ts_arrays = {k: _ts_open(ts, store / item.array) for k, item in enumerate(ds.items)} if ts is not None else {}
    for a in ts_arrays.values():
        a[(0, *_box((0, 0, 0)))].read().result()
    if ts_arrays:
        np.testing.assert_array_equal(np.asarray(ts_arrays[k0][(0, *_box(o0))].read().result()), _crop(truth, o0))
    unrecorded = PatchDataset(_without_record(store), PATCH, patches_per_item=n, seed=0)
    for k in range(len(unrecorded.items)):
        unrecorded[k * unrecorded.patches_per_item]
    np.testing.assert_array_equal(unrecorded[keys[0]]["image"].numpy(), ds[keys[0]]["image"].numpy())
    calls: dict[str, Callable[[int], object]] = {
        "labzarr ds[i], default ReadOptions": lambda j: ds[keys[j]],
        "labzarr ds[i], ReadOptions(backend='zarr')": lambda j: ds_zarr[keys[j]],
        BASELINE: lambda j: plain[j],
        BARE: lambda j: bare[plan[j][0]].read((0, *plan[j][1]), (1, *PATCH)),
        TS: lambda j: ts_arrays[plan[j][0]][(0, *_box(plan[j][1]))].read().result(),
        ".npy memory-map (the no-decode limit)": lambda j: np.array(_crop(maps[vol[plan[j][0]]], plan[j][1])),
        "nibabel .nii memory-mapped slicing": lambda j: np.asarray(_crop(images[vol[plan[j][0]]].dataobj, plan[j][1])),
    }
    if not ts_arrays:
        del calls[TS]
    times = {name: median_p90(t) for name, t in _interleaved(calls, n).items()}
    t_lab, t_base, t_bare = times["labzarr ds[i], default ReadOptions"][0], times[BASELINE][0], times[BARE][0]
    notes = {
        "labzarr ds[i], default ReadOptions":
            f"read path {ds.read_path(ds.items[0])}; {t_lab / t_base:.2f} of the baseline's time (target <= "
            f"{OF_BASELINE}: {_verdict(t_lab <= OF_BASELINE * t_base)}); {t_lab / t_bare:.2f}x of bare read (target "
            f"<= {OF_BARE}x: {_verdict(t_lab <= OF_BARE * t_bare)})",
        "labzarr ds[i], ReadOptions(backend='zarr')": f"zarr-python on the same store; read path "
                                                      f"{ds_zarr.read_path(ds_zarr.items[0])}",
        BASELINE: f"{BASELINE_LAYOUT} store; zarr.open_array once per volume, a[...] per patch",
        BARE: "the floor: shard index once per shard, one pread per 32³ chunk, numcodecs Blosc, no crc32c check",
        TS: f"a library to compare with, no fork: zarr3 driver, no chunk cache, default thread pool; "
            f"{times.get(TS, (0.0,))[0] / t_bare:.2f}x of bare read",
        ".npy memory-map (the no-decode limit)": "random patches fault in fresh pages",
        "nibabel .nii memory-mapped slicing": f"uncompressed: {inputs.nii[0].stat().st_size / 2**20:.0f} MB a volume "
                                              f"vs {inputs.gz[0].stat().st_size / 2**20:.0f} MB .nii.gz",
    }
    rows = [Result(name, m * 1e3, "ms", higher_is_better=False, baseline=name == BASELINE, group=group,
                   note=f"p90 {p * 1e3:.2f} ms; {notes[name]}") for name, (m, p) in times.items()]
    # The record's cost, measured as a pair taking turns at going first on the same patches: in the group above
    # a row that follows another reading the same chunks finds them in the CPU's caches, which would flatter it.
    pair = {k: median_p90(t) for k, t in _interleaved({"recorded": lambda j: ds[keys[j]],
                                                       "unrecorded": lambda j: unrecorded[keys[j]]}, n).items()}
    (m_rec, _), (m_un, p_un) = pair["recorded"], pair["unrecorded"]
    rows.insert(1, Result(UNRECORDED, m_un * 1e3, "ms", higher_is_better=False, group=group,
                          note=f"p90 {p_un * 1e3:.2f} ms; the same store with each array's record of stored files "
                               f"removed (the read before the record: a lost file read as zeros), paired with ds[i] "
                               f"on the default store ({m_rec * 1e3:.3f} ms), each first in turn: the record costs "
                               f"{m_rec / m_un - 1:+.1%} (target <= {RECORD_COST:.0%}: "
                               f"{_verdict(m_rec <= (1 + RECORD_COST) * m_un)})"))
    if not ts_arrays:
        rows.insert(4, _skipped(TS, "ms", group, "tensorstore is not installed", higher_is_better=False))
    gc.collect()

    def full_load(j: int) -> object:
        k, o = plan[j]
        return _crop(nib.load(inputs.gz[vol[k]]).get_fdata(), o)
    m, p = median_p90(_interleaved({"gz": full_load}, FULL_LOAD_CALLS)["gz"])
    rows.append(Result("nibabel .nii.gz full load + crop", m * 1e3, "ms", higher_is_better=False, group=group,
                       note=f"p90 {p * 1e3:.2f} ms of {FULL_LOAD_CALLS} calls; get_fdata() as users call it"))
    return rows


def latency_rows(inputs: Inputs) -> list[Result]:
    rows, _ = _in_fresh_process(_latency_trial, str(inputs.root), str(inputs.store("default")),
                                str(inputs.store(BASELINE_LAYOUT)))
    return list(rows)


# -- DataLoader trials, each in a fresh process ---------------------------------------------------------------


def _batches(loader_factory: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    while True:  # a loader shorter than the trial is iterated again (a new epoch)
        yield from loader_factory()


_Factory = Callable[[Inputs, int, Path, Path], Callable[[], Iterable[Any]]]


def _trial(factory: _Factory, workers: int, cap_s: float, inputs_root: str, store: str, baseline_store: str,
           probe: bool, out: Any) -> None:
    """Runs in a spawned process: build the loader, time up to BATCHES batches or `cap_s` seconds, report to `out`;
    with `probe`, then (the loader and its workers gone) time the bare read of `store` too (`_bare_probe`): the
    decode limit as the machine allowed it at that moment."""
    import torch

    # Behave like `python train.py` on Linux before Python 3.14: DataLoader workers fork from this process.
    mp.set_start_method("fork", force=True)
    torch.set_num_threads(1)
    inputs = Inputs(Path(inputs_root).parent)
    t0 = time.perf_counter()
    loader = factory(inputs, workers, Path(store), Path(baseline_store))
    setup = time.perf_counter() - t0
    it = _batches(loader)
    next(it)  # start-up is no per-sample cost: time from the second batch on (every worker started with the first)
    cpu, t, n, cap = _tree_cpu_s(), time.perf_counter(), 0, time.perf_counter() + cap_s
    while n < BATCHES - 1 and time.perf_counter() < cap:
        next(it)
        n += 1
    wall = time.perf_counter() - t
    res = {"samples_per_s": n * BATCH / wall, "cpu_ms": (_tree_cpu_s() - cpu) * 1e3 / (n * BATCH),
           "batches": n + 1, "setup_s": setup, "first_s": t - t0}
    it.close()  # the loader's workers are shut down in order here, not torn down at interpreter exit
    del it, loader
    gc.collect()
    if probe:
        res["bare"] = _bare_probe(Path(store))
    out.put(res)


def _labzarr(inputs: Inputs, workers: int, store: Path, _: Path, context: str | None = None,
             parent_reads: bool = False) -> Callable[[], Iterable[Any]]:
    from torch.utils.data import DataLoader

    from labzarr import PatchDataset
    from labzarr.loaders import collate

    ds = PatchDataset(store, PATCH, patches_per_item=BATCHES * BATCH // inputs.n + 1, seed=0)
    if parent_reads:
        ds[0]  # the parent looks at a sample before training: its open files must not leak into the workers
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0, multiprocessing_context=context)
    return lambda: loader


def _plain_zarr(inputs: Inputs, workers: int, _: Path, baseline_store: Path) -> Callable[[], Iterable[Any]]:
    from torch.utils.data import DataLoader

    ds = _plain_zarr_dataset(baseline_store, BATCHES * BATCH)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
    return lambda: loader


def _monai_transform() -> Any:
    from monai.transforms import Compose, LoadImaged, RandSpatialCropd

    return Compose([LoadImaged(keys="image", image_only=True, ensure_channel_first=True),
                    RandSpatialCropd(keys="image", roi_size=PATCH, random_size=False)])


def _monai(inputs: Inputs, workers: int, _: Path, __: Path) -> Callable[[], Iterable[Any]]:
    from monai.data import DataLoader, Dataset
    from torch.utils.data import RandomSampler

    ds = Dataset(data=[{"image": str(p)} for p in inputs.gz], transform=_monai_transform())
    sampler = RandomSampler(ds, replacement=True, num_samples=BATCHES * BATCH)
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers, persistent_workers=workers > 0)
    return lambda: loader


def _monai_cache(inputs: Inputs, workers: int, _: Path, __: Path) -> Callable[[], Iterable[Any]]:
    from monai.data import CacheDataset, DataLoader
    from torch.utils.data import RandomSampler

    ds = CacheDataset(data=[{"image": str(p)} for p in inputs.gz], transform=_monai_transform(), cache_rate=1.0,
                      copy_cache=False, num_workers=2, progress=False)  # 2 threads fill the cache (the setup)
    sampler = RandomSampler(ds, replacement=True, num_samples=BATCHES * BATCH)
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers, persistent_workers=workers > 0)
    return lambda: loader


def _torchio(inputs: Inputs, workers: int, _: Path, __: Path) -> Callable[[], Iterable[Any]]:
    import torchio as tio
    from torch.utils.data import DataLoader

    subjects = tio.SubjectsDataset([tio.Subject(image=tio.ScalarImage(p)) for p in inputs.gz])
    queue = tio.Queue(subjects, max_length=128, samples_per_volume=16, sampler=tio.UniformSampler(PATCH),
                      num_workers=workers)
    return lambda: DataLoader(queue, batch_size=BATCH, num_workers=0)  # the Queue owns the workers


@dataclasses.dataclass(frozen=True, slots=True)
class _Case:
    """One DataLoader row: run `runs` times, each in a fresh process, timed for at most `cap_s` seconds."""

    name: str
    factory: _Factory
    workers: int
    package: str = "labzarr"  # the row is skipped when this is not installed
    runs: int = 1
    cap_s: float = TIME_CAP_S
    probe: bool = False  # time the bare read in the same process once the loader is gone (`_trial`)


LABZARR = "labzarr, default ReadOptions"
ROUNDS = 3  # runs of each row a target is checked on, in turns: the best one is the row's value
SLOW_CAP_S = 5.0  # the other pipelines load whole volumes: a few batches tell their rate
# Every row's first run in this order, then the second runs, ...; the first row is the group's baseline.
_CASES: list[_Case] = [
    _Case(BASELINE, _plain_zarr, 0, "zarr", ROUNDS),
    _Case(BASELINE, _plain_zarr, 2, "zarr", ROUNDS),
    _Case(LABZARR, _labzarr, 0, runs=ROUNDS),
    _Case(LABZARR, _labzarr, 2, runs=ROUNDS),
    _Case("MONAI Dataset (LoadImaged+RandSpatialCropd)", _monai, 0, "monai", cap_s=SLOW_CAP_S),
    _Case("MONAI Dataset (LoadImaged+RandSpatialCropd)", _monai, 2, "monai", cap_s=SLOW_CAP_S),
    _Case("MONAI CacheDataset copy_cache=False", _monai_cache, 0, "monai", cap_s=SLOW_CAP_S),
    _Case("MONAI CacheDataset copy_cache=False", _monai_cache, 2, "monai", cap_s=SLOW_CAP_S),
    _Case("TorchIO Queue + UniformSampler", _torchio, 0, "torchio", cap_s=SLOW_CAP_S),
    _Case("TorchIO Queue + UniformSampler", _torchio, 2, "torchio", cap_s=SLOW_CAP_S),
]
LOADER_TARGETS = {0: 3.0, 2: 4.5}  # labzarr's samples/s over the baseline's, per num_workers
START_METHODS = ("fork", "spawn", "forkserver")
START_SPREAD = 0.15  # (max/min - 1) of samples/s over the start methods
TREE_RSS = 2**30  # a loader's process tree stays under this peak RSS
_Run = tuple[dict[str, Any], _Peak]


def _runs(cases: Sequence[_Case], inputs: Inputs, store: Path, baseline_store: Path) -> list[list[_Run]]:
    """The runs of every case, each in a fresh process; the cases take turns."""
    out: list[list[_Run]] = [[] for _ in cases]
    for r in range(max((c.runs for c in cases), default=0)):
        for runs, case in zip(out, cases):
            if r < case.runs:
                runs.append(_in_fresh_process(_trial, case.factory, case.workers, case.cap_s, str(inputs.root),
                                              str(store), str(baseline_store), case.probe))
                log.info("%s, num_workers=%d: %.1f samples/s; peak RSS %s", case.name, case.workers,
                         runs[-1][0]["samples_per_s"], _mb(runs[-1][1].rss))
    return out


def _loader_row(name: str, runs: list[_Run], group: str, baseline: bool) -> Result:
    """The best run's samples/s; the highest peak memory of any run."""
    best = max(runs, key=lambda run: run[0]["samples_per_s"])[0]
    top = max((p for _, p in runs), key=lambda p: p.rss)
    rss, pss, uss = top.rss, max(p.pss for _, p in runs), max(p.uss for _, p in runs)
    each = ", ".join(f"{res['samples_per_s']:.0f}" for res, _ in runs)
    of = f"best of {len(runs)} runs ({each}); " if len(runs) > 1 else ""
    return Result(name, best["samples_per_s"], "samples/s", group=group, baseline=baseline,
                  note=f"{of}CPU {min(res['cpu_ms'] for res, _ in runs):.2f} ms/sample (process tree, least of the "
                       f"runs); peak RSS {_mb(rss)} (PSS {_mb(pss)}, USS {_mb(uss)}{top.breakdown()}); "
                       f"{best['batches']} batches; "
                       f"setup {best['setup_s']:.1f} s, first batches {best['first_s']:.1f} s")


def loader_rows(inputs: Inputs) -> list[Result]:
    store, baseline_store = inputs.store("default"), inputs.store(BASELINE_LAYOUT)
    group = "DataLoader, batch 8 (samples/s)"
    ok = [importlib.util.find_spec(c.package) is not None for c in _CASES]
    runs = iter(_runs([c for c, here in zip(_CASES, ok) if here], inputs, store, baseline_store))
    rows = [_loader_row(f"{c.name}, num_workers={c.workers}", next(runs), group, baseline=k == 0) if here
            else _skipped(f"{c.name}, num_workers={c.workers}", "samples/s", group,
                          f"{c.package} is not installed (pip install -e '.[bench]')")
            for k, (c, here) in enumerate(zip(_CASES, ok))]
    by_name = {r.name: r for r in rows}
    for workers, target in LOADER_TARGETS.items():
        lab, base = by_name[f"{LABZARR}, num_workers={workers}"], by_name[f"{BASELINE}, num_workers={workers}"]
        x = lab.value / base.value
        rows[rows.index(lab)] = dataclasses.replace(
            lab, note=f"{x:.2f}x the baseline's num_workers={workers} (target >= {target}x: {_verdict(x >= target)}); "
                      f"{lab.note}")
    return rows


def start_method_rows(inputs: Inputs) -> list[Result]:
    store = inputs.store("default")
    group = "start methods, labzarr, num_workers=2, batch 8 (samples/s)"
    names = [f"labzarr, multiprocessing_context='{method}'" for method in START_METHODS]
    runs = _runs([_Case(name, partial(_labzarr, context=method, parent_reads=True), 2, runs=ROUNDS)
                  for name, method in zip(names, START_METHODS)], inputs, store, store)
    rows = []
    for name, method, method_runs in zip(names, START_METHODS, runs):
        row = _loader_row(name, method_runs, group, baseline=method == "fork")
        rss = max(peak.rss for _, peak in method_runs)
        rows.append(dataclasses.replace(row, note=f"parent read ds[0] first; tree RSS under 1 GB: "
                                                  f"{_verdict(rss < TREE_RSS)}; {row.note}"))
    values = [r.value for r in rows]
    spread = max(values) / min(values) - 1
    cpu = [min(res["cpu_ms"] for res, _ in method_runs) for method_runs in runs]
    rows[-1] = dataclasses.replace(rows[-1], note=f"spread max/min - 1 = {spread:.0%} over the three (target <= "
                                                  f"{START_SPREAD:.0%}: {_verdict(spread <= START_SPREAD)}), of CPU "
                                                  f"per sample {max(cpu) / min(cpu) - 1:.0%}; {rows[-1].note}")
    return rows


# -- batched reads in threads, against the decode limit -------------------------------------------------------

THREAD_VOLUMES = 2  # the setup: 2 volumes, one run
OF_LIMIT = 0.85  # the best loader row reaches at least this fraction of the decode limit
THREAD_WORKERS = (0, 2, 4)
THREADS_GROUP = "batched reads, 2 volumes, batch 8 (samples/s)"
THREADS_CPU_GROUP = "batched reads, 2 volumes: CPU per sample against the bare read (ms)"
THREADS_MEMORY_GROUP = "batched reads, 2 volumes: process-tree peak RSS against a DataLoader reading nothing (MB)"
FLOOR_WORKERS = 4  # the workers of the memory floor: the most the group's rows have
# Short by default (a normal `make bench`: about 2 minutes): runs of each row, in turns, each timed this long;
# `python bench/loaders.py --threads --rounds 3 --cap 10` for a closer look.
THREAD_ROUNDS = 2
THREAD_CAP_S = 4.0
CPU_ROUNDS = 10  # rounds of the bare read against the batched read, alternated, for their CPU per patch


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _bare_probe(store: Path) -> tuple[float, float, float]:
    """(p50, p90, CPU seconds per patch) of the bare pread + decode of the chunks of `LATENCY_CALLS` random 64³
    patches of `store`, the page cache warm (one pass first, as the loader rows find it: a decode limit, not a
    disk's); what the decode limit is computed from. The same patches in every process (seeded)."""
    from labzarr import PatchDataset

    ds = PatchDataset(store, PATCH, patches_per_item=LATENCY_CALLS, seed=0)
    keys = np.random.default_rng(4).permutation(len(ds))[:LATENCY_CALLS].tolist()
    bare = {k: _BareRead(store / item.array) for k, item in enumerate(ds.items)}
    located = [ds.locate(key) for key in keys]

    def read(j: int) -> object:
        return bare[located[j][0]].read((0, *located[j][1].origin), (1, *PATCH))

    for j in range(LATENCY_CALLS):
        read(j)
    cpu = time.process_time()
    times = _interleaved({"bare": read}, LATENCY_CALLS)["bare"]
    return (*median_p90(times), (time.process_time() - cpu) / LATENCY_CALLS)


def _limit_trial(store: str, out: Any) -> None:
    """Runs in a spawned process: `_bare_probe`, then (CPU seconds per patch of the bare read, CPU seconds per
    sample of labzarr's batched read of the same patches, batch 8, `ReadOptions(threads=1)`, no DataLoader), the
    two alternated in `CPU_ROUNDS` rounds, least of each: what the read path spends beyond the floor, the figure a
    loaded machine moves least."""
    from labzarr import PatchDataset
    from labzarr.loaders import ReadOptions

    timed = _bare_probe(Path(store))
    ds = PatchDataset(Path(store), PATCH, patches_per_item=LATENCY_CALLS, seed=0)
    keys = np.random.default_rng(4).permutation(len(ds))[:LATENCY_CALLS].tolist()
    bare = {k: _BareRead(Path(store) / item.array) for k, item in enumerate(ds.items)}
    located = [ds.locate(key) for key in keys]
    k0, reg0 = located[0]
    np.testing.assert_array_equal(bare[k0].read((0, *reg0.origin), (1, *PATCH)), ds[keys[0]]["image"].numpy())

    def read(j: int) -> object:
        return bare[located[j][0]].read((0, *located[j][1].origin), (1, *PATCH))

    one = PatchDataset(Path(store), PATCH, patches_per_item=LATENCY_CALLS, seed=0, read=ReadOptions(threads=1))
    batches = [keys[b:b + BATCH] for b in range(0, len(keys) - BATCH + 1, BATCH)]
    assert all(np.array_equal(s["image"].numpy(), ds[k]["image"].numpy())
               for k, s in zip(batches[0], one.__getitems__(batches[0])))
    bare_cpu, batch_cpu = [], []
    for _ in range(CPU_ROUNDS):
        cpu = time.process_time()
        for j in range(len(batches) * BATCH):
            read(j)
        bare_cpu.append((time.process_time() - cpu) / (len(batches) * BATCH))
        cpu = time.process_time()
        for batch in batches:
            one.__getitems__(batch)
        batch_cpu.append((time.process_time() - cpu) / (len(batches) * BATCH))
    out.put((timed, (min(bare_cpu), min(batch_cpu))))


class _Zeros:
    """A map-style dataset that reads nothing (each sample a new 64³ int16 patch of zeros and an origin): what a
    DataLoader's processes cost with no reader at all, the floor of the batched-read rows' memory."""

    def __len__(self) -> int:
        return BATCHES * BATCH

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        return {"image": torch.zeros((1, *PATCH), dtype=torch.int16), "origin": (0, 0, 0)}


def _zeros(inputs: Inputs, workers: int, _: Path, __: Path) -> Callable[[], Iterable[Any]]:
    from torch.utils.data import DataLoader

    loader = DataLoader(_Zeros(), batch_size=BATCH, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)  # torch's default collate: nothing of labzarr's
    return lambda: loader


def _threaded(inputs: Inputs, workers: int, store: Path, _: Path, threads: int = 1) -> Callable[[], Iterable[Any]]:
    from torch.utils.data import DataLoader

    from labzarr import PatchDataset
    from labzarr.loaders import ReadOptions, collate

    ds = PatchDataset(store, PATCH, patches_per_item=BATCHES * BATCH // inputs.n + 1, seed=0,
                      read=ReadOptions(threads=threads))
    ds[0]  # the parent reads first (its pool started before the workers fork)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0)
    return lambda: loader


def threads_rows(workdir: Path, rounds: int = THREAD_ROUNDS, cap_s: float = THREAD_CAP_S) -> list[Result]:
    """num_workers 0, 2, 4, each without threads (`ReadOptions(threads=1)`) and with one decode thread per core
    in every process, against the decode limit: cores x 1000 / p50 ms of the bare read of the same chunks.

    The limit is timed in every run's own process, once its loader and workers are gone (`_trial`'s probe): this
    VM's speed swings up to 1.8x between runs minutes apart, so a limit timed once, before the group, set the rows
    against another moment's machine. Each row is set against the limit probed right after its best run (the
    target is checked so), and against the median of all probes (the limit row). The machine may be shared:
    each row also gives its CPU per sample (the process tree's, least of its runs) against the bare read's CPU
    per patch, and the rate that CPU allows on every core (cores x 1000 / CPU ms), the figures the load moves
    least; the load average before and after is in the limit row's note. Memory: each row's process-tree peak
    RSS, PSS and USS, against a DataLoader with `FLOOR_WORKERS` workers over a dataset that reads nothing."""
    inputs = Inputs(workdir, THREAD_VOLUMES)
    inputs.ensure()
    store = inputs.store("default")
    cores = _cores()
    load = os.getloadavg()[0]
    ((p50, p90, bare_cpu), (floor_cpu, batch_cpu)), _ = _in_fresh_process(_limit_trial, str(store))
    cases = [_Case(f"labzarr, ReadOptions(threads={t})", partial(_threaded, threads=t), w, runs=rounds,
                   cap_s=cap_s, probe=True) for w in THREAD_WORKERS for t in (1, cores)]
    floor_case = _Case("torch DataLoader over a dataset that reads nothing", _zeros, FLOOR_WORKERS, cap_s=cap_s)
    *runs, (floor_run,) = _runs([*cases, floor_case], inputs, store, store)

    def limit_of(res: dict[str, Any]) -> float:
        return cores * 1000 / (res["bare"][0] * 1e3)

    probes = sorted(limit_of(res) for case_runs in runs for res, _ in case_runs)
    limit = statistics.median(probes)
    rows = [Result(f"decode limit: {cores} cores x 1000 / p50 ms of a bare pread + decode", limit, "samples/s",
                   group=THREADS_GROUP, baseline=True,
                   note=f"median of {len(probes)} probes, one in each run's process once its loader was gone "
                        f"(from {probes[0]:,.0f} to {probes[-1]:,.0f}; p50 {cores * 1000 / limit:.3f} ms); before "
                        f"the group, in a process of its own: p50 {p50 * 1e3:.3f} ms "
                        f"({cores * 1000 / (p50 * 1e3):,.0f} samples/s), p90 {p90 * 1e3:.3f} ms, CPU "
                        f"{bare_cpu * 1e3:.3f} ms a patch ({LATENCY_CALLS} "
                        f"random 64³ patches a probe); load average {load:.1f} before the group, "
                        f"{os.getloadavg()[0]:.1f} after ({cores} cores)")]
    cpu_rows = [Result("bare pread + decode of a patch's chunks: CPU per patch", floor_cpu * 1e3, "ms",
                       higher_is_better=False, group=THREADS_CPU_GROUP, baseline=True,
                       note=f"least of {CPU_ROUNDS} rounds of {LATENCY_CALLS // BATCH * BATCH} patches, "
                            "alternated with the row below"),
                Result("labzarr __getitems__, batch 8, ReadOptions(threads=1), no DataLoader: CPU per sample",
                       batch_cpu * 1e3, "ms", higher_is_better=False, group=THREADS_CPU_GROUP,
                       note=f"the same patches; least of {CPU_ROUNDS} rounds (process CPU: the calling thread's "
                            "locating and the decode thread's reads)")]
    floor_res, floor_peak = floor_run
    floor_rss = floor_peak.rss
    memory_rows = [Result(f"{floor_case.name}, num_workers={FLOOR_WORKERS}", floor_rss / 2**20, "MB",
                          higher_is_better=False, group=THREADS_MEMORY_GROUP, baseline=True,
                          note=f"the floor: each sample torch.zeros, torch's default collate; PSS "
                               f"{_mb(floor_peak.pss)}, USS {_mb(floor_peak.uss)}{floor_peak.breakdown()}; "
                               f"{floor_res['samples_per_s']:,.0f} samples/s")]
    measured = [_loader_row(f"{case.name}, num_workers={case.workers}", case_runs, THREADS_GROUP, baseline=False)
                for case, case_runs in zip(cases, runs)]
    best = max(measured, key=lambda r: r.value)
    for row, case, case_runs in zip(measured, cases, runs):
        top = max(case_runs, key=lambda run: run[0]["samples_per_s"])
        peak = max((p for _, p in case_runs), key=lambda p: p.rss)
        cpu = min(res["cpu_ms"] for res, _ in case_runs)
        own = limit_of(top[0])
        of = (f"{row.value / own:.0%} of the limit probed right after its best run ({own:,.0f}), "
              f"{row.value / limit:.0%} of the median limit")
        if row is best:
            of = f"the best row: {of} (target >= {OF_LIMIT:.0%}: {_verdict(row.value >= OF_LIMIT * own)})"
        rows.append(dataclasses.replace(row, note=f"{of}; CPU per sample {cpu / (bare_cpu * 1e3):.2f}x the bare "
                                                  f"read's, so {cores} free cores would give at most "
                                                  f"{cores * 1000 / cpu:,.0f} samples/s; tree RSS under 1 GB: "
                                                  f"{_verdict(peak.rss < TREE_RSS)}; {row.note}"))
        if case.workers == FLOOR_WORKERS:
            memory_rows.append(Result(f"{case.name}, num_workers={case.workers}", peak.rss / 2**20, "MB",
                                      higher_is_better=False, group=THREADS_MEMORY_GROUP,
                                      note=f"peak of {len(case_runs)} runs; under 1 GB: {_verdict(peak.rss < TREE_RSS)}"
                                           f"; PSS {_mb(max(p.pss for _, p in case_runs))}, USS "
                                           f"{_mb(max(p.uss for _, p in case_runs))}{peak.breakdown()}; "
                                           f"{(peak.rss - floor_rss) / 2**20:+,.0f} MB against the floor"))
    return rows + cpu_rows + memory_rows


# -- layouts --------------------------------------------------------------------------------------------------


def layout_rows(inputs: Inputs) -> list[Result]:
    from labzarr.store import StoreReader

    ts = _tensorstore()
    rows = []
    origins = _origins(LAYOUT_CALLS, seed=1)
    truth = np.load(inputs.npy[0], mmap_mode="r")
    for layout, section in LAYOUTS.items():
        store = inputs.store(layout)
        name = f"volumes/{_volume_names(store)[0]}/0"  # the image group's full-resolution level
        files, size = _du(store / name)
        readers = {"labzarr": StoreReader(store, backend="labzarr"), "zarr": StoreReader(store, backend="zarr")}
        calls: dict[str, Callable[[int], object]] = {
            path: lambda j, r=r, a=name: r.read(a, (0, *_box(origins[j]))) for path, r in readers.items()}
        if ts is not None:
            ta = _ts_open(ts, store / name)
            calls["tensorstore"] = lambda j, a=ta: a[(0, *_box(origins[j]))].read().result()
        for fn in calls.values():
            np.testing.assert_array_equal(np.asarray(fn(0)), _crop(truth, origins[0]))
        times = {path: median_p90(t) for path, t in _interleaved(calls, LAYOUT_CALLS).items()}
        (m, p), (m_z, _) = times["labzarr"], times["zarr"]
        other = f"zarr-python {m_z * 1e3:.2f} ms ({m_z / m:.1f}x)"
        if "tensorstore" in times:
            m_ts = times["tensorstore"][0]
            other += f", tensorstore {m_ts * 1e3:.2f} ms ({m_ts / m:.1f}x)"
        spec = section.replace("\n", "; ").strip("; ") or "chunks 32³, shards 256x256x128, blosc-lz4 5"
        rows.append(Result(
            name=f"layout {layout}: labzarr reader", value=m * 1e3, unit="ms", higher_is_better=False,
            baseline=layout == BASELINE_LAYOUT, group=f"store layout (one 64³ patch, ms, median of {LAYOUT_CALLS})",
            note=f"p90 {p * 1e3:.2f} ms; {other}; {files} files, {truth.nbytes / size:.2f}x compression; {spec}"))
    return rows


def _progress_to_stderr() -> None:
    """This module's progress lines on stderr (the table is the output); other loggers stay as they are."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("bench: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def run(workdir: Path) -> list[Result]:
    _progress_to_stderr()
    inputs = Inputs(workdir)
    inputs.ensure()
    for layout in LAYOUTS:  # converted before anything is timed
        inputs.store(layout)
    rows = []
    for part in (latency_rows, loader_rows, start_method_rows, layout_rows):
        t = time.perf_counter()
        rows += part(inputs)
        log.info("%s: %.0f s", part.__name__, time.perf_counter() - t)
    t = time.perf_counter()
    rows += threads_rows(workdir)
    log.info("threads_rows: %.0f s", time.perf_counter() - t)
    return rows


if __name__ == "__main__":  # one group alone, e.g. `python bench/loaders.py --threads`
    import argparse

    from common import print_table

    parser = argparse.ArgumentParser(description="bench/loaders.py's batched-reads group alone")
    parser.add_argument("--threads", action="store_true", required=True,
                        help="run the batched-reads group (num_workers 0, 2, 4 with and without threads)")
    parser.add_argument("--workdir", type=Path, default=Path("data/bench"), help="cached generated inputs")
    parser.add_argument("--rounds", type=int, default=THREAD_ROUNDS, help="runs of each row, in turns")
    parser.add_argument("--cap", type=float, default=THREAD_CAP_S, help="seconds each run is timed for")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    _progress_to_stderr()
    print_table(NAME, threads_rows(args.workdir.resolve(), args.rounds, args.cap))
