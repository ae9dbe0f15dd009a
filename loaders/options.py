"""How a process reads the store: the read options a `PatchDataset` hands to its per-process `StoreReader`.

Every process (the main one, and fork, spawn or forkserver workers) reads
through `labzarr.store`'s reader, which holds nothing a fork could break: no
threads, no event loop, file descriptors reopened under a new pid. The thread
pool that decodes a batch's chunks (`threads`) belongs to the dataset and is
created on first use in each process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labzarr.store import StoreReader
from labzarr.store.read import Backend

__all__ = ["Backend", "ReadOptions"]

_BACKENDS: tuple[Backend, ...] = ("auto", "labzarr", "zarr")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How a process reads the store.

    `backend`: "auto" (labzarr's own reader for the layouts labzarr writes, zarr-python for any other),
    "labzarr" (refuse an array in another layout) or "zarr" (zarr-python for every array).
    `max_open`: array handles kept open per process (least recently used closed first).
    `storage_options`: for a store at a URL, options for its fsspec filesystem (e.g. ``endpoint_url``).
    `threads`: threads decoding a batch's chunks in each process (``__getitems__``, which a DataLoader calls
    with each batch's keys); with 1, one thread of the pool decodes while the calling thread waits (numcodecs
    decodes blosc with blosc's own threads in a main thread). A store in a local folder, in labzarr's default
    layout, is read by compiled code holding no GIL (each thread one call a batch), so the threads scale with
    the cores; a zip or URL store, or another codec chain, by Python between GIL-free calls. Default (None):
    the cores this process may use (``os.sched_getaffinity``), shared out among a DataLoader's workers.
    """

    backend: Backend = "auto"
    max_open: int = 64
    storage_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend = {self.backend!r}; expected one of {', '.join(map(repr, _BACKENDS))}")
        if self.max_open < 1:
            raise ValueError(f"ReadOptions(max_open={self.max_open}): expected max_open >= 1")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"ReadOptions(threads={self.threads!r}): expected an int >= 1, or None for the cores "
                             "this process may use")

    def reader(self, store: Path | str, *, slots: Mapping[str, Mapping[int, str]] | None = None) -> StoreReader:
        """A reader of `store` with these options (it opens nothing until the first read); `slots`: the item IDs
        of each stack by slot, which its errors name."""
        return StoreReader(store, storage_options=self.storage_options, backend=self.backend,
                           max_open=self.max_open, slots=slots)
