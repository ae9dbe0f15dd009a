"""Deliveries of many tiny files, as issue 36 measured them: unique 64x64 greyscale JPEGs in folders of 1,000.

Shared by the scale tests (tests/convert/test_scale_cluster.py) and `make bench`'s scale section.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["PER_FOLDER", "SIDE", "tiny_jpegs"]

PER_FOLDER = 1000
SIDE = 64


def tiny_jpegs(raw: Path, n: int, *, seed: int = 0) -> Path:
    """Write `n` unique `SIDE`x`SIDE` greyscale JPEGs under `raw` (`000/img_000000.jpg`, ...); files already there
    from an earlier call with the same seed are kept (generation is deterministic). Returns `raw`."""
    for i in range(n):
        path = raw / f"{i // PER_FOLDER:03d}" / f"img_{i:06d}.jpg"
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        # Noise of its own for every image: a few changed pixels can quantize away, leaving equal files.
        pixels = np.random.default_rng([seed, i]).integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels, mode="L").save(buf, format="JPEG", quality=90)
        path.write_bytes(buf.getvalue())
    return raw
