"""The compressors a store can be written with, and their levels: the vocabulary the spec checks against.

Kept apart from the codecs themselves (`codecs.py`), so the spec and the planner know the names without
loading zarr or numcodecs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

__all__ = ["COMPRESSORS", "LEVELS", "Compressor"]

Compressor = Literal["zstd", "blosc-zstd", "blosc-lz4", "none"]
COMPRESSORS: tuple[Compressor, ...] = ("zstd", "blosc-zstd", "blosc-lz4", "none")
LEVELS: Mapping[str, tuple[int, int]] = {"zstd": (1, 22), "blosc-zstd": (1, 9), "blosc-lz4": (1, 9), "none": (0, 0)}
