"""Stores written by labzarr read the same through labzarr's reader, zarr-python and tensorstore: every array
of a volume delivery, a 2D delivery (stacks) and a segmentation delivery (image, mask, pyramid, locations).

tensorstore runs in a subprocess: its threads must not live in a test process that later forks DataLoader
workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.store import STATE, Folder, StoreReader

_TENSORSTORE = """
import json, sys
import numpy as np
import tensorstore as ts
root, out, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for i, name in enumerate(names):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{root}/{name}"}}
    np.save(f"{out}/{i}.npy", ts.open(spec, read=True).result().read().result())
"""


@pytest.fixture(params=["volumes", "images", "seg"])
def store(request: pytest.FixtureRequest) -> Path:
    fixture = {"volumes": "converted_demo", "images": "converted_images", "seg": "converted_seg"}[request.param]
    return request.getfixturevalue(fixture)[0].store


def test_zarr_python_and_tensorstore_read_every_array_as_labzarr_does(store: Path, tmp_path: Path) -> None:
    names = [name for name, _ in Folder(store).array_nodes(skip=STATE)]
    assert len(names) >= 3
    subprocess.run([sys.executable, "-c", _TENSORSTORE, str(store), str(tmp_path), json.dumps(names)], check=True,
                   timeout=120)
    ours = StoreReader(store, backend="labzarr")
    for i, name in enumerate(names):
        want = ours.read(name)
        assert ours.path_used(name) == "labzarr"
        np.testing.assert_array_equal(zarr.open_array(zarr.storage.LocalStore(store), path=name, mode="r")[...],
                                      want, err_msg=f"zarr-python: {name}")
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), want, err_msg=f"tensorstore: {name}")
