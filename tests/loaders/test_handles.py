from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, get_worker_info

from labzarr import PatchDataset
from labzarr.loaders import ReadOptions


@pytest.mark.parametrize(("method", "backend"), [("fork", "zarr"), ("forkserver", "tensorstore"),
                                                 ("spawn", "tensorstore")])
def test_auto_avoids_tensorstore_only_where_workers_may_fork(monkeypatch: pytest.MonkeyPatch, method: str,
                                                             backend: str) -> None:
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: method)
    assert ReadOptions().resolve() == backend
    assert ReadOptions(backend="zarr").resolve() == "zarr"
    assert ReadOptions(backend="tensorstore").resolve() == "tensorstore"


def _backend_in_worker(batch: list) -> str:
    info = get_worker_info()
    assert info is not None
    return info.dataset.handles().backend


# In a fresh interpreter (this test process may have run tensorstore already): the parent reads a sample,
# then forks a DataLoader worker.
FRESH_PARENT = """
import multiprocessing, sys
multiprocessing.set_start_method("fork")  # as on Linux before Python 3.14
from torch.utils.data import DataLoader
from labzarr import PatchDataset
from tests.loaders.test_handles import _backend_in_worker
ds = PatchDataset(sys.argv[1], (4, 4, 4))
ds[0]
loader = DataLoader(ds, batch_size=2, num_workers=1, collate_fn=_backend_in_worker)
print(ds.handles().backend, next(iter(loader)))
"""


@pytest.mark.timeout(120)
def test_auto_reads_through_zarr_in_a_forking_parent_and_tensorstore_in_its_workers(labeled_store: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", FRESH_PARENT, str(labeled_store)], capture_output=True, text=True,
                         timeout=110, cwd=root, check=True)
    assert out.stdout.split() == ["zarr", "tensorstore"]


@pytest.mark.timeout(120)
def test_auto_in_a_child_forked_after_tensorstore_reads_through_zarr(labeled_store: Path) -> None:
    fast = PatchDataset(labeled_store, (4, 4, 4), read=ReadOptions(backend="tensorstore"))
    fast[0]  # tensorstore has now run in this process
    ds = PatchDataset(labeled_store, (4, 4, 4), seed=2)
    loader = DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context="fork", collate_fn=_backend_in_worker)
    assert next(iter(loader)) == "zarr"  # not an abort: auto avoids the tensorstore it cannot use


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"backend": "h5py"}, "backend = 'h5py'"),
    ({"max_open": 0}, "max_open >= 1"),
    ({"cache_bytes": -1}, "cache_bytes >= 0"),
    ({"threads": 0}, "threads >= 1"),
])
def test_bad_read_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReadOptions(**kwargs)
