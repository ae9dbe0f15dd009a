"""Per-process array handles: opened lazily, cached in a bounded LRU, never carried across a fork or a pickle.

Two read paths read the same zarr v3 store. zarr-python is fork-safe (it resets
its event loop in a forked child). tensorstore decodes a random 64³ patch about
five times faster (bench/loaders.py), but once its threads have run in a
process, any process forked from it aborts on its first tensorstore call. So
`auto` reads through tensorstore except in two kinds of process: one forked
after tensorstore ran in an ancestor (it could not), and one that may still
fork DataLoader workers (start method fork, the Linux default before Python
3.14), where reading through tensorstore would doom those workers.

A store at a URL is read through zarr's `FsspecStore`, or through tensorstore's
own `s3` (`gcs`) kvstore, given the endpoint and region botocore resolves (from
`storage_options` or the standard environment); tensorstore takes credentials
from the standard AWS environment and files, not from `storage_options`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import tensorstore as ts
import zarr
import zarr.storage
from torch.utils.data import get_worker_info

from .store import open_zarr_store, store_location

__all__ = ["Backend", "ForkAfterTensorstoreError", "Handles", "ReadOptions"]

log = logging.getLogger(__name__)

Backend = Literal["auto", "zarr", "tensorstore"]
_BACKENDS: tuple[Backend, ...] = ("auto", "zarr", "tensorstore")


class ForkAfterTensorstoreError(RuntimeError):
    """backend="tensorstore" in a process forked after tensorstore ran in its parent (it would abort)."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How a process reads the store.

    `backend`: "auto" (tensorstore, except zarr-python in a process that may fork workers), "zarr" or
    "tensorstore".
    `cache_bytes`: tensorstore's cache of decoded chunks, per process. Off by default: random patches
    rarely revisit a chunk, and the cache held several times its nominal size (bench/loaders.py); it
    helps overlapping grid tiles a little.
    `max_open`: array handles kept open per process (least recently used closed first).
    `threads`: tensorstore decode threads per process; default one in a DataLoader worker (the workers
    already run in parallel), else one per CPU core up to 4 (`num_workers=0`: the main process decodes).
    `storage_options`: for a store at a URL, options for its fsspec filesystem (e.g. ``endpoint_url``).
    """

    backend: Backend = "auto"
    cache_bytes: int = 0
    max_open: int = 64
    threads: int | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend = {self.backend!r}; expected one of {', '.join(map(repr, _BACKENDS))}")
        if self.cache_bytes < 0 or self.max_open < 1 or (self.threads is not None and self.threads < 1):
            raise ValueError(f"ReadOptions(cache_bytes={self.cache_bytes}, max_open={self.max_open}, "
                             f"threads={self.threads}): expected cache_bytes >= 0, max_open >= 1, threads >= 1")

    def resolve(self) -> Literal["zarr", "tensorstore"]:
        """The backend this process uses; raises ForkAfterTensorstoreError for a tensorstore it cannot use."""
        forked_after = _tensorstore_ran_in not in (None, os.getpid())
        if self.backend == "tensorstore" and forked_after:
            raise ForkAfterTensorstoreError(
                f"tensorstore ran in process {_tensorstore_ran_in} before it forked process {os.getpid()}, and "
                "tensorstore aborts a forked child. Start DataLoader workers with multiprocessing_context="
                "'forkserver' or 'spawn', or use ReadOptions(backend='auto'), which reads through zarr-python "
                "in a process that may fork")
        if self.backend != "auto":
            return self.backend
        if forked_after:
            log.warning("pid %d: forked after tensorstore ran in pid %s, so reading through zarr-python, several "
                        "times slower; start DataLoader workers with multiprocessing_context='forkserver' to read "
                        "through tensorstore", os.getpid(), _tensorstore_ran_in)
            return "zarr"
        if get_worker_info() is not None:
            return "tensorstore"
        # Not get_start_method() without allow_none: asking that way would fix the start method for good.
        method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
        return "zarr" if method == "fork" else "tensorstore"


def _default_threads() -> int:
    return 1 if get_worker_info() is not None else max(1, min(4, os.cpu_count() or 1))


# The pid of the process in which this module first started tensorstore, or None. A fact about the process
# (tensorstore's thread pool is process-wide) that a fork inherits exactly as it inherits tensorstore's state,
# so it is module state on purpose; nothing else here is.
_tensorstore_ran_in: int | None = None


def _starting_tensorstore() -> None:
    global _tensorstore_ran_in
    if _tensorstore_ran_in != os.getpid():
        _tensorstore_ran_in = os.getpid()


Selection = tuple[int | slice, ...]


class Handles:
    """The arrays of one store open in this process; `read(name, selection)` returns a numpy array."""

    def __init__(self, store: Path | str, options: ReadOptions) -> None:
        self.store, self.options = store_location(store), options
        self._pid = os.getpid()
        self._backend = options.resolve()
        if isinstance(self.store, str) and _protocol(self.store) not in _TENSORSTORE_KVSTORES:
            if options.backend == "tensorstore":
                raise ValueError(f"{self.store}: tensorstore reads s3:// and gs:// URLs, not "
                                 f"{_protocol(self.store)}://; use ReadOptions(backend='zarr')")
            self._backend = "zarr"
        self._url_base: dict[str, Any] | None = None
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._zarr_store: zarr.storage.StoreLike | None = None
        self._context: ts.Context | None = None

    @property
    def backend(self) -> Literal["zarr", "tensorstore"]:
        return self._backend

    def current(self) -> bool:
        """True in the process that opened these handles; False in a child that must open its own."""
        return self._pid == os.getpid()

    def read(self, name: str, selection: Selection) -> npt.NDArray[Any]:
        """The voxels at `selection` of array `name`, as a new numpy array."""
        return self.read_many([(name, selection)])[0]

    def read_many(self, requests: Sequence[tuple[str, Selection]]) -> list[npt.NDArray[Any]]:
        """Several reads at once: tensorstore overlaps their file reads and decoding (why a DataLoader batch
        goes through `__getitems__`); zarr-python reads them in turn."""
        arrays = [self._array(name) for name, _ in requests]
        if self._backend == "tensorstore":
            futures = [arr[selection].read() for arr, (_, selection) in zip(arrays, requests)]
            return [np.asarray(f.result()) for f in futures]
        return [np.asarray(arr[selection]) for arr, (_, selection) in zip(arrays, requests)]

    def _array(self, name: str) -> Any:
        if name in self._open:
            self._open.move_to_end(name)
            return self._open[name]
        arr = self._open_tensorstore(name) if self._backend == "tensorstore" else self._open_zarr(name)
        self._open[name] = arr
        if len(self._open) > self.options.max_open:
            self._open.popitem(last=False)
        return arr

    def _open_zarr(self, name: str) -> zarr.Array[Any]:
        if self._zarr_store is None:  # one store object (one zip file handle) per process
            self._zarr_store = open_zarr_store(self.store, self.options.storage_options)
        arr = zarr.open_array(self._zarr_store, path=name, mode="r", zarr_format=3)
        assert isinstance(arr, zarr.Array)
        return arr

    def _open_tensorstore(self, name: str) -> ts.TensorStore:
        if self._context is None:  # one decoded-chunk cache per process, shared by its arrays
            _starting_tensorstore()
            self._context = ts.Context({
                "cache_pool": {"total_bytes_limit": self.options.cache_bytes},
                "data_copy_concurrency": {"limit": self.options.threads or _default_threads()},
            })
        kvstore: dict[str, Any]
        if isinstance(self.store, str):
            kvstore = self._url_kvstore(name)
        elif self.store.is_file():
            kvstore = {"driver": "zip", "base": {"driver": "file", "path": str(self.store.resolve())},
                                       "path": f"{name}/"}
        else:
            kvstore = {"driver": "file", "path": str((self.store / name).resolve())}
        spec = {"driver": "zarr3", "kvstore": kvstore,
                # A store is immutable once converted: check its metadata and chunks once per open, not per read.
                "recheck_cached_metadata": "open", "recheck_cached_data": "open"}
        return ts.open(spec, read=True, context=self._context).result()

    def _url_kvstore(self, name: str) -> dict[str, Any]:
        assert isinstance(self.store, str)
        if self._url_base is None:
            self._url_base = _kvstore_base(self.store, self.options.storage_options)
        base = self._url_base
        return {**base, "path": f"{base['path']}{name}/"}


_TENSORSTORE_KVSTORES = {"s3": "s3", "gs": "gcs", "gcs": "gcs"}


def _protocol(url: str) -> str:
    return url.partition("://")[0]


def _kvstore_base(url: str, storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """tensorstore's kvstore for the store at `url` (its `path` ends in `/`)."""
    import fsspec  # only URL stores need it

    protocol, _, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    base: dict[str, Any] = {"driver": _TENSORSTORE_KVSTORES[protocol], "bucket": bucket,
                            "path": f"{prefix.strip('/')}/" if prefix.strip("/") else ""}
    if protocol == "s3":
        # botocore resolves endpoint and region from storage_options, AWS_ENDPOINT_URL, ~/.aws/config...;
        # tensorstore does not read AWS_ENDPOINT_URL, so it is told what botocore found.
        fs = fsspec.filesystem("s3", **storage_options)
        fs.connect()
        meta = fs.s3.meta
        base |= {"endpoint": meta.endpoint_url, "aws_region": meta.region_name or "us-east-1"}
    return base
