"""A store at an s3:// URL (a real moto S3 server in its own process): the same result as a local folder.

Conversion on a LocalCluster and on an existing cluster, resume, the stacks' server-side carry,
verify, the lock object, and the usage errors of an unreachable or missing store.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
import zarr
from distributed import Client
from PIL import Image

from labzarr.convert import UsageError, convert_delivery, load_spec
from labzarr.convert.cli import main
from labzarr.convert.demo import write_demo, write_spec
from labzarr.convert.qc.verify import verify_store
from labzarr.convert.run.cluster import local_cluster
from labzarr.convert.spec import RunSpec
from labzarr.convert.write.lock import LockInfo, store_lock
from labzarr.loaders import open_store
from labzarr.store import UrlStore

from ..corpus._util import jpeg, put
from ..s3 import S3Server, environment, free_port
from .test_cluster import Cluster, cluster  # noqa: F401 - the fixture

BUCKET = "labzarr"


def _fs() -> fsspec.AbstractFileSystem:
    return fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)


def _url_root(url: str) -> zarr.Group:
    return zarr.open_group(zarr.storage.FsspecStore.from_url(url, read_only=True), mode="r")


def _arrays(root: zarr.Group) -> dict[str, zarr.Array]:
    """Every array under volumes/ and stacks/, samples' role arrays included."""
    out: dict[str, zarr.Array] = {}
    for group in ("volumes", "stacks"):
        if group in root:
            sub = root[group]
            assert isinstance(sub, zarr.Group)
            for name, node in sub.members(max_depth=None):
                if isinstance(node, zarr.Array):
                    out[f"{group}/{name}"] = node
    return out


def assert_same_store(local: Path, url: str) -> None:
    """Same index (but the spec's hash: the store path differs), same arrays, attrs and voxels."""
    a, b = zarr.open_group(local, mode="r"), _url_root(url)
    ia, ib = dict(a.attrs["labzarr"]), dict(b.attrs["labzarr"])  # type: ignore[arg-type]
    ia.pop("spec_sha256"), ib.pop("spec_sha256")
    assert ia == ib
    xa, xb = _arrays(a), _arrays(b)
    assert xa and sorted(xa) == sorted(xb)
    for name in xa:
        assert dict(xa[name].attrs) == dict(xb[name].attrs), name  # content_sha256, complete, row, labels ...
        if not name.endswith("/locations"):  # a sample's class locations are derived data, not sealed
            assert xa[name].attrs["content_sha256"] and xa[name].attrs["complete"]
        np.testing.assert_array_equal(xa[name][...], xb[name][...], err_msg=name)


def test_conversion_to_s3_equals_the_local_folder(converted_s3, converted_demo) -> None:
    d, result, url = converted_s3
    local, local_result = converted_demo
    assert result.manifest.read_bytes() == local_result.manifest.read_bytes()
    assert_same_store(local.store, url)
    keys = _fs().find(f"{BUCKET}/demo.zarr")
    assert not [k for k in keys if "/.labzarr/staging/" in k or k.endswith("/.labzarr/lock")]  # swept, released


def test_rerun_on_s3_converts_nothing(converted_s3, s3_scheduler: str) -> None:
    d, first, url = converted_s3
    again = convert_delivery(d.spec, scheduler=s3_scheduler)
    assert again.converted == 0 and again.unchanged == first.converted + first.unchanged > 0
    assert again.manifest.read_bytes() == first.manifest.read_bytes()


def test_segmentation_samples_to_s3_equal_the_local_folder(converted_seg, s3_scheduler: str) -> None:
    """Samples (image + mask groups, written in place with `complete` on the group last) and class locations."""
    local, local_result, _ = converted_seg
    url = f"s3://{BUCKET}/seg.zarr"
    text = local.spec.read_text()
    spec = local.spec.parent.parent / "seg-s3" / "delivery.toml"
    spec.parent.mkdir()
    spec.write_text(text.replace(f'store = "{local.store}"', f'store = "{url}"'))
    result = convert_delivery(spec, scheduler=s3_scheduler)
    assert result.manifest.read_bytes() == local_result.manifest.read_bytes()
    assert_same_store(local.store, url)
    assert any(name.endswith("/labels/mask/0") for name in _arrays(_url_root(url)))
    assert verify_store(UrlStore(url)).ok


def test_concurrent_starts_exactly_one_takes_the_lock_object(converted_s3, tmp_path: Path) -> None:
    """Four processes race for the lock of one store: the conditional PUT lets exactly one through, which
    holds it until the other three have been refused."""
    _, _, url = converted_s3
    stop = tmp_path / "stop"
    script = ("import os, sys, time\nfrom labzarr.convert.write.lock import store_lock\nfrom labzarr.store "
              "import UrlStore\nfrom labzarr.convert.errors import UsageError\ntry:\n"
              f"    with store_lock(UrlStore({url!r})):\n        print('held', flush=True)\n"
              f"        deadline = time.monotonic() + 120\n"
              f"        while not os.path.exists({str(stop)!r}) and time.monotonic() < deadline:\n"
              "            time.sleep(0.05)\nexcept UsageError as e:\n    print('refused', flush=True)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        deadline = time.monotonic() + 120
        while sum(p.poll() is not None for p in procs) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.touch()
    outs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outs == ["held", "refused", "refused", "refused"]
    assert not _fs().exists(f"{BUCKET}/demo.zarr/.labzarr/lock")


def test_verify_finds_a_deleted_and_a_corrupted_chunk_object(converted_s3, capsys) -> None:
    fs = _fs()
    fs.copy(f"{BUCKET}/demo.zarr", f"{BUCKET}/damaged.zarr", recursive=True)
    damaged = f"s3://{BUCKET}/damaged.zarr"
    chunks: dict[str, list[str]] = {}
    for key in sorted(fs.find(f"{BUCKET}/damaged.zarr/volumes")):
        array, _, rest = key.removeprefix(f"{BUCKET}/damaged.zarr/").partition("/c/")
        if rest:
            chunks.setdefault(array, []).append(key)
    deleted, corrupted = sorted(chunks)[:2]
    fs.rm_file(chunks[deleted][-1])
    blob = bytearray(fs.cat_file(chunks[corrupted][0]))
    blob[len(blob) // 2] ^= 0x10
    fs.pipe_file(chunks[corrupted][0], bytes(blob))
    # One pass over the damaged copy, through the CLI (each verify of a store on moto takes seconds); the
    # undamaged URL stores verify clean in the segmentation and stack tests below.
    assert main(["verify", damaged]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED: 2 item(s)" in out, out
    gone = chunks[deleted][-1].split(f"{deleted}/", 1)[1]
    assert f"chunk file {gone} missing" in out and corrupted in out, out


def test_inspect_and_report_read_the_url_store(converted_s3, capsys, tmp_path: Path) -> None:
    d, result, url = converted_s3
    ok = sum(r.status == "ok" for r in result.rows)
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert f"store:     {url}" in out and f"items:     {ok} ok" in out
    from labzarr.convert.qc.report import write_report

    report = write_report(d.spec, root=tmp_path, out=tmp_path / "report")
    assert report.ok == ok and report.thumbnails == ok  # every tile drawn from the URL store
    assert url in report.index.read_text()


def _lock_object(info: LockInfo) -> bytes:
    return json.dumps({"pid": info.pid, "host": info.host, "started": info.started, "run_id": info.run_id,
                       "process_started": info.process_started}).encode()


def test_second_run_is_refused_by_the_lock_object(converted_s3, capsys) -> None:
    d, _, url = converted_s3
    with store_lock(UrlStore(url)) as held:
        assert main(["convert", str(d.spec), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"in use by another labzarr run: pid {held.pid}" in err and err.count("\n") == 2
        with pytest.raises(UsageError, match="in use by another labzarr run"):
            with store_lock(UrlStore(url)):
                pass
    assert not _fs().exists(f"{BUCKET}/demo.zarr/.labzarr/lock")  # released


@pytest.mark.parametrize("host, taken_over", [(socket.gethostname(), True), ("elsewhere", False)],
                         ids=["dead-run-this-host", "run-on-another-host"])
def test_a_lock_left_behind(converted_s3, host: str, taken_over: bool, caplog) -> None:
    _, _, url = converted_s3
    dead = LockInfo(pid=2**22 + 7, host=host, started="2026-01-01T00:00:00+00:00", run_id="0" * 32,
                    process_started=1.0)
    _fs().pipe_file(f"{BUCKET}/demo.zarr/.labzarr/lock", _lock_object(dead))
    try:
        if taken_over:
            with caplog.at_level(logging.WARNING), store_lock(UrlStore(url)) as mine:
                assert mine.run_id != dead.run_id
            assert "taking over the lock" in caplog.text
        else:
            with pytest.raises(UsageError, match="elsewhere") as exc:
                with store_lock(UrlStore(url)):
                    pass
            assert f"delete {url}/.labzarr/lock" in exc.value.hint
    finally:
        if not taken_over:  # still there (a taken-over lock was released by its new holder): free it for the others
            _fs().rm_file(f"{BUCKET}/demo.zarr/.labzarr/lock")


@pytest.mark.parametrize("store, endpoint, message", [
    ("s3://no-such-bucket/demo.zarr", False, "bucket 'no-such-bucket' not found"),
    (f"s3://{BUCKET}/demo.zarr", True, "cannot reach the object store"),
], ids=["missing-bucket", "wrong-endpoint"])
def test_unreachable_store_is_one_usage_error(s3: S3Server, tmp_path: Path, capsys, store: str, endpoint: bool,
                                              message: str) -> None:
    raw = write_demo(tmp_path / "raw")
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=store)
    if endpoint:  # nothing listens there
        option = f'storage_options = {{ endpoint_url = "http://127.0.0.1:{free_port()}" }}'
        spec.write_text(spec.read_text().replace("[store]\n", f"[store]\n{option}\n"))
    assert main(["convert", str(spec), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("labzarr: error: ") and message in err, err
    assert err.count("\n") == 2 and "Traceback" not in err  # the error and its hint
    if not endpoint:
        assert main(["verify", store]) == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("store, table, message", [
    ("data/x.zarr", '[store]\nstorage_options = { anon = true }\n', "only a URL store takes storage options"),
    ("nosuchproto://b/x.zarr", "", "unknown protocol nosuchproto://"),
    ("s3://b/x.zarr", '[store]\nstorage_options = "anon"\n', "expected a table of fsspec options"),
], ids=["options-on-a-folder", "unknown-protocol", "options-not-a-table"])
def test_bad_url_store_spec(tmp_path: Path, store: str, table: str, message: str) -> None:
    (tmp_path / "raw").mkdir()
    spec = tmp_path / "delivery.toml"
    spec.write_text(f'[delivery]\nname = "x"\nraw = "raw"\nstore = "{store}"\n\n{table}')
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        load_spec(spec, root=tmp_path)


def test_stacks_on_s3_carry_shards_and_take_options_from_the_spec(s3: S3Server, tmp_path: Path, monkeypatch) -> None:
    """2D images (stacks staged under .labzarr/staging, installed by server-side copies), with the endpoint and
    credentials from `[store] storage_options` only; a changed image redoes its shard, the other is carried."""
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    raw = tmp_path / "raw"
    for i in range(1100):  # 16x16 RGB tiles: 1024 to a shard, so two shards (slots 0..1023 and 1024..1099)
        put(raw, f"tiles/tile_{i:05d}.jpg", jpeg(i))
    url = f"s3://{BUCKET}/tiles.zarr"
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=url, name="t", labels=False)
    options = f'storage_options = {{ endpoint_url = "{s3.endpoint}", key = "testing", secret = "testing" }}'
    spec.write_text(spec.read_text().replace("[store]\n", f"[store]\n{options}\n"))
    # Both runs on one cluster started here, after the variables are gone (the suite's shared one may have them):
    # one cluster start instead of two. Its workers fork from a server that may have started while the variables
    # were set (the nanny only adds variables): they drop them too, so that only the spec can give credentials.
    def without_aws() -> list[str]:
        for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            os.environ.pop(var, None)
        return [var for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if var in os.environ]

    with local_cluster(2, crash_retries=RunSpec().crash_retries) as own, Client(own) as client:
        left = client.run(without_aws)
        assert len(left) == 2 and not any(left.values()), left
        first = convert_delivery(spec, scheduler=own.scheduler_address)
        assert (first.converted, first.unchanged) == (1100, 0)
        with environment(s3.env()):
            shard0 = _fs().cat_file(f"{BUCKET}/tiles.zarr/stacks/3x16x16_uint8/c/0/0/0/0")
        last = next(r.source for r in first.rows if r.slot == 1099)
        put(raw, last, jpeg(5000))  # changed content, same size, in the second shard: only that shard is redone
        again = convert_delivery(spec, scheduler=own.scheduler_address)
    assert (again.converted, again.unchanged) == (76, 1024)
    with environment(s3.env()):
        assert _fs().cat_file(f"{BUCKET}/tiles.zarr/stacks/3x16x16_uint8/c/0/0/0/0") == shard0  # carried
        assert not _fs().find(f"{BUCKET}/tiles.zarr/.labzarr/staging")
        report = verify_store(UrlStore(url))
        assert report.ok, report.describe()
        view = open_store(url)
        item = next(i for i in view.items if i.source == last)
        want = np.asarray(Image.open(raw / item.source).convert("RGB")).transpose(2, 0, 1)
        assert np.abs(view.array(item)[item.slot].astype(int) - want.astype(int)).max() <= 2


def test_existing_cluster_writes_the_url_store(s3: S3Server, cluster: Cluster, converted_demo,  # noqa: F811
                                               tmp_path: Path) -> None:
    """`--scheduler` with `dask scheduler` + two `dask worker` processes (started with the AWS variables)."""
    local, local_result = converted_demo
    raw = write_demo(tmp_path / "raw" / "demo")
    url = f"s3://{BUCKET}/cluster.zarr"
    spec = write_spec(tmp_path / "manifests" / "demo" / "delivery.toml", raw=raw, store=url, name="demo")
    out = subprocess.run([sys.executable, "-m", "labzarr", "convert", str(spec), "--scheduler", cluster.address,
                          "--quiet"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert (spec.parent / "manifest.csv").read_bytes() == local_result.manifest.read_bytes()
    assert_same_store(local.store, url)
