"""Helpers for corpus builders: unique synthetic volumes, NIfTI bytes, writing under raw."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import nibabel as nib
import numpy as np
from PIL import Image


def put(raw: Path, rel: str, data: bytes) -> str:
    """Write `data` at `raw/rel` (folders created) and return `rel`."""
    path = raw / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return rel


def volume(seed: int, shape: tuple[int, ...] = (24, 20, 12), dtype: type = np.int16) -> np.ndarray:
    """A small CT-like volume, different for every seed."""
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 300, shape) + seed).astype(dtype)


def nifti(data: np.ndarray, *, version: int = 1, affine: np.ndarray | None = None) -> bytes:
    """Uncompressed single-file NIfTI bytes."""
    cls = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    return bytes(cls(data, np.diag([0.8, 0.8, 2.0, 1.0]) if affine is None else affine).to_bytes())


def gz(data: bytes) -> bytes:
    """Deterministic gzip (mtime 0)."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def gzip_members_of_zeros(total: int, member: int = 64 << 20) -> bytes:
    """Concatenated gzip members inflating to `total` zero bytes: megabytes on disk, gigabytes inflated."""
    one = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = one.compress(b"\x00" * member) + one.flush()
    n, rest = divmod(total, member)
    tail = zlib.compressobj(9, zlib.DEFLATED, 31)
    return block * n + (tail.compress(b"\x00" * rest) + tail.flush() if rest else b"")


def canonical(path: Path) -> np.ndarray:
    """What the store must hold for a NIfTI file: nibabel's closest-canonical voxels, channels first."""
    blob = path.read_bytes()
    if blob[:2] == b"\x1f\x8b":
        blob = gzip.decompress(blob)
    img = nib.Nifti2Image.from_bytes(blob) if blob[4:8] == b"n+2\x00" else nib.Nifti1Image.from_bytes(blob)
    data = np.asanyarray(nib.as_closest_canonical(img).dataobj)
    data = data.reshape(data.shape[:3] + (1,) * (3 - min(3, data.ndim)) + (-1,), order="F")
    return np.moveaxis(data, 3, 0)


def jpeg(seed: int, shape: tuple[int, int, int] = (16, 16, 3), quality: int = 90) -> bytes:
    """A small RGB (or grey, with 1 channel) JPEG of noise, different for every seed."""
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels[..., 0] if shape[2] == 1 else pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
