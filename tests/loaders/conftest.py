"""Stores for the training-side tests, all made by the converter from the demo delivery.

The demo's workbook gives every ok item a `cell_type` (4 neuron, 3 astrocyte, 3 microglia, 1
oligodendrocyte: unbalanced, as labels are). For the tests that need a nearly balanced label, `side`
(5 left, 6 right) is added to the store's index through the converter's own index writer, and
`balanced_store` keeps the ten NIfTI items only (5 left, 5 right).
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr import open_store
from labzarr.convert.demo import EXPECTED_LABELS
from labzarr.convert.write.arrays import index_items, write_index
from labzarr.store import Folder

from ..conftest import nib_load
from ..dicom_data import canonical, dcm2niix

CELL_TYPES = EXPECTED_LABELS
SIDES = {"case1": "left", "case2": "right", "case3": "left", "case4": "right", "case5": "left", "case6": "right",
         "case7": "left", "case8": "right", "case9": "left", "case10": "right", "case21": "right"}


@pytest.fixture(scope="session")
def labeled_store(converted_demo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The converted demo store (labels joined from its workbook) plus the balanced `side` label."""
    d, result = converted_demo
    store = tmp_path_factory.mktemp("labeled") / "demo.zarr"
    shutil.copytree(d.store, store)
    assert all(dict(r.labels)["cell_type"] == CELL_TYPES[r.item_id] for r in result.rows if r.status == "ok")
    rows = [replace(r, labels=(*r.labels, ("side", SIDES[r.item_id]))) if r.status == "ok" else r for r in result.rows]
    write_index(Folder(store), replace(open_store(d.store).index, items=index_items(rows)))
    return store


@pytest.fixture(scope="session")
def balanced_store(converted_demo, labeled_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The labeled store's index without the DICOM item: `side` is exactly 5 left, 5 right."""
    _, result = converted_demo
    store = tmp_path_factory.mktemp("balanced") / "demo.zarr"
    shutil.copytree(labeled_store, store)
    rows = [replace(r, labels=(*r.labels, ("side", SIDES[r.item_id]))) for r in result.rows
            if r.status == "ok" and r.kind == "nifti"]
    write_index(Folder(store), replace(open_store(labeled_store).index, items=index_items(rows)))
    return store


def zip_store(folder: Path, dest: Path) -> Path:
    """Zip a store folder's contents (members relative to the store root, stored: chunks are compressed already)."""
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_STORED) as z:
        for base, _, files in sorted(os.walk(folder)):
            for name in sorted(files):
                path = Path(base) / name
                z.write(path, path.relative_to(folder).as_posix())
    return dest


@pytest.fixture(scope="session")
def zipped_store(labeled_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The labeled store as one zip file, named without a .zip suffix (stores are recognised by content)."""
    return zip_store(labeled_store, tmp_path_factory.mktemp("zipped") / "demo.zarr.bundle")


@pytest.fixture(scope="session")
def sources(converted_demo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """Each ok item's voxels decoded by nibabel from its source file (a DICOM series: from what dcm2niix writes
    for it), canonical RAS, channels first."""
    d, _ = converted_demo
    out = {}
    for item in open_store(d.store).items:
        if " (series " in item.source:
            (nii,) = dcm2niix(d.raw / item.source.split(" (series ")[0], tmp_path_factory.mktemp("dcm2niix"))
            out[item.item_id] = canonical(nii)[0].astype(np.float32)
            continue
        data = np.asanyarray(nib.as_closest_canonical(nib_load(d.raw / item.source)).dataobj)
        out[item.item_id] = np.moveaxis(data.reshape(data.shape[:3] + (-1,), order="F"), 3, 0)
    return out
