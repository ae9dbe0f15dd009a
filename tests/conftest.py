"""Shared fixtures: messy deliveries generated in tmp_path from the packages' real test files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from labzarr.convert import RunResult, convert_delivery
from labzarr.convert.demo import write_demo, write_spec

# The files that take longest, longest first (measured with `--durations`). `make test` hands whole files to its
# processes in collection order (`--dist loadfile --no-loadscope-reorder`): a long file collected late would run
# alone at the end while the other process idles.
LONGEST_FIRST = (
    "tests/convert/test_objstore.py",
    "tests/test_docs.py",
    "tests/test_walkthrough.py",
    "tests/convert/test_scale_cluster.py",
    "tests/convert/test_memory.py",
    "tests/loaders/test_resume.py",
    "tests/convert/test_resume.py",
    "tests/loaders/test_augment.py",
    "tests/convert/test_quiet_dicom.py",
    "tests/test_walkthrough_second.py",
    "tests/loaders/test_damage.py",
    "tests/convert/test_cluster.py",
    "tests/convert/test_kill.py",
    "tests/test_packaging.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run LONGEST_FIRST's files first, in its order; every other file keeps its place after them."""
    root = Path(__file__).resolve().parents[1]
    if missing := [path for path in LONGEST_FIRST if not (root / path).is_file()]:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names files that are gone: {missing}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@dataclass(frozen=True)
class Delivery:
    raw: Path
    spec: Path
    store: Path


def make_delivery(root: Path, name: str = "demo", extra: str = "") -> Delivery:
    raw = write_demo(root / "raw" / name)
    store = root / "stores" / f"{name}.zarr"
    spec = write_spec(root / "manifests" / name / "delivery.toml", raw=raw, store=store, name=name, extra=extra)
    return Delivery(raw=raw, spec=spec, store=store)


@pytest.fixture(scope="session")
def converted_demo(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> Iterator[tuple[Delivery, RunResult]]:
    """The demo delivery converted once with 2 workers; read-only for the tests that share it."""
    d = make_delivery(tmp_path_factory.mktemp("demo"))
    yield d, convert_delivery(d.spec, scheduler=scheduler)


@pytest.fixture(scope="session")
def converted_images(tmp_path_factory: pytest.TempPathFactory,
                     scheduler: str) -> Iterator[tuple[Delivery, RunResult, dict[str, tuple[str, str]]]]:
    """A messy 2D delivery (tests/imaging.py) converted once with 2 workers, and each file's expected outcome."""
    from .imaging import write_image_delivery

    root = tmp_path_factory.mktemp("images")
    expected = write_image_delivery(root / "raw" / "images")
    store = root / "stores" / "images.zarr"
    spec = write_spec(root / "manifests" / "images" / "delivery.toml", raw=root / "raw" / "images", store=store,
                      name="images", labels=False)
    d = Delivery(raw=root / "raw" / "images", spec=spec, store=store)
    yield d, convert_delivery(d.spec, scheduler=scheduler), expected


@pytest.fixture(scope="session")
def converted_cohort(tmp_path_factory: pytest.TempPathFactory, scheduler: str) -> Path:
    """The cohort project of tests/cohort.py ([splits] by patient, stratified), converted once: its spec's path;
    the store is `data/stores/cohort.zarr` under the project. Read-only for the tests that share it."""
    from .cohort import project

    spec = project(tmp_path_factory.mktemp("cohort"))
    convert_delivery(spec, scheduler=scheduler)
    return spec


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[object]:
    """One 2-worker cluster, started as `labzarr convert` starts its own, for the whole session: conversions
    that are not about the embedded cluster run on it (`scheduler`), saving a cluster start each."""
    from labzarr.convert.run.cluster import local_cluster
    from labzarr.convert.spec import RunSpec

    with local_cluster(2, crash_retries=RunSpec().crash_retries) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def scheduler(dask_cluster) -> str:
    """The shared cluster's address: `convert_delivery(spec, scheduler=scheduler)`."""
    return str(dask_cluster.scheduler_address)


@pytest.fixture(scope="session")
def dask_client(dask_cluster) -> Iterator[object]:
    """A client of the shared cluster, for tests that run `execute` directly."""
    from distributed import Client

    with Client(dask_cluster) as client:
        yield client


def nib_load(path: Path):
    """nibabel's image for `path`, even where nibabel's extension check refuses it (gzipped `.nii`)."""
    import gzip

    import nibabel as nib

    blob = path.read_bytes()
    if blob[:2] == b"\x1f\x8b":
        blob = gzip.decompress(blob)
    return nib.Nifti2Image.from_bytes(blob) if blob[4:8] == b"n+2\x00" else nib.Nifti1Image.from_bytes(blob)


@pytest.fixture(scope="session")
def converted_seg(tmp_path_factory: pytest.TempPathFactory,
                  scheduler: str) -> Iterator[tuple[Delivery, RunResult, dict[str, tuple[str, str]]]]:
    """The segmentation delivery (tests/segmentation.py) converted once with 2 workers, and each outcome by item."""
    from .segmentation import SEG_MASKS, SEG_ROLES, write_seg_delivery

    root = tmp_path_factory.mktemp("seg")
    d = seg_delivery(root, SEG_ROLES + "\n" + SEG_MASKS)
    expected = write_seg_delivery(d.raw)
    yield d, convert_delivery(d.spec, scheduler=scheduler), expected


def seg_delivery(root: Path, spec_tail: str, name: str = "seg") -> Delivery:
    """An empty raw folder and a spec (`[delivery]` + `spec_tail`) for a segmentation delivery under `root`."""
    raw, store = root / "raw" / name, root / "stores" / f"{name}.zarr"
    raw.mkdir(parents=True, exist_ok=True)
    spec = root / "manifests" / name / "delivery.toml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(f'[delivery]\nname = "{name}"\nraw = "{raw}"\nstore = "{store}"\n\n{spec_tail}')
    return Delivery(raw=raw, spec=spec, store=store)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A moto S3 server (own process, 127.0.0.1) with bucket `labzarr`; the standard AWS variables point at it."""
    from .s3 import environment, moto_server

    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server, environment(server.env()):
        server.make_bucket("labzarr")
        yield server


@pytest.fixture
def s3_scheduler(s3: object, scheduler: str, dask_client) -> Iterator[str]:
    """The shared cluster's address, its workers given the AWS variables of `s3` for the test (and their own
    values back after it): an s3 conversion that is not about the embedded cluster runs there, saving the
    cluster start. A conversion whose point is that credentials come from the spec needs workers without them."""
    from .s3 import S3Server

    assert isinstance(s3, S3Server)

    def swap(values: dict[str, str | None]) -> dict[str, str | None]:
        import os

        before = {k: os.environ.get(k) for k in values}
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return before

    before = dask_client.run(swap, dict(s3.env()))
    assert before, "the shared cluster has workers"
    try:
        yield scheduler
    finally:
        alive = set(dask_client.scheduler_info()["workers"])  # a worker restarted since has the cluster's values
        for worker, values in before.items():
            if worker in alive:
                dask_client.run(swap, values, workers=[worker])


@pytest.fixture(scope="session")
def converted_s3(s3: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Delivery, RunResult, str]]:
    """The demo delivery converted with 2 workers into s3://labzarr/demo.zarr (read-only for the tests)."""
    root = tmp_path_factory.mktemp("demo-s3")
    url = "s3://labzarr/demo.zarr"
    raw = write_demo(root / "raw" / "demo")
    spec = write_spec(root / "manifests" / "demo" / "delivery.toml", raw=raw, store=url, name="demo")
    d = Delivery(raw=raw, spec=spec, store=root / "unused")
    yield d, convert_delivery(d.spec, workers=2), url
