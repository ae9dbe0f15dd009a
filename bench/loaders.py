"""Training-side reads on CT-like volumes: labzarr vs nibabel, numpy, MONAI and TorchIO, and the store layouts.

Inputs are generated once and cached under `workdir/ct/`: `N_VOLUMES` int16
volumes of 512x512x300 (air, body, fat, lungs, spine, 12 HU noise, like a CT),
each as .nii.gz (what labs deliver; what MONAI and TorchIO load), plain .nii
(nibabel memory-maps it) and .npy (the no-decode limit), and converted with
`labzarr convert` into stores of several `[store]` layouts.

Rows, all from this one run (each DataLoader row in a fresh process, so its
peak memory is its own):
- layout: a random 64³ patch from one volume, median of 100 reads, through
  tensorstore (the worker read path) and zarr-python, per chunk/shard/codec;
- latency: `ds[i]` and the usual alternatives, median (p90 in the note) of 100 calls;
- DataLoader: samples/s over up to 1000 batches of 8 (capped at `TIME_CAP_S`
  seconds for the slow ones) with num_workers 0 and 2, and the peak RSS and
  PSS of the loader's process tree.
"""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing as mp
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import psutil
from common import Result, median_p90, time_calls

NAME = "loaders: random 64³ patches from 512x512x300 int16 CT volumes"

N_VOLUMES = 8
SHAPE = (512, 512, 300)
PATCH = (64, 64, 64)
LATENCY_CALLS = 100
BATCH = 8
BATCHES = 1000
TIME_CAP_S = 45.0
GENERATOR_VERSION = 1

# [store] sections compared; "default" must match convert/spec.py's StoreSpec defaults.
LAYOUTS: dict[str, str] = {
    "default": "",  # chunks 32³ in 256x256x128 shards, blosc-lz4 5
    "c64-zstd5": 'chunks = [64, 64, 64]\nshards = false\ncompressor = "zstd"\nlevel = 5\n',  # the foundation's
    "c64-bzstd5": 'chunks = [64, 64, 64]\nshards = false\ncompressor = "blosc-zstd"\nlevel = 5\n',
    "c64-lz4": 'chunks = [64, 64, 64]\nshards = false\n',
    "c64s-lz4": 'chunks = [64, 64, 64]\nshards = [256, 256, 128]\n',
    "c32-lz4": 'chunks = [32, 32, 32]\nshards = false\n',
    "c32s-bzstd3": 'compressor = "blosc-zstd"\nlevel = 3\n',
    "c32s-none": 'compressor = "none"\n',
    "c16s-lz4": 'chunks = [16, 16, 16]\nshards = [256, 256, 128]\n',
}
BASELINE_LAYOUT = "c64-zstd5"

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
        self.root = workdir / "ct"
        self.n = n
        self.raw = self.root / "raw"
        self.gz = [self.raw / f"ct_{k:03d}.nii.gz" for k in range(n)]
        self.nii = [self.root / "plain" / f"ct_{k:03d}.nii" for k in range(n)]
        self.npy = [self.root / "plain" / f"ct_{k:03d}.npy" for k in range(n)]

    def ensure(self) -> None:
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
        """The store of `layout` (all volumes for "default", the first volume for the others), converted once."""
        from labzarr.convert import convert_delivery
        from labzarr.convert.demo import write_spec

        raw = self.raw if layout == "default" else self.root / "raw-one"
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
            assert result.summary["counts"]["ok"] == (self.n if layout == "default" else 1), result.summary
            log.info("store %s converted in %.1f s", layout, time.perf_counter() - t)
            done.write_text(text)
        return store


# -- measuring ------------------------------------------------------------------------------------------------


def _du(path: Path) -> tuple[int, int]:
    files = [Path(d) / f for d, _, fs in os.walk(path) for f in fs]
    return len(files), sum(f.stat().st_size for f in files)


def _origins(n: int, seed: int, shape: tuple[int, ...] = SHAPE) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(0, s - p + 1)) for s, p in zip(shape, PATCH)) for _ in range(n)]


def _crop(a: Any, o: tuple[int, ...]) -> Any:
    return a[tuple(slice(x, x + p) for x, p in zip(o, PATCH))]


def layout_rows(inputs: Inputs) -> list[Result]:
    import tensorstore as ts
    import zarr

    rows = []
    origins = _origins(LATENCY_CALLS, seed=1)
    truth = np.load(inputs.npy[0], mmap_mode="r")
    for layout in LAYOUTS:
        store = inputs.store(layout)
        path = store / "volumes" / _array_name(store)
        files, size = _du(path)
        za = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), mode="r")
        ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}, "data_copy_concurrency": {"limit": 1}})
        ta = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, read=True,
                     context=ctx).result()
        o0 = origins[0]
        np.testing.assert_array_equal(np.asarray(_crop(ta[0], o0).read().result()), _crop(truth, o0))
        it = iter(origins)
        t_ts = time_calls(lambda: _crop(ta[0], next(it)).read().result(), len(origins))
        it = iter(origins)
        t_z = time_calls(lambda: za[(0, *(slice(x, x + p) for x, p in zip(next(it), PATCH)))], len(origins))
        m_ts, p_ts = median_p90(t_ts)
        m_z, _ = median_p90(t_z)
        spec = LAYOUTS[layout].replace("\n", "; ").strip("; ") or "chunks 32³, shards 256x256x128, blosc-lz4 5"
        rows.append(Result(
            name=f"layout {layout}: tensorstore read", value=m_ts * 1e3, unit="ms", higher_is_better=False,
            baseline=layout == BASELINE_LAYOUT, group="store layout (one 64³ patch)",
            note=f"p90 {p_ts * 1e3:.2f} ms; zarr-python {m_z * 1e3:.2f} ms; {files} files, "
                 f"{truth.nbytes / size:.2f}x compression; {spec}"))
    return rows


def _array_name(store: Path) -> str:
    return sorted(p.name for p in (store / "volumes").iterdir() if p.is_dir())[0]


def latency_rows(inputs: Inputs) -> list[Result]:
    from labzarr import PatchDataset
    from labzarr.loaders import ReadOptions

    store = inputs.store("default")
    rows = []
    group = "one 64³ patch (ms, median of 100)"
    for backend, what in (("tensorstore", "the default read path"), ("zarr", "in a main process that forks")):
        ds = PatchDataset(store, PATCH, patches_per_item=LATENCY_CALLS, read=ReadOptions(backend=backend))
        idx = iter(np.random.default_rng(2).permutation(len(ds))[:LATENCY_CALLS].tolist())
        ds[0]  # open the arrays: a training loop pays that once per worker, not per sample
        m, p = median_p90(time_calls(lambda: ds[next(idx)], LATENCY_CALLS))
        rows.append(Result(f"labzarr ds[i], {backend} ({what})", m * 1e3, "ms", higher_is_better=False, group=group,
                           note=f"p90 {p * 1e3:.2f} ms"))
    origins = _origins(LATENCY_CALLS, seed=3)
    vols = [k % inputs.n for k in range(LATENCY_CALLS)]

    def calls(fn: Callable[[int, tuple[int, ...]], Any], n: int = LATENCY_CALLS) -> tuple[float, float]:
        it = iter(zip(vols, origins))

        def one() -> None:
            k, o = next(it)
            np.asarray(fn(k, o))
        return median_p90(time_calls(one, n))

    m, p = calls(lambda k, o: _crop(nib.load(inputs.gz[k]).get_fdata(), o))
    rows.append(Result("nibabel .nii.gz full load + crop", m * 1e3, "ms", higher_is_better=False, baseline=True,
                       group=group, note=f"p90 {p * 1e3:.2f} ms; get_fdata() as users call it"))
    gc.collect()
    # Opened once, sliced per call, as a Dataset would: the patch read is what is timed, not the open.
    images = [nib.load(path, mmap=True) for path in inputs.nii]
    m, p = calls(lambda k, o: _crop(images[k].dataobj, o))
    rows.append(Result("nibabel .nii memory-mapped slicing", m * 1e3, "ms", higher_is_better=False, group=group,
                       note=f"p90 {p * 1e3:.2f} ms; uncompressed: {inputs.nii[0].stat().st_size / 2**20:.0f} MB "
                            f"a volume vs {inputs.gz[0].stat().st_size / 2**20:.0f} MB .nii.gz"))
    maps = [np.load(path, mmap_mode="r") for path in inputs.npy]
    m, p = calls(lambda k, o: np.array(_crop(maps[k], o)))
    rows.append(Result(".npy memory-map (the no-decode limit)", m * 1e3, "ms", higher_is_better=False, group=group,
                       note=f"p90 {p * 1e3:.2f} ms; random patches fault in fresh pages"))
    return rows


# -- DataLoader trials, each in a fresh process ---------------------------------------------------------------


def _tree_memory(pid: int) -> tuple[int, int]:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss = pss = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return rss, pss


class _Peak:
    """Polls a process tree's summed RSS and PSS every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss, self.pss = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            rss, pss = _tree_memory(self.pid)
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _batches(loader_factory: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    while True:  # a loader shorter than the trial is iterated again (a new epoch)
        yield from loader_factory()


def _trial(case: int, workers: int, inputs_root: str, store: str, baseline_store: str, out: Any) -> None:
    """Runs in a spawned process: build the case's loader, time up to BATCHES batches, report to `out`."""
    import torch

    # Behave like `python train.py` on Linux before Python 3.14: DataLoader workers fork from this process.
    mp.set_start_method("fork", force=True)
    torch.set_num_threads(1)
    inputs = Inputs(Path(inputs_root).parent)
    t0 = time.perf_counter()
    factory = _CASES[case][1](inputs, workers, Path(store), Path(baseline_store))
    setup = time.perf_counter() - t0
    it = _batches(factory)
    first = next(it)  # worker start-up and caches are not per-sample costs: time from the first batch on
    assert first is not None
    t, n, cap = time.perf_counter(), 0, time.perf_counter() + TIME_CAP_S
    while n < BATCHES - 1 and time.perf_counter() < cap:
        next(it)
        n += 1
    out.put({"samples_per_s": n * BATCH / (time.perf_counter() - t), "batches": n + 1, "setup_s": setup})


def _labzarr(inputs: Inputs, workers: int, store: Path, _: Path, backend: str = "auto") -> Callable[[], Iterable[Any]]:
    from torch.utils.data import DataLoader

    from labzarr import PatchDataset
    from labzarr.loaders import ReadOptions, collate

    ds = PatchDataset(store, PATCH, patches_per_item=BATCHES * BATCH // inputs.n + 1, seed=0,
                      read=ReadOptions(backend=backend))  # type: ignore[arg-type]
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0)
    return lambda: loader


def _labzarr_ts(inputs: Inputs, workers: int, store: Path, baseline_store: Path) -> Callable[[], Iterable[Any]]:
    return _labzarr(inputs, workers, store, baseline_store, backend="tensorstore")


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
        return torch.from_numpy(a[(slice(None), *(slice(x, x + p) for x, p in zip(o, PATCH)))])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "arrays": {}}


def _plain_zarr(inputs: Inputs, workers: int, _: Path, baseline_store: Path) -> Callable[[], Iterable[Any]]:
    from torch.utils.data import DataLoader

    paths = [baseline_store / "volumes" / p for p in _volume_names(baseline_store)]
    ds = _PlainZarr(paths, BATCHES * BATCH)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
    return lambda: loader


def _volume_names(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "volumes").iterdir() if p.is_dir())


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
                      copy_cache=False, num_workers=1, progress=False)
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


_Factory = Callable[[Inputs, int, Path, Path], Callable[[], Iterable[Any]]]
# (row name, loader factory, num_workers); the rows run in this order, each in a fresh process.
_CASES: list[tuple[str, _Factory, int]] = [
    ("plain zarr Dataset (foundation store)", _plain_zarr, 0),
    ("plain zarr Dataset (foundation store)", _plain_zarr, 2),
    ("labzarr, default (zarr-python in a forking main)", _labzarr, 0),
    ("labzarr, ReadOptions(backend='tensorstore')", _labzarr_ts, 0),
    ("labzarr, default (tensorstore in workers)", _labzarr, 2),
    ("MONAI Dataset (LoadImaged+RandSpatialCropd)", _monai, 0),
    ("MONAI Dataset (LoadImaged+RandSpatialCropd)", _monai, 2),
    ("MONAI CacheDataset copy_cache=False", _monai_cache, 0),
    ("MONAI CacheDataset copy_cache=False", _monai_cache, 2),
    ("TorchIO Queue + UniformSampler", _torchio, 0),
    ("TorchIO Queue + UniformSampler", _torchio, 2),
]


def _in_fresh_process(target: Callable[..., None], *args: Any) -> tuple[dict[str, Any], _Peak]:
    """Run `target(*args, queue)` in a spawned process; its report and its process tree's peak memory."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    peak = _Peak(p.pid)  # type: ignore[arg-type]
    try:
        res = q.get(timeout=TIME_CAP_S + 900)
    finally:
        peak.stop()
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    return res, peak


def loader_rows(inputs: Inputs) -> list[Result]:
    store, baseline_store = inputs.store("default"), inputs.store(BASELINE_LAYOUT)
    rows = []
    for n, (case, _, workers) in enumerate(_CASES):
        res, peak = _in_fresh_process(_trial, n, workers, str(inputs.root), str(store), str(baseline_store))
        rows.append(Result(
            f"{case}, num_workers={workers}", res["samples_per_s"], "samples/s", group="DataLoader, batch 8",
            baseline=n == 0, note=f"peak RSS {peak.rss / 2**20:,.0f} MB (PSS {peak.pss / 2**20:,.0f} MB); "
                                  f"{res['batches']} batches; setup {res['setup_s']:.1f} s"))
        log.info("%s: %.1f samples/s; %s", rows[-1].name, rows[-1].value, rows[-1].note)
    return rows


def _cache_trial(mode: str, cache_bytes: int, store: str, out: Any) -> None:
    from labzarr import PatchDataset
    from labzarr.loaders import ReadOptions

    ds = PatchDataset(store, PATCH, patches_per_item=LATENCY_CALLS * 4 if mode == "random" else 1,
                      mode=mode, overlap=16 if mode == "grid" else 0,  # type: ignore[arg-type]
                      read=ReadOptions(backend="tensorstore", cache_bytes=cache_bytes))
    n = LATENCY_CALLS * 4
    keys = np.random.default_rng(4).permutation(len(ds))[:n].tolist() if mode == "random" else range(n)
    ds[0]
    it = iter(keys)
    m, p = median_p90(time_calls(lambda: ds[next(it)], n))
    out.put({"median": m, "p90": p, "rss": psutil.Process().memory_info().rss})


def cache_rows(inputs: Inputs) -> list[Result]:
    store = inputs.store("default")
    rows = []
    for mode, what in (("random", "random patches"), ("grid", "grid tiles, overlap 16, in order")):
        for cache in (0, 64 << 20, 256 << 20):
            res, _ = _in_fresh_process(_cache_trial, mode, cache, str(store))
            rows.append(Result(f"{what}, tensorstore cache {cache >> 20} MB", res["median"] * 1e3, "ms",
                               higher_is_better=False, baseline=cache == 0, group=f"decoded-chunk cache: {what}",
                               note=f"p90 {res['p90'] * 1e3:.2f} ms; process RSS {res['rss'] / 2**20:,.0f} MB "
                                    f"after {LATENCY_CALLS * 4} reads"))
    return rows


def run(workdir: Path) -> list[Result]:
    if not log.handlers:  # progress on stderr; the table is the output
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("bench: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    inputs = Inputs(workdir)
    inputs.ensure()
    return [*layout_rows(inputs), *latency_rows(inputs), *cache_rows(inputs), *loader_rows(inputs)]
