"""DICOM conversion: labzarr (a ready 2-worker LocalCluster) against dcm2niix, on three inputs.

Inputs (generated once, cached under WORKDIR/dicom/), one file per slice as
scanners write it, in shuffled file order:
- a CT series of 400 slices, 512x512, 12 bits stored in uint16 with
  RescaleIntercept -1024 (200 MB of pixels);
- a DWI series of 2,000 files: 100 volumes (b = 0 and 99 gradient
  directions at b = 1000) of 20 slices of 128x128 uint16 (66 MB);
- 40 small series of 16 slices of 64x64 (per-series overhead).

Rows, one group per input (compare ratios within a group):
- dcm2niix: the C converter everyone compares with, writing an uncompressed
  NIfTI (the baseline; the issue's target is labzarr within 2x of it);
- labzarr: `execute` on a ready cluster (cluster start-up is not per-series
  cost), best of 3 runs from scratch on that cluster as dcm2niix's is best of
  3, which hashes every file, reads every header on the workers, writes
  the store in its default layout (and, for the CT, in 64^3 blosc-zstd-5
  chunks) and the manifest;
- straightforward (CT only): one process, pydicom `dcmread` of every file,
  sort by position, stack, canonical flip, one zarr write;
- reading headers alone (files/s): as a probe batch reads them (walked in memory
  against the batch's template), walked file by file, and through pydicom's
  dcmread (readers/_dicom_walk.py says why the walk); and peak RSS of the largest labzarr worker
  above its baseline next to the straightforward path's.

Real exports, one group per corpus and a total: the five public dcm2niix QA corpora (tests/qa_corpora.py
reads them from bare git mirrors, `../.mirror/neurolabusc+<name>/repo` beside the project unless
`bench/run.py --corpora DIR` says where; their `In/` folders are extracted once under WORKDIR/dicom/corpora/).
Each is converted whole, from command start to exit, by `labzarr convert --workers 2 --quiet` (a spec `labzarr
init` wrote, store removed before each run) and by `dcm2niix -z n -b y` (the PyPI build beside this Python),
best of 2 each, alternated; labzarr's note gives its best run's own phases from the store's run log (the rest of
its wall time is the command's imports and exit). An absent corpus is named on one line and the section goes on;
a mirror lacking some blobs converts what it holds, and the group title says how many files are missing. labzarr's
own sources are compiled to bytecode first, as pip compiles an installed wheel's (`_compiled`). A third row, the
floor, alternated with the two: this Python starting and importing the four libraries labzarr reads and writes
DICOM with (numpy, pydicom, zarr, nibabel), and nothing else: no converter built on them starts to work sooner,
which issue 34's per-corpus target of 3x dcm2niix has to leave room for.
"""

from __future__ import annotations

import compileall
import copy
import importlib.util
import json
import math
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pydicom
from common import Result
from pydicom.uid import generate_uid

from labzarr.convert.init.scaffold import init_delivery
from labzarr.convert.run.driver import _PROBE_BATCH as PROBE_BATCH
from labzarr.readers import read_head
from labzarr.readers._dicom_header import read_header
from labzarr.readers._dicom_walk import DecodedValues

NAME = ("DICOM: labzarr against dcm2niix, a 400-slice CT, a 2,000-file DWI, 40 small series and the public "
        "dcm2niix QA corpora (real exports)")
SLICES, SIZE = 400, 512
OWNER = "neurolabusc"
SMALL_DELIVERY = 50  # files: a delivery this small should cost at most dcm2niix's time + 1 s (issue 34)
MB = 1e6
TEMPLATE = Path(pydicom.__file__).parent / "data" / "test_files" / "CT_small.dcm"


def _series(root: Path) -> Path:
    folder = root / "raw" / "case_001" / "ct"
    if folder.exists() and len(list(folder.iterdir())) == SLICES:
        return folder.parent.parent
    shutil.rmtree(root / "raw", ignore_errors=True)
    folder.mkdir(parents=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from convert import _ct_planes  # the conversion section's CT-like planes

    template = pydicom.dcmread(TEMPLATE)
    series = generate_uid(entropy_srcs=["bench-dicom"])
    names = [f"IM{i:05d}" for i in range(SLICES)]
    random.Random(0).shuffle(names)  # file names say nothing about slice order, as on many PACS exports
    for z0 in range(0, SLICES, 32):
        planes = _ct_planes((SIZE, SIZE, SLICES), 1, z0, min(SLICES, z0 + 32))
        for dz in range(planes.shape[2]):
            k = z0 + dz
            ds = template.copy()
            ds.SeriesInstanceUID = series
            ds.SOPInstanceUID = generate_uid(entropy_srcs=["bench-dicom", str(k)])
            ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
            ds.InstanceNumber = k + 1
            ds.Rows = ds.Columns = SIZE
            ds.PixelSpacing = [0.7, 0.7]
            ds.ImagePositionPatient = [-179.2, -179.2, -250.0 + 1.25 * k]
            ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
            ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
            ds.PixelData = (np.clip(planes[:, :, dz].T.astype(np.int32) + 1024, 0, 4095)).astype(np.uint16).tobytes()
            ds.save_as(folder / names[k], enforce_file_format=True)
    return folder.parent.parent


def _dcm2niix(folder: Path, out: Path) -> float:
    """Wall seconds of dcm2niix converting every series under `folder` (best of 3: it is the baseline); files are
    named by SeriesInstanceUID, since the generated series share the template's patient and series number."""
    best = math.inf
    for _ in range(3):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "dcm2niix"), "-z", "n", "-b", "n", "-f", "%j", "-o",
                        str(out), str(folder)], check=True, capture_output=True)
        best = min(best, time.perf_counter() - t)
    return best


def _slices(folder: Path, template: pydicom.Dataset, series: str, planes: list[np.ndarray], *,
            positions: list[float], extra: list[dict[str, object]] | None = None, spacing: float = 0.7) -> None:
    """Write one file per plane (uint16, 12 bits stored) of series `series`, in shuffled file-name order."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"IM{i:05d}" for i in range(len(planes))]
    random.Random(series).shuffle(names)
    for k, plane in enumerate(planes):
        ds = template.copy()
        ds.SeriesInstanceUID = series
        ds.SOPInstanceUID = generate_uid(entropy_srcs=[series, str(k)])
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
        ds.InstanceNumber = k + 1
        ds.Rows, ds.Columns = plane.shape
        ds.PixelSpacing = [spacing, spacing]
        ds.ImagePositionPatient = [-0.5 * spacing * plane.shape[1], -0.5 * spacing * plane.shape[0], positions[k]]
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
        for key, value in (extra[k] if extra else {}).items():
            setattr(ds, key, value)
        ds.PixelData = plane.astype(np.uint16).tobytes()
        ds.save_as(folder / names[k], enforce_file_format=True)


def _dwi(root: Path) -> Path:
    """The 2,000-file DWI series (cached): 100 volumes of 20 slices of 128x128."""
    folder = root / "raw-dwi" / "case_001" / "dwi"
    volumes, slices, size = 100, 20, 128
    if folder.exists() and len(list(folder.iterdir())) == volumes * slices:
        return folder.parent.parent
    shutil.rmtree(folder.parent.parent, ignore_errors=True)
    template = pydicom.dcmread(TEMPLATE)
    template.Modality, template.RescaleSlope, template.RescaleIntercept = "MR", 1, 0
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(volumes - 1, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    planes, positions, extra = [], [], []
    base = rng.integers(0, 4096, (size, size))
    for v in range(volumes):
        for z in range(slices):
            planes.append(np.roll(base, v + 3 * z, axis=0) // (1 + (v > 0)))
            positions.append(-40.0 + 4.0 * z)
            b, g = (0.0, (0.0, 0.0, 0.0)) if v == 0 else (1000.0, tuple(float(c) for c in directions[v - 1]))
            extra.append({"DiffusionBValue": b, "DiffusionGradientOrientation": list(g), "AcquisitionNumber": v + 1})
    _slices(folder, template, generate_uid(entropy_srcs=["bench-dwi"]), planes, positions=positions, extra=extra,
            spacing=1.8)
    return folder.parent.parent


def _small_series(root: Path, n: int = 40) -> Path:
    """`n` series of 16 slices of 64x64, one a case (cached)."""
    raw = root / "raw-small"
    if raw.exists() and len(list(raw.iterdir())) == n:
        return raw
    shutil.rmtree(raw, ignore_errors=True)
    template = pydicom.dcmread(TEMPLATE)
    rng = np.random.default_rng(1)
    for i in range(n):
        planes = [rng.integers(0, 4096, (64, 64)) for _ in range(16)]
        _slices(raw / f"case_{i:03d}" / "ct", template, generate_uid(entropy_srcs=["bench-small", str(i)]), planes,
                positions=[-20.0 + 2.5 * k for k in range(16)], spacing=0.9)
    return raw


def _straightforward(folder: Path, store: Path) -> float:
    """pydicom dcmread of every file, sort, stack, flip to canonical, one zarr write: wall seconds."""
    import zarr

    from labzarr.convert.spec import StoreSpec
    from labzarr.convert.write.arrays import codecs

    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    dss = sorted((pydicom.dcmread(p) for p in folder.iterdir()), key=lambda d: float(d.ImagePositionPatient[2]))
    vol = np.stack([d.pixel_array.astype(np.int16) - 1024 for d in dss], axis=-1)  # (rows, cols, z)
    data = np.ascontiguousarray(vol.transpose(1, 0, 2)[::-1, ::-1, :])[np.newaxis]  # LPS -> RAS: x, y flip
    spec = StoreSpec(chunks=(64, 64, 64), compressor="blosc-zstd", level=5, checksum=True)
    arr = zarr.create_array(zarr.storage.LocalStore(store), name="v", shape=data.shape, dtype=data.dtype,
                            chunks=(1, 64, 64, 64), compressors=codecs(spec), fill_value=0, overwrite=True)
    arr[...] = data
    return time.perf_counter() - t


def _straightforward_peak_rss(folder: Path, store: Path) -> float:
    """Peak RSS (B) above baseline of a fresh process running the straightforward path.

    VmHWM after a reset, not ru_maxrss: Linux carries ru_maxrss over from the parent into a
    forked child, so a child of a large parent would report the parent's peak.
    """
    code = (
        "import sys; sys.path.insert(0, 'bench'); import convert as c, dicom as d; from pathlib import Path;"
        "base = c._reset_peak();"
        f"d._straightforward(Path({str(folder)!r}), Path({str(store)!r}));"
        "print(base, c._worker_rss('VmHWM'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    base, peak = map(int, out.stdout.split()[-2:])
    return float(peak - base)


def _probe(folder: Path, *, walk: bool = True, batch: int = 0) -> float:
    """Files per second of reading every header, best of 3: walked one file at a time, or with `batch` as a probe
    batch of that many files reads them (one `DecodedValues`: values decoded once, files walked against the
    batch's template), or with `walk` False through pydicom's dcmread."""
    files = sorted(folder.iterdir())
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        values = None
        for i, p in enumerate(files):
            if batch and i % batch == 0:
                values = DecodedValues()
            read_header(p, read_head(p), walk=walk, values=values)
        best = min(best, time.perf_counter() - t)
    return len(files) / best


def _enhanced(root: Path, frames: int) -> Path:
    """An enhanced multi-frame CT of `frames` frames: pydicom's liver_1frame.dcm, its per-frame items repeated, its
    frames cut to 16x16 so that reading the header, not hashing pixels, is what is timed."""
    path = root / f"enhanced-{frames}.dcm"
    if path.exists():
        return path
    ds = pydicom.dcmread(TEMPLATE.parent / "liver_1frame.dcm")
    items = list(ds.PerFrameFunctionalGroupsSequence)
    ds.PerFrameFunctionalGroupsSequence = [copy.deepcopy(items[k % len(items)]) for k in range(frames)]
    ds.NumberOfFrames, ds.Rows, ds.Columns = frames, 16, 16
    ds.PixelData = bytes(16 * 16 * ds.BitsAllocated // 8 * frames)
    root.mkdir(parents=True, exist_ok=True)
    ds.save_as(path)
    return path


def bench_functional_groups(root: Path, frames: int = 96) -> list[Result]:
    """Headers per second of one enhanced multi-frame file, best of 5 rounds of 10 reads: as the probe reads it
    (walked, its functional groups read from the raw bytes: readers/_dicom_groups.py) and with pydicom's datasets
    (dcmread, a Dataset for every item of every frame)."""
    path = _enhanced(root, frames)
    head = read_head(path)
    group = f"an enhanced multi-frame header: {frames} frames, 1 process (headers/s)"
    out = []
    for walk, label in ((False, "through pydicom's dcmread and its datasets"),
                        (True, "as the probe reads it: functional groups from the raw bytes")):
        best = math.inf
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(10):
                read_header(path, head, walk=walk)
            best = min(best, (time.perf_counter() - t) / 10)
        out.append(Result(label, 1 / best, "headers/s", group=group, baseline=not walk))
    return out


def _qa_corpora() -> ModuleType:
    """tests/qa_corpora.py, the one reader of the corpora's mirrors (the tests use it too)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests import qa_corpora

    return qa_corpora


def _compiled() -> None:
    """Compile labzarr's sources to bytecode (`__pycache__`), as pip does for an installed wheel's. An editable
    install under PYTHONDONTWRITEBYTECODE (as in these sessions) otherwise compiles every module again in every
    run, in the command and in its worker server alike, which a user's installed copy never does."""
    for name in ("labzarr", "labzarr.convert", "labzarr.loaders", "labzarr.readers", "labzarr.store"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            compileall.compile_dir(folder, quiet=1)


def _wall(cmd: list[str], before: Callable[[], None]) -> tuple[float, str]:
    """Wall seconds of `cmd` from start to exit, after `before` (which clears its outputs), and what it printed."""
    before()
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, (done.stdout + done.stderr).strip()


def _phases(store: Path) -> str:
    """The run's own timings (the store's run log): what of the wall time the run spent in its phases; the rest is
    the command's imports and its exit."""
    timings = json.loads((store / ".labzarr" / "last-run.json").read_text())["timings"]
    return (f"run {timings['total_s']:.2f} s: start {timings['start_s']:.2f}, probe {timings['probe_s']:.2f}, "
            f"convert {timings['convert_s']:.2f}")


FLOOR = ("import numpy, pydicom, zarr, nibabel",)  # what labzarr converts DICOM with, imported and nothing done


def _corpus_runs(name: str, raw: Path, root: Path, repeat: int = 2) -> tuple[float, float, float, str, str]:
    """Best wall seconds of dcm2niix, of `labzarr convert` (the spec `labzarr init` writes) on one extracted
    corpus and of the floor (`FLOOR`), what labzarr's --quiet run printed (nothing, when it keeps its promise), and
    the phases of its best run (`_phases`)."""
    spec = root / "manifests" / name / "delivery.toml"
    # Written afresh each run: a spec an earlier version wrote keeps that version's defaults (`[run]` bounds).
    shutil.rmtree(spec.parent, ignore_errors=True)
    init_delivery(name, raw, root=root)
    store, out = root / "data" / "stores" / f"{name}.zarr", root / "d2n" / name
    bin_dir = Path(sys.executable).parent
    labzarr = [str(bin_dir / "labzarr"), "convert", str(spec), "--workers", "2", "--quiet"]
    d2n = [str(bin_dir / "dcm2niix"), "-z", "n", "-b", "y", "-o", str(out), str(raw)]

    def fresh_out() -> None:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)

    floor = [sys.executable, "-W", "ignore", "-c", *FLOOR]
    best_d2n = best_lz = best_floor = math.inf
    printed = phases = ""
    for _ in range(repeat):
        best_d2n = min(best_d2n, _wall(d2n, fresh_out)[0])
        wall, said = _wall(labzarr, lambda: shutil.rmtree(store, ignore_errors=True))
        if wall < best_lz:
            best_lz, phases = wall, _phases(store)
        printed = printed or said
        best_floor = min(best_floor, _wall(floor, lambda: None)[0])
    return best_d2n, best_lz, best_floor, printed, phases


def corpora(workdir: Path, mirrors: Path | None = None) -> list[Result]:
    """The real-export groups: one per corpus present under `mirrors`, and the total."""
    qa = _qa_corpora()
    mirrors = mirrors or qa.DEFAULT_MIRRORS
    root = workdir.resolve() / "dicom" / "corpora"
    found = {name: qa.find(name, mirrors) for name in qa.CORPORA}
    absent = [name for name, c in found.items() if c is None or not c.files]
    if absent:
        print(f"DICOM corpora: {', '.join(absent)} not under {mirrors} (neurolabusc+<name>/repo); skipped")
    out: list[Result] = []
    total_d2n = total_lz = total_floor = 0.0
    _compiled()
    for name, corpus in found.items():
        if corpus is None or not corpus.files:
            continue
        raw = qa.extract(corpus, root / "raw" / name)
        d2n, lz, floor, printed, phases = _corpus_runs(name, raw, root)
        total_d2n, total_lz, total_floor = total_d2n + d2n, total_lz + lz, total_floor + floor
        missing = f", {corpus.missing} file(s) not in the mirror" if corpus.missing else ""
        group = (f"real exports, {OWNER}/{name}: {len(corpus.files):,} files, {corpus.nbytes / MB:.1f} MB{missing} "
                 "(s from command start to exit)")
        out.append(Result("dcm2niix -z n -b y", d2n, "s", higher_is_better=False, baseline=True, group=group))
        small = len(corpus.files) <= SMALL_DELIVERY
        note = (f"{lz - d2n:+.2f} s vs dcm2niix (target for <= {SMALL_DELIVERY} files: +1.0 s)" if small else
                "--workers 2 --quiet") + f"; {phases}"
        out.append(Result("labzarr convert --workers 2", lz, "s", higher_is_better=False, group=group,
                          note=note + (f"; --quiet printed: {printed[:80]!r}" if printed else "")))
        out.append(_floor_row(floor, group, f"dcm2niix + 1.0 s is {d2n + 1:.2f} s" if small else
                              f"3x dcm2niix is {3 * d2n:.2f} s"))
    if out:
        group = f"real exports, total of the {len(out) // 3} corpora present (s)"
        out.append(Result("dcm2niix -z n -b y", total_d2n, "s", higher_is_better=False, baseline=True, group=group))
        out.append(Result("labzarr convert --workers 2", total_lz, "s", higher_is_better=False, group=group,
                          note="target: within 2x in total, 3x per corpus"))
        out.append(_floor_row(total_floor, group, f"one for each corpus; 2x dcm2niix is {2 * total_d2n:.2f} s"))
    return out


def _floor_row(seconds: float, group: str, note: str) -> Result:
    return Result("floor: python importing numpy, pydicom, zarr, nibabel", seconds, "s", higher_is_better=False,
                  group=group, note=note)


def run(workdir: Path, *, corpora_dir: Path | None = None, corpora_only: bool = False) -> list[Result]:
    """The generated inputs' groups (unless `corpora_only`), then the real exports' (`corpora`)."""
    if corpora_only:
        return corpora(workdir, corpora_dir)
    return generated(workdir) + corpora(workdir, corpora_dir)


def generated(workdir: Path) -> list[Result]:
    from convert import DEFAULT_STORE, SAME_STORE, _labzarr  # the conversion section's ready-cluster run

    root = workdir.resolve() / "dicom"  # specs name their raw folder absolutely
    raw = _series(root)
    folder = raw / "case_001" / "ct"
    total = SLICES * SIZE * SIZE * 2 / MB
    ct = f"a CT series: {SLICES} files of {SIZE}x{SIZE} uint16 ({total:.0f} MB), 2 workers (pixel MB/s)"
    out = [Result("dcm2niix (C, uncompressed .nii)", total / _dcm2niix(folder, root / "d2n"), "MB/s", baseline=True,
                  group=ct)]
    default = _labzarr(raw, root, 2, DEFAULT_STORE, repeat=3)
    out.append(Result("labzarr, default layout (32^3 in shards, blosc-lz4-5)", total / default.wall, "MB/s",
                      group=ct, note="incl. sha256 of every file, headers, statistics, manifest"))
    zstd = _labzarr(raw, root, 2, SAME_STORE, repeat=3)
    out.append(Result("labzarr, 64^3 blosc-zstd-5 + crc32c", total / zstd.wall, "MB/s", group=ct))
    out.append(Result("straightforward: pydicom read all + stack + zarr write", total / _straightforward(
        folder, root / "straight.zarr"), "MB/s", group=ct))
    out.append(Result("header reading only, 1 process, as a probe batch", _probe(folder, batch=PROBE_BATCH),
                      "files/s", group=ct, note="64 files a batch, walked against the batch's template"))
    out.append(Result("header reading only, 1 process, file by file", _probe(folder), "files/s", group=ct,
                      note="read_dicom_header: walked in memory, pixels hashed"))
    out.append(Result("header reading only, through pydicom's dcmread", _probe(folder, walk=False), "files/s",
                      group=ct, note="what readers/_dicom_walk.py replaces"))
    out.append(Result("labzarr peak RSS above baseline (largest worker)", max(default.worst[0], zstd.worst[0]) / MB,
                      "MB", higher_is_better=False, group=ct, note=f"slab streaming; series is {total:.0f} MB"))
    out.append(Result("straightforward peak RSS above baseline", _straightforward_peak_rss(
        folder, root / "straight-rss.zarr") / MB, "MB", higher_is_better=False, group=ct))

    dwi = _dwi(root)
    files = 2000
    group = f"a DWI series: {files:,} files, 100 volumes of 20 slices of 128x128, 2 workers (files/s)"
    out.append(Result("dcm2niix", files / _dcm2niix(dwi, root / "d2n-dwi"), "files/s", baseline=True, group=group))
    out.append(Result("labzarr, default layout", files / _labzarr(dwi, root, 2, DEFAULT_STORE, repeat=3).wall,
                      "files/s", group=group))
    folder = dwi / "case_001" / "dwi"
    out.append(Result("header reading only, 1 process, as a probe batch", _probe(folder, batch=PROBE_BATCH),
                      "files/s", group=group, note="64 files a batch, walked against the batch's template"))
    out.append(Result("header reading only, 1 process, file by file", _probe(folder), "files/s", group=group,
                      note="read_dicom_header: walked in memory"))
    out.append(Result("header reading only, through pydicom's dcmread", _probe(folder, walk=False), "files/s",
                      group=group))

    small = _small_series(root)
    n = len(list(small.iterdir()))
    group = f"per-series overhead: {n} series of 16 slices of 64x64, 2 workers (s per series)"
    out.append(Result("dcm2niix", _dcm2niix(small, root / "d2n-small") / n, "s", higher_is_better=False,
                      baseline=True, group=group))
    out.append(Result("labzarr, default layout", _labzarr(small, root, 2, DEFAULT_STORE, repeat=3).wall / n, "s",
                      higher_is_better=False, group=group))
    out.extend(bench_functional_groups(root))
    for p in root.glob("store-*"):
        shutil.rmtree(p, ignore_errors=True)
    return out
