"""A volume larger than a worker's memory bound converts in bounded memory and equals its source voxel for voxel,
whatever the chunk and shard shapes (the writer holds one slab, never a whole shard's encoding)."""

from __future__ import annotations

from pathlib import Path

import dask
import nibabel as nib
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster
from isal import isal_zlib

from labzarr.convert.demo import write_spec
from labzarr.convert.run.cluster import local_cluster_config
from labzarr.convert.run.driver import execute
from labzarr.convert.run.worker_start import WORKER_MALLOC
from labzarr.convert.spec import load_spec

SHAPE = (600, 520, 1000)  # int16: 624 MB uncompressed, far more than the bound below
BOUND = 256 << 20  # a worker's peak RSS above its baseline (after imports), whatever the volume's size
AFFINE = np.diag([-0.8, -0.8, -1.0, 1.0])  # every axis flipped: canonical z runs against the file's z
DEMO_STORE = "chunks = [32, 32, 32]\nshards = [256, 256, 128]\n"  # what write_spec writes: the default layout
# The [store] lines put in place of DEMO_STORE, and the shards the planner then gives this volume. 64^3 chunks get
# their default shards (512 x 512 x 256), thinned along z to the slab budget: each 96 MiB shard is most of a slab.
LAYOUTS = {
    "default": (DEMO_STORE, (1, 256, 256, 128)),
    "chunks-64": ("chunks = [64, 64, 64]\n", (1, 512, 512, 192)),
}


def _voxels(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The volume in on-disk coordinates: closed form (int16 arithmetic wraps), so any block can be checked."""
    return x.astype(np.int16) * 7 + y.astype(np.int16) * 13 + z.astype(np.int16) * 29


def _write(path: Path) -> None:
    X, Y, Z = SHAPE
    hdr = nib.Nifti1Image(np.zeros((1, 1, 1), np.int16), AFFINE).header.copy()
    hdr.set_data_shape(SHAPE)
    hdr["vox_offset"] = 352
    comp = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)  # ISA-L: writes the 624 MB in a few seconds
    x, y, z = np.ogrid[:X, :Y, :50]
    with path.open("wb") as f:
        f.write(comp.compress(bytes(hdr.binaryblock) + b"\x00" * 4))
        for z0 in range(0, Z, 50):
            f.write(comp.compress(_voxels(x, y, z + z0).tobytes(order="F")))
        f.write(comp.flush())


def _rss(kind: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(kind + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"{kind} missing from /proc/self/status")


def _reset_peak() -> int:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    return _rss("VmRSS")


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The big volume's delivery folder, written once for every layout."""
    folder = tmp_path_factory.mktemp("raw")
    _write(folder / "case_001.nii.gz")
    return folder


# The default layout (more, smaller chunks) takes twice as long to encode and holds less per slab: `make stress`.
@pytest.mark.parametrize(("store_lines", "shards"), [
    pytest.param(*LAYOUTS["default"], id="default", marks=pytest.mark.slow),
    pytest.param(*LAYOUTS["chunks-64"], id="chunks-64"),
])
def test_large_volume_converts_in_bounded_worker_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: Path,
                                                        store_lines: str, shards: tuple[int, ...]) -> None:
    store = tmp_path / "big.zarr"
    path = write_spec(tmp_path / "manifests" / "big" / "delivery.toml", raw=raw, store=store, name="big", labels=False)
    text = path.read_text()
    assert text.count(DEMO_STORE) == 1
    path.write_text(text.replace(DEMO_STORE, store_lines))
    spec = load_spec(path, root=tmp_path)
    # The worker starts as `labzarr convert` starts it (its malloc thresholds); a nanny started earlier in this
    # process left dask's own values in os.environ, which would take precedence over the config.
    for name in WORKER_MALLOC:
        monkeypatch.delenv(name, raising=False)
    with dask.config.set(local_cluster_config(crash_retries=1)), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                         memory_limit=0) as cluster, Client(cluster) as client:
        assert client.run(lambda: __import__("os").environ.get("MALLOC_MMAP_THRESHOLD_")).popitem()[1] == str(
            WORKER_MALLOC["MALLOC_MMAP_THRESHOLD_"])
        # The baseline includes the imports, the statistics' compiled counting loop among them (a worker loads it
        # at its first large slab: a fixed cost, whatever the volume's size).
        client.run(lambda: __import__("labzarr.convert.run.volume_task"))
        client.run(lambda: __import__("labzarr.convert._counting", fromlist=["_compiled"])._compiled())
        (baseline,) = client.run(_reset_peak).values()
        result = execute(spec, client)
        (peak,) = client.run(_rss, "VmHWM").values()
    (row,) = result.rows
    assert row.status == "ok", row.detail
    nbytes = int(np.prod(SHAPE)) * 2
    print(f"worker peak {(peak - baseline) / (1 << 20):.0f} MiB above its baseline")
    assert peak - baseline < BOUND < nbytes, f"worker peak {peak:,} B, baseline {baseline:,} B"
    arr = zarr.open_array(store, path=row.array, mode="r")
    assert arr.shape == (1, *SHAPE) and arr.dtype == np.int16 and arr.attrs["complete"] == row.sha256
    assert arr.shards == shards
    X, Y, Z = SHAPE
    x, y = np.ogrid[:X, :Y]
    for z0 in range(0, Z, 100):  # canonical (x, y, z) = on-disk (X-1-x, Y-1-y, Z-1-z)
        z = np.arange(z0, min(Z, z0 + 100))
        want = _voxels(X - 1 - x[..., None], Y - 1 - y[..., None], (Z - 1 - z)[None, None, :])
        np.testing.assert_array_equal(arr[0, :, :, z0 : z0 + 100], want, err_msg=f"z {z0}")
