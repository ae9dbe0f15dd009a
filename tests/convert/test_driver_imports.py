"""The conversion driver imports only what it needs before its first task (convert/run/driver.py's docstring).

The driver walks, probes on the workers, plans and submits; the readers' format libraries (pydicom, nibabel,
Pillow) and the store's writer (zarr) are the workers' to import, or the driver's after the probe is submitted.
Each check runs in a fresh interpreter: this test process has imported all of them already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labzarr.convert.demo import write_spec

from ..dicom_data import ct_series, four_d

# What a driver need not import before its first task; each costs a start-up tens to hundreds of ms.
LAZY = ("pydicom", "nibabel", "zarr", "numcodecs", "PIL.Image", "turbojpeg", "openpyxl", "highdicom", "skimage")

_IMPORTED = """
import json, sys
lazy = {lazy!r}
import labzarr.convert.run.driver
driver = [m for m in lazy if m in sys.modules]
from labzarr.convert.run.worker_start import PRELOAD
for name in PRELOAD:
    __import__(name)
preloaded = set(sys.modules)
from labzarr.readers import READERS
readers = sorted(type(r).__module__ for r in READERS)
print(json.dumps([driver, [m for m in lazy if m in preloaded], [m for m in readers if m not in preloaded]]))
"""


def test_importing_the_driver_imports_no_reader_or_store_library() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORTED.format(lazy=LAZY)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    driver, workers, readers_not_preloaded = json.loads(done.stdout)
    assert driver == []
    # The worker server's preload (`worker_start.PRELOAD`) still imports what a worker's tasks need: every built-in
    # reader and the libraries they decode with.
    assert {"pydicom", "nibabel", "zarr", "numcodecs", "PIL.Image", "turbojpeg"} <= set(workers), workers
    assert readers_not_preloaded == []


_FIRST_TASK = """
import json, sys
import distributed
lazy = {lazy!r}
first = []
for name in ("map", "submit"):
    def wrapped(self, *args, _call=getattr(distributed.Client, name), **kwargs):
        if not first:
            first.append([m for m in lazy if m in sys.modules])
        return _call(self, *args, **kwargs)
    setattr(distributed.Client, name, wrapped)
from labzarr.convert.run.driver import convert_delivery
if __name__ == "__main__":
    result = convert_delivery({spec!r}, scheduler={scheduler!r})
    end = [m for m in lazy if m in sys.modules]
    print(json.dumps([first[0], end, sorted({{r.status for r in result.rows if r.kind == "dicom"}})]))
"""


def test_a_run_submits_its_first_task_before_importing_them(tmp_path: Path, scheduler: str) -> None:
    raw = tmp_path / "raw"
    ct_series(raw / "case_001", "case1")
    four_d(raw / "case_002", volumes=2)
    spec = write_spec(tmp_path / "manifests" / "dicom" / "delivery.toml", raw=raw, store=tmp_path / "dicom.zarr",
                      name="dicom", labels=False)
    script = _FIRST_TASK.format(lazy=LAZY, spec=str(spec), scheduler=scheduler)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    at_first_task, at_end, statuses = json.loads(done.stdout.strip().splitlines()[-1])
    assert at_first_task == []
    # The driver writes the store's index and tables with zarr after the tasks; it never reads a DICOM file.
    assert "pydicom" not in at_end and "nibabel" not in at_end and "PIL.Image" not in at_end, at_end
    assert statuses == ["ok"]  # and the run converted its DICOM series all the same


_WITHOUT_CLUSTER = """
import json, sys
from labzarr.convert.run.driver import convert_delivery
if __name__ == "__main__":
    result = convert_delivery({spec!r}, in_process=True, workers={workers})
    print(json.dumps([sorted({{r.status for r in result.rows if r.kind == "dicom"}}),
                      [m for m in ("pydicom", "requests", "tqdm") if m in sys.modules]]))
"""


@pytest.mark.parametrize("workers", [1, 2], ids=["in-one-process", "in-forked-workers"])
def test_a_run_without_a_cluster_loads_pydicom_without_requests_or_tqdm(tmp_path: Path, workers: int) -> None:
    """pydicom imports `requests` and `tqdm` for downloading its own test files, which a run never asks for; a
    run without a cluster waits for its imports before its first task (`run/_lean_pydicom.py`). Nor does a run
    import tqdm to show progress that `--quiet` (no progress callback) does not show (`console.py`)."""
    raw = tmp_path / "raw"
    ct_series(raw / "case_001", "case1")
    spec = write_spec(tmp_path / "manifests" / "dicom" / "delivery.toml", raw=raw, store=tmp_path / "dicom.zarr",
                      name="dicom", labels=False)
    script = tmp_path / "run.py"
    script.write_text(_WITHOUT_CLUSTER.format(spec=str(spec), workers=workers))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    statuses, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert statuses == ["ok"]
    assert loaded == ["pydicom"]
