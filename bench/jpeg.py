"""JPEG decoding: images/s of PyTurboJPEG against Pillow on the same files, and labzarr's checked reader.

Input (generated once, cached under WORKDIR/jpeg/): 400 RGB tiles of 256x256 and
40 RGB images of 1024x1024, baseline JPEG, quality 90, 4:2:0, textured
(gradients, blobs and noise, so the entropy coder has work). Rows are images/s
in one process, median of 3 passes, with the compressed bytes already in
memory for the raw decoders (no disk): Pillow (`Image.open(...).convert("RGB")`,
the baseline), PyTurboJPEG's plain `decode`, and labzarr's `JpegReader.read`
from the file (marker walk, caps, EOI check, libjpeg warnings escalated, CHW copy).
The last row converts 2000 of the tiles end to end (probe, plan, decode, sharded
write, manifest) with `labzarr convert --workers 2`, cluster start included.
"""

from __future__ import annotations

import io
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from common import Result
from PIL import Image
from turbojpeg import TJPF_RGB, TJSAMP_420, TurboJPEG

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.readers import JpegReader, Limits, read_head

NAME = "JPEG decode: images/s, PyTurboJPEG vs Pillow on the same files (1 process; convert: 2 workers)"
SETS = {"256x256": (256, 400), "1024x1024": (1024, 40)}
CONVERT_TILES = 2000


def _image(side: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / side
    out = np.empty((side, side, 3))
    for c in range(3):
        out[..., c] = 120 + 80 * np.sin(6 * x * (c + 1) + rng.uniform(0, 6)) * np.cos(5 * y + rng.uniform(0, 6))
        for _ in range(8):
            cy, cx, r = rng.uniform(0, 1, 3)
            out[..., c] += 60 * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (0.01 + 0.02 * r))
    out += rng.normal(0, 6, out.shape)
    return out.clip(0, 255).astype(np.uint8)


def _files(workdir: Path, side: int, n: int) -> list[Path]:
    folder = workdir / "jpeg" / f"{side}x{side}"
    paths = [folder / f"img_{i:05d}.jpg" for i in range(n)]
    if all(p.exists() for p in paths):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    tj = TurboJPEG()
    for i, p in enumerate(paths):
        p.write_bytes(tj.encode(_image(side, i), quality=90, pixel_format=TJPF_RGB, jpeg_subsample=TJSAMP_420))
    return paths


def _rate(fn: Callable[[], object], n: int) -> float:
    passes = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        passes.append(time.perf_counter() - t)
    return n / statistics.median(passes)


def _decoders(paths: Sequence[Path]) -> tuple[float, float, float]:
    blobs = [p.read_bytes() for p in paths]
    tj = TurboJPEG()
    reader, limits = JpegReader(), Limits()

    def pillow() -> None:
        for b in blobs:
            with Image.open(io.BytesIO(b)) as im:
                np.asarray(im.convert("RGB"))

    def turbo() -> None:
        for b in blobs:
            tj.decode(b, pixel_format=TJPF_RGB)

    def labzarr() -> None:
        for p in paths:
            reader.read(p, limits, read_head(p))

    return _rate(pillow, len(blobs)), _rate(turbo, len(blobs)), _rate(labzarr, len(blobs))


def _convert(workdir: Path, tiles: Sequence[Path]) -> float:
    raw = workdir / "jpeg" / "delivery"
    if not raw.is_dir():
        raw.mkdir(parents=True)
        for i in range(CONVERT_TILES):
            shutil.copyfile(tiles[i % len(tiles)], raw / f"tile_{i:05d}.jpg")
            with (raw / f"tile_{i:05d}.jpg").open("ab") as f:
                f.write(i.to_bytes(4, "big"))  # bytes after EOI: a distinct file (no duplicate_content), same pixels
    store = workdir / "jpeg" / "tiles.zarr"
    spec = write_spec(workdir / "jpeg" / "manifests" / "delivery.toml", raw=raw, store=store, name="tiles",
                      labels=False)
    t = time.perf_counter()
    result = convert_delivery(spec, workers=2)
    elapsed = time.perf_counter() - t
    assert result.summary["counts"]["ok"] == CONVERT_TILES, result.summary["counts"]
    return CONVERT_TILES / elapsed


def run(workdir: Path) -> list[Result]:
    rows: list[Result] = []
    tiles: list[Path] = []
    for label, (side, n) in SETS.items():
        paths = _files(workdir, side, n)
        tiles = tiles or paths
        pillow, turbo, labzarr = _decoders(paths)
        unit = f"img/s@{side}"  # one unit per image size: the ratio column compares like with like only
        mp = side * side / 1e6
        rows += [
            Result(f"Pillow decode, {label} ({n} files)", pillow, unit, baseline=side == 256,
                   note=f"{pillow * mp:.0f} MP/s"),
            Result(f"PyTurboJPEG decode, {label}", turbo, unit,
                   note=f"{turbo * mp:.0f} MP/s; {turbo / pillow:.2f}x Pillow on these files"),
            Result(f"labzarr JpegReader.read (checked, from file), {label}", labzarr, unit,
                   note=f"{labzarr * mp:.0f} MP/s; {labzarr / turbo:.2f}x plain PyTurboJPEG"),
        ]
    rows.append(Result(f"labzarr convert, {CONVERT_TILES} tiles 256x256, 2 workers", _convert(workdir, tiles),
                       "img/s@256", note="end to end, cluster start included"))
    return rows
