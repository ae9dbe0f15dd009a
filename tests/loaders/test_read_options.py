"""The read path a PatchDataset uses in every process: labzarr's own reader, zarr-python only where asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import get_worker_info

from labzarr import PatchDataset
from labzarr.loaders import ReadOptions


def _read_path_in_worker(batch: list) -> str:
    info = get_worker_info()
    assert info is not None
    ds = info.dataset
    return ds.read_path(ds.items[0])


# In a fresh interpreter: the parent reads a sample (as a notebook peeking at ds[0] does), then forks a worker.
FRESH_PARENT = """
import multiprocessing, sys
multiprocessing.set_start_method("fork")  # as on Linux before Python 3.14
from torch.utils.data import DataLoader
from labzarr import PatchDataset
from tests.loaders.test_read_options import _read_path_in_worker
ds = PatchDataset(sys.argv[1], (4, 4, 4))
ds[0]
loader = DataLoader(ds, batch_size=2, num_workers=1, collate_fn=_read_path_in_worker)
print(ds.read_path(ds.items[0]), next(iter(loader)), "zarr" in sys.modules)
"""


@pytest.mark.timeout(120)
def test_a_forking_parent_and_its_workers_both_read_through_labzarr(labeled_store: Path) -> None:
    """...and neither imports zarr-python: every forked worker's RSS counts the parent's imported modules again
    (zarr's are about 9 MB), so a process that reads only labzarr's layouts does without them."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", FRESH_PARENT, str(labeled_store)], capture_output=True, text=True,
                         timeout=110, cwd=root, check=True)
    assert out.stdout.split() == ["labzarr", "labzarr", "False"]


def test_zarr_python_backend_gives_the_same_samples(labeled_store: Path) -> None:
    ours = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=3, seed=5)
    theirs = PatchDataset(labeled_store, (8, 8, 8), patches_per_item=3, seed=5, read=ReadOptions(backend="zarr"))
    assert {ours.read_path(i) for i in ours.items} == {"labzarr"}
    assert {theirs.read_path(i) for i in theirs.items} == {"zarr"}
    for k in range(len(ours)):
        a, b = ours[k], theirs[k]
        assert a["origin"] == b["origin"] and a["image"].dtype == b["image"].dtype
        assert torch.equal(a["image"], b["image"]), k


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"backend": "tensorstore"}, "backend = 'tensorstore'"),
    ({"backend": "h5py"}, "backend = 'h5py'"),
    ({"max_open": 0}, "max_open >= 1"),
])
def test_bad_read_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReadOptions(**kwargs)
