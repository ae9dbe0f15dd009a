"""labzarr's reader against zarr-python: every layout, codec, dtype and kind labzarr writes, on a folder, a zip
and S3; what it fetches from S3; damage; the layouts it hands to zarr-python; fork, spawn and forkserver."""

from __future__ import annotations

import multiprocessing
import pickle
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.codecs
import zarr.storage

from labzarr.store.format.layout import Layout, UnsupportedLayout
from labzarr.store.location import FsspecTransport
from labzarr.store.read import ArrayReader, ChecksumError, StoreReader

DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64", "float32", "float64", "bool")
CODECS = ("none", "zstd", "blosc-lz4", "blosc-zstd")
NAME = "volumes/case-007/image"  # nested, as labzarr's arrays are


@dataclass(frozen=True)
class Case:
    """One array to write: its kind's shape and chunking, codecs, dtype, and how much of it is written."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    dtype: str = "int16"
    codec: str = "blosc-lz4"
    crc: bool = True
    written: str = "all"  # all | part (absent chunks and shards read as the fill value)
    fill: Any = 0
    endian: str = "little"
    index_location: str = "end"
    keys: tuple[str, str] = ("default", "/")
    empty_chunks: bool = True

    def codecs(self) -> tuple[Any, ...]:
        out: list[Any] = []
        if self.codec == "zstd":
            out.append(zarr.codecs.ZstdCodec(level=3))
        elif self.codec == "gzip":
            out.append(zarr.codecs.GzipCodec(level=3))
        elif self.codec.startswith("blosc-"):
            out.append(zarr.codecs.BloscCodec(cname=self.codec.removeprefix("blosc-"), clevel=5, shuffle="shuffle"))
        return (*out, zarr.codecs.Crc32cCodec()) if self.crc else tuple(out)


KINDS = {  # name: (shape, chunks, shards), with edge chunks and partly empty edge shards
    "volume": ((2, 37, 29, 21), (1, 16, 16, 8), (1, 32, 32, 16)),
    "role2d": ((3, 45, 38), (3, 16, 16), (3, 32, 32)),
    "stack": ((11, 3, 20, 17), (1, 3, 20, 17), (4, 3, 20, 17)),  # one image per chunk, four per shard
    "locations": ((53, 3), (16, 3), (32, 3)),
}


def kind(name: str, *, sharded: bool = True, **kw: Any) -> Case:
    shape, chunks, shards = KINDS[name]
    return Case(shape, chunks, shards if sharded else None, **kw)


def codec_name(codec: str, crc: bool) -> str:
    return codec + ("+crc" if crc else "")


def layout_cases() -> Iterator[Any]:
    """Every kind x sharded or not x codec (with and without crc32c); dtypes cycle so each meets several."""
    n = 0
    for k in KINDS:
        for sharded in (True, False):
            for codec in CODECS:
                for crc in (False, True):
                    dtype = DTYPES[n % len(DTYPES)]
                    n += 1
                    yield pytest.param(kind(k, sharded=sharded, codec=codec, crc=crc, dtype=dtype,
                                            written="part" if n % 3 == 0 else "all"),
                                       id=f"{k}-{'sharded' if sharded else 'chunked'}-{codec_name(codec, crc)}-{dtype}")


def dtype_cases() -> Iterator[Any]:
    """Every dtype through each blosc (its shuffle depends on the item size), and uncompressed."""
    for dtype in DTYPES:
        yield pytest.param(kind("volume", dtype=dtype), id=f"volume-blosc-lz4-{dtype}")
        yield pytest.param(kind("role2d", dtype=dtype, codec="blosc-zstd"), id=f"role2d-blosc-zstd-{dtype}")
        yield pytest.param(kind("stack", sharded=False, dtype=dtype, codec="none", crc=False),
                           id=f"stack-none-{dtype}")


SPECIAL = [
    pytest.param(kind("volume", endian="big", dtype="int32"), id="big-endian"),
    pytest.param(kind("volume", endian="big", sharded=False, dtype="float64", codec="zstd"), id="big-endian-chunked"),
    pytest.param(kind("volume", index_location="start", written="part"), id="index-at-start"),
    pytest.param(kind("stack", index_location="start", crc=False), id="index-at-start-stack"),
    pytest.param(kind("volume", keys=("v2", ".")), id="v2-keys-dot"),
    pytest.param(kind("volume", sharded=False, keys=("v2", "/")), id="v2-keys-slash-chunked"),
    pytest.param(kind("volume", keys=("default", ".")), id="default-keys-dot"),
    pytest.param(kind("volume", written="part", fill=-5), id="missing-shards-fill"),
    pytest.param(kind("volume", sharded=False, written="part", fill=9, dtype="uint16"), id="missing-chunks-fill"),
    pytest.param(kind("volume", written="part", fill=float("nan"), dtype="float32"), id="missing-nan-fill"),
    pytest.param(kind("role2d", written="part", fill=True, dtype="bool"), id="missing-bool-fill"),
    pytest.param(kind("volume", empty_chunks=False, written="zeros"), id="empty-chunks-not-written"),
    pytest.param(kind("volume", codec="gzip"), id="gzip"),
    pytest.param(Case((1, 1, 1, 1), (1, 8, 8, 8), (1, 16, 16, 16)), id="one-voxel"),
]


def values(case: Case, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(case.dtype)
    if dt.kind == "b":
        return rng.random(case.shape) > 0.5
    if dt.kind == "f":
        return rng.normal(0, 100, case.shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, case.shape, dtype=dt, endpoint=True)


def write(root: Path, case: Case, name: str = NAME, attrs: dict[str, Any] | None = None) -> zarr.Array[Any]:
    """Create `case` at `name` under the store folder `root` as labzarr does, and write its values."""
    serializer = zarr.codecs.BytesCodec(endian=case.endian if np.dtype(case.dtype).itemsize > 1 else None)
    shards: Any = case.shards
    if shards is not None and case.index_location == "start":
        shards = {"shape": case.shards, "index_location": "start"}
    z = zarr.create_array(
        zarr.storage.LocalStore(root), name=name, shape=case.shape, dtype=case.dtype, chunks=case.chunks,
        shards=shards, serializer=serializer, compressors=case.codecs(), fill_value=case.fill,
        chunk_key_encoding={"name": case.keys[0], "separator": case.keys[1]},
        dimension_names=None, attributes={"item_id": "case-007", **(attrs or {})},
        config={"write_empty_chunks": case.empty_chunks})
    data = values(case)
    if case.written == "all":
        z[...] = data
    elif case.written == "zeros":
        data[:, :16] = 0  # whole chunks of zeros: not stored without write_empty_chunks
        z[...] = data
    else:  # one box, leaving absent chunks inside written shards and whole shards absent
        box = tuple(slice(n // 4, max(n // 4 + 1, n // 2)) for n in case.shape)
        z[box] = data[box]
    return zarr.open_array(zarr.storage.LocalStore(root, read_only=True), path=name, mode="r")


def selections(case: Case, seed: int, n: int = 8) -> list[tuple[Any, ...]]:
    """Whole, empty, ints, partly outside and fewer-axes selections, drawn from `seed`."""
    shape = case.shape
    rng = np.random.default_rng(seed)
    out: list[tuple[Any, ...]] = [(), tuple(slice(None) for _ in shape), (-1,), (slice(shape[0], None),),
                                  tuple(slice(n - 3, n + 40) for n in shape)]
    if case.chunks[0] == 1 and len(shape) == 4 and case.chunks[1:] == shape[1:]:  # a stack: every slot
        out += [(slot, slice(None), ...) for slot in range(shape[0])]
    for _ in range(n):
        sel: list[Any] = []
        for axis in range(int(rng.integers(0, len(shape) + 1))):
            size, r = shape[axis], rng.random()
            if r < 0.2:
                sel.append(int(rng.integers(-size, size)))
            elif r < 0.3:
                a = int(rng.integers(0, size + 3))
                sel.append(slice(a, a))
            elif r < 0.4:
                sel.append(slice(int(rng.integers(-size, 0)), None))
            else:
                a = int(rng.integers(0, size))
                sel.append(slice(a, a + int(rng.integers(1, size + 8))))
        out.append(tuple(sel))
    return out


def assert_same(got: np.ndarray, want: np.ndarray, sel: object) -> None:
    assert (got.shape, got.dtype) == (want.shape, want.dtype), sel
    assert got.tobytes() == want.tobytes(), sel


def check(reader: StoreReader, z: zarr.Array[Any], case: Case, seed: int = 0, name: str = NAME) -> None:
    assert reader.path_used(name) == "labzarr"
    sels = selections(case, seed)
    wants = [np.asarray(z[sel]) for sel in sels]
    for sel, want in zip(sels, wants):
        assert_same(reader.read(name, sel), want, sel)
    for got, want, sel in zip(reader.read_many([(name, s) for s in sels]), wants, sels):  # every index cached now
        assert_same(got, want, sel)


@pytest.mark.parametrize("case", [*layout_cases(), *dtype_cases(), *SPECIAL])
def test_folder_reads_equal_zarr(tmp_path: Path, case: Case) -> None:
    z = write(tmp_path / "s.zarr", case)
    reader = StoreReader(tmp_path / "s.zarr", backend="labzarr")
    check(reader, z, case)
    a = reader.array(NAME)
    assert (a.shape, a.dtype, a.chunks, a.shards) == (z.shape, z.dtype, z.chunks, z.shards)
    assert a.attrs["item_id"] == "case-007"


def zip_store(folder: Path, into: Path, compression: int = zipfile.ZIP_STORED) -> Path:
    """The folder's contents at the root of a zip (as `labzarr` zips a store)."""
    with zipfile.ZipFile(into, "w", compression=compression) as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(folder).as_posix())
    return into


FEW = [
    pytest.param(kind("volume", written="part"), id="volume-sharded"),
    pytest.param(kind("volume", sharded=False, codec="zstd"), id="volume-chunked-zstd"),
    pytest.param(kind("stack", dtype="uint8"), id="stack-sharded"),
    pytest.param(kind("locations", sharded=False, dtype="int64", codec="none"), id="locations-chunked"),
]


@pytest.mark.parametrize("case", FEW)
@pytest.mark.parametrize("compression", [pytest.param(zipfile.ZIP_STORED, id="stored"),
                                         pytest.param(zipfile.ZIP_DEFLATED, id="deflated")])
def test_zip_reads_equal_zarr(tmp_path: Path, case: Case, compression: int) -> None:
    z = write(tmp_path / "s.zarr", case)
    reader = StoreReader(zip_store(tmp_path / "s.zarr", tmp_path / "s.zarr.zip", compression), backend="labzarr")
    check(reader, z, case, seed=1)


def upload(folder: Path, s3: Any, prefix: str) -> str:
    import fsspec

    fs = fsspec.filesystem("s3", endpoint_url=s3.endpoint, skip_instance_cache=True)
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            fs.put_file(str(f), f"labzarr/{prefix}/{f.relative_to(folder).as_posix()}")
    return f"s3://labzarr/{prefix}"


@pytest.mark.parametrize("case", [FEW[0], FEW[2], FEW[3]])
def test_s3_reads_equal_zarr(tmp_path: Path, s3: Any, case: Case, request: pytest.FixtureRequest) -> None:
    z = write(tmp_path / "s.zarr", case)
    url = upload(tmp_path / "s.zarr", s3, f"reader/{request.node.callspec.id}")
    reader = StoreReader(url, storage_options={"endpoint_url": s3.endpoint}, backend="labzarr")
    check(reader, z, case, seed=2)


class Wire:
    """Every S3 request an s3fs filesystem sends: (method, key, Range header or None, bytes in the body)."""

    def __init__(self, fs: Any) -> None:
        self.calls: list[tuple[str, str, str | None, int]] = []
        send = fs._call_s3  # the one coroutine every s3fs request goes through

        async def counted(method: str, *args: Any, **kwargs: Any) -> Any:
            resp = await send(method, *args, **kwargs)
            self.calls.append((method, kwargs.get("Key", ""), kwargs.get("Range"), int(resp.get("ContentLength", 0))))
            return resp

        fs._call_s3 = counted

    def take(self) -> list[tuple[str, str, str | None, int]]:
        calls, self.calls = self.calls, []
        return calls


def stored_chunks(folder: Path, case: Case) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """Each shard file's size, and each (shard key, local chunk number)'s stored bytes, from the files."""
    per = int(np.prod([s // c for s, c in zip(case.shards or (), case.chunks)]))
    sizes, chunks = {}, {}
    for f in (folder / NAME).rglob("*"):
        if f.is_file() and f.name != "zarr.json":
            key = f.relative_to(folder).as_posix()
            blob = f.read_bytes()
            sizes[key] = len(blob)
            index = np.frombuffer(blob[-(16 * per + 4):-4], "<u8").reshape(-1, 2)
            chunks.update({(key, i): int(n) for i, (_, n) in enumerate(index) if n != 2**64 - 1})
    return sizes, chunks


def test_s3_fetches_each_index_once_and_only_touched_chunks(tmp_path: Path, s3: Any) -> None:
    case = Case((1, 128, 128, 128), (1, 32, 32, 32), (1, 64, 64, 64))
    z = write(tmp_path / "s.zarr", case)
    url = upload(tmp_path / "s.zarr", s3, "reader/counted")
    transport = FsspecTransport(url, {"endpoint_url": s3.endpoint})
    wire = Wire(transport._filesystem())
    reader = ArrayReader.open(transport, NAME)
    wire.take()
    sizes, chunk_bytes = stored_chunks(tmp_path / "s.zarr", case)
    index_nbytes = 16 * 8 + 4

    patch = (0, slice(20, 84), slice(30, 94), slice(40, 104))  # 64^3 across 8 shards, 3x3x3 chunks
    assert_same(reader.read(patch), np.asarray(z[patch]), patch)
    calls = wire.take()
    assert {m for m, *_ in calls} == {"get_object"}
    assert all(r is not None for _, _, r, _ in calls), "a whole object was fetched"
    index_calls = [c for c in calls if c[2] == f"bytes=-{index_nbytes}"]
    assert sorted(k for _, k, _, _ in index_calls) == sorted({k for _, k, _, _ in index_calls})  # once per shard
    shards = {f"reader/counted/{NAME}/c/0/{x}/{y}/{w}" for x in (0, 1) for y in (0, 1) for w in (0, 1)}
    assert {k for _, k, _, _ in index_calls} == shards
    touched = sum(chunk_bytes[(f"{NAME}/c/0/{cx // 2}/{cy // 2}/{cw // 2}", (cx % 2) * 4 + (cy % 2) * 2 + cw % 2)]
                  for cx in (0, 1, 2) for cy in (0, 1, 2) for cw in (1, 2, 3))
    fetched = sum(n for *_, n in calls)
    assert fetched <= touched + len(shards) * index_nbytes
    assert all(n < min(sizes.values()) for *_, n in calls), "a whole shard was fetched"

    again = (0, slice(24, 88), slice(34, 98), slice(44, 108))  # the same shards: no index is fetched again
    assert_same(reader.read(again), np.asarray(z[again]), again)
    calls = wire.take()
    assert calls and not [c for c in calls if c[2] == f"bytes=-{index_nbytes}"]


class Recording:
    """A transport that records the ranges asked of it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.asked = inner, []

    @property
    def where(self) -> str:
        return str(self.inner.where)

    def read(self, key: str) -> bytes:
        self.asked.append((key, None))
        return bytes(self.inner.read(key))

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self.asked.append((key, list(ranges)))
        return list(self.inner.read_ranges(key, ranges))

    def size(self, key: str) -> int:
        return int(self.inner.size(key))

    def descriptors(self) -> None:
        return None  # every read goes through read_ranges, to be recorded


def test_contiguous_chunks_are_one_range_and_the_index_is_not_read_twice(tmp_path: Path) -> None:
    from labzarr.store.location import FolderTransport

    case = Case((1, 64, 64, 64), (1, 16, 16, 16), (1, 32, 32, 32))
    z = write(tmp_path / "s.zarr", case)
    transport = Recording(FolderTransport(tmp_path / "s.zarr"))
    reader = ArrayReader.open(transport, NAME)
    transport.asked.clear()
    whole_shard = (0, slice(0, 32), slice(0, 32), slice(0, 32))
    assert_same(reader.read(whole_shard), np.asarray(z[whole_shard]), whole_shard)
    key = f"{NAME}/c/0/0/0/0"
    size = (tmp_path / "s.zarr" / key).stat().st_size
    index = 16 * 8 + 4
    assert transport.asked == [(key, [(-index, 0)]), (key, [(0, size - index)])]  # every chunk in one read
    transport.asked.clear()
    corner = (0, slice(0, 16), slice(16, 32), slice(0, 32))  # two chunks of the same shard, adjacent in it or not
    assert_same(reader.read(corner), np.asarray(z[corner]), corner)
    ((asked_key, ranges),) = transport.asked
    assert asked_key == key and 1 <= len(ranges) <= 2 and sum(n for _, n in ranges) < size - index


def flip(path: Path, at: int) -> None:
    blob = bytearray(path.read_bytes())
    blob[at] ^= 0x10
    path.write_bytes(bytes(blob))


def shard_entry(path: Path, per: int, local: int) -> tuple[int, int]:
    index = np.frombuffer(path.read_bytes()[-(16 * per + 4):-4], "<u8").reshape(-1, 2)
    return int(index[local, 0]), int(index[local, 1])


@pytest.mark.parametrize("target, expect", [
    pytest.param("shard-chunk", r"chunk \(0, 1, 0, 1\) in shard '.*c/0/0/0/0'.*crc32c mismatch", id="shard-chunk"),
    pytest.param("chunk-file", r"chunk \(0, 1, 0, 1\): crc32c mismatch", id="chunk-file"),
    pytest.param("shard-index", r"shard '.*c/0/0/0/0': its index: crc32c mismatch", id="shard-index"),
    pytest.param("undecodable", r"chunk \(0, 1, 0, 1\): zstd cannot decode it", id="zstd-garbage"),
    pytest.param("past-end", r"chunk \(0, 1, 0, 1\) in shard .*cannot read it", id="index-past-end"),
])
def test_damage_raises_a_named_error(tmp_path: Path, target: str, expect: str) -> None:
    root = tmp_path / "s.zarr"
    sharded = target.startswith("shard") or target == "past-end"
    case = Case((2, 37, 29, 21), (1, 8, 8, 8), (1, 16, 16, 16) if sharded else None,
                codec="zstd" if target == "undecodable" else "blosc-lz4", crc=target != "undecodable")
    write(root, case)
    per = 2 * 2 * 2
    if sharded:
        shard = root / NAME / "c/0/0/0/0"
        offset, nbytes = shard_entry(shard, per, 1 * 4 + 0 * 2 + 1)  # local (0, 1, 0, 1): global chunk (0, 1, 0, 1)
        if target == "shard-chunk":
            flip(shard, offset + nbytes // 2)
        elif target == "shard-index":
            flip(shard, shard.stat().st_size - 40)
        else:  # cut the shard inside the chunk, keeping its index at the end: the index points past the end
            blob = shard.read_bytes()
            shard.write_bytes(blob[:offset + nbytes // 2] + blob[-(16 * per + 4):])
    else:
        chunk = root / NAME / "c/0/1/0/1"
        if target == "chunk-file":
            flip(chunk, chunk.stat().st_size // 2)
        else:
            chunk.write_bytes(b"this is not a zstd frame")
    reader = StoreReader(root, backend="labzarr")
    with pytest.raises(ChecksumError, match=expect) as info:
        reader.read(NAME, (slice(None), slice(8, 16), slice(0, 8), slice(8, 16)))
    message = str(info.value)
    assert str(root) in message and repr(NAME) in message and "case-007" in message
    again = pickle.loads(pickle.dumps(info.value))  # a DataLoader worker re-raises it in the parent
    assert isinstance(again, ChecksumError) and str(again) == message and again.chunk == info.value.chunk
    if target != "shard-index":  # a chunk beside the damaged one still reads
        reader.read(NAME, (slice(None), slice(0, 8), slice(0, 8), slice(0, 8)))


def transposed(root: Path) -> zarr.Array[Any]:
    z = zarr.create_array(zarr.storage.LocalStore(root), name=NAME, shape=(2, 20, 12, 9), dtype="int16",
                          chunks=(1, 8, 8, 8), filters=[zarr.codecs.TransposeCodec(order=(0, 3, 2, 1))],
                          compressors=(zarr.codecs.ZstdCodec(level=1),), fill_value=0)
    z[...] = values(Case(z.shape, z.chunks, None))
    return z


def test_unknown_layout_goes_to_zarr_under_auto_and_is_refused_under_labzarr(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    z = transposed(tmp_path / "s.zarr")
    with caplog.at_level("DEBUG", logger="labzarr.store.read"):
        auto = StoreReader(tmp_path / "s.zarr")
        assert auto.path_used(NAME) == "zarr"
    assert "transpose" in caplog.text
    for sel in selections(Case(z.shape, z.chunks, None), seed=3):
        assert_same(auto.read(NAME, sel), np.asarray(z[sel]), sel)
    with pytest.raises(ValueError, match=r"array 'volumes/case-007/image': codec 'transpose'"):
        StoreReader(tmp_path / "s.zarr", backend="labzarr").read(NAME, (0,))
    forced = StoreReader(tmp_path / "s.zarr", backend="zarr")
    other = write(tmp_path / "s.zarr", kind("volume"), name="plain")
    assert forced.path_used("plain") == "zarr"
    assert_same(forced.read("plain", (1, slice(3, 30))), np.asarray(other[1, 3:30]), "plain")


def zarr_json(**change: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {}, "storage_transformers": []}
    return {**doc, **change}


def sharded(inner: list[Any], index: list[Any] | None = None, **conf: Any) -> list[Any]:
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 2], "codecs": inner, "index_location": "end",
        "index_codecs": index or [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        **conf}}]


LE = {"name": "bytes", "configuration": {"endian": "little"}}


@pytest.mark.parametrize("doc, reason", [
    pytest.param(zarr_json(zarr_format=2), "zarr_format 2", id="zarr-v2"),
    pytest.param(zarr_json(node_type="group"), "node_type", id="group"),
    pytest.param(zarr_json(data_type="string"), "data_type 'string'", id="string-dtype"),
    pytest.param(zarr_json(data_type={"name": "numpy.datetime64"}), "data_type", id="extension-dtype"),
    pytest.param(zarr_json(chunk_grid={"name": "rectilinear", "configuration": {}}), "chunk_grid 'rectilinear'",
                 id="variable-grid"),
    pytest.param(zarr_json(codecs=[{"name": "transpose", "configuration": {"order": [1, 0]}}, LE]),
                 "'transpose'", id="transpose"),
    pytest.param(zarr_json(codecs=[{"name": "bytes"}]), "endian None", id="no-endian-int16"),
    pytest.param(zarr_json(codecs=[LE, {"name": "lzma"}]), "'lzma' has no decoder", id="unknown-codec"),
    pytest.param(zarr_json(codecs=[{"name": "vlen-utf8"}]), "'vlen-utf8'", id="vlen"),
    pytest.param(zarr_json(storage_transformers=[{"name": "x"}]), "storage transformers", id="transformer"),
    pytest.param(zarr_json(chunk_key_encoding={"name": "weird"}), "chunk_key_encoding 'weird'", id="key-encoding"),
    pytest.param(zarr_json(codecs=sharded([LE], chunk_shape=[3, 2])), "do not tile", id="inner-not-tiling"),
    pytest.param(zarr_json(codecs=sharded(sharded([LE]))), "'sharding_indexed'", id="nested-sharding"),
    pytest.param(zarr_json(codecs=sharded([LE], index=[{"name": "bytes", "configuration": {"endian": "big"}}])),
                 "shard index codecs", id="big-endian-index"),
    pytest.param(zarr_json(codecs=[*sharded([LE]), {"name": "zstd"}]), "after sharding", id="codec-after-shards"),
    pytest.param(zarr_json(codecs=sharded([LE], index_location="middle")), "index_location", id="index-location"),
    pytest.param(zarr_json(fill_value=70000), "fill_value 70000", id="fill-out-of-range"),
])
def test_layout_refuses_what_it_does_not_decode(doc: dict[str, Any], reason: str) -> None:
    with pytest.raises(UnsupportedLayout, match=reason):
        Layout.parse(doc)


def test_layout_reads_the_zarr_fill_value_forms() -> None:
    assert np.isnan(Layout.parse(zarr_json(data_type="float32", fill_value="NaN")).fill_value)
    assert Layout.parse(zarr_json(data_type="float64", fill_value="-Infinity")).fill_value == -np.inf
    bits = Layout.parse(zarr_json(data_type="float32", fill_value="0x3f800000")).fill_value
    assert bits == np.float32(1.0) and bits.dtype == np.float32
    assert Layout.parse(zarr_json(data_type="uint64", fill_value=2**64 - 1)).fill_value == np.uint64(2**64 - 1)


def stores_for_fork(tmp_path: Path) -> tuple[Path, list[tuple[str, tuple[Any, ...]]]]:
    """A store with a sharded volume, a stack, a chunked array and a zarr-python-only array; requests on each."""
    root = tmp_path / "s.zarr"
    requests: list[tuple[str, tuple[Any, ...]]] = []
    for name, case in [(NAME, kind("volume", written="part")), ("stacks/s", kind("stack", dtype="uint8")),
                       ("locations", kind("locations", sharded=False, dtype="int64"))]:
        write(root, case, name=name)
        requests += [(name, sel) for sel in selections(case, seed=4, n=4)]
    transposed(tmp_path / "t.zarr")
    for f in (tmp_path / "t.zarr" / NAME).rglob("*"):  # a zarr-python array in the same store
        if f.is_file():
            dest = root / "fallback" / f.relative_to(tmp_path / "t.zarr" / NAME)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(f.read_bytes())
    requests += [("fallback", (1, slice(2, 15))), ("fallback", ())]
    return root, requests


def child_read(reader: StoreReader, requests: Sequence[tuple[str, tuple[Any, ...]]], out: Any) -> None:
    try:
        got = reader.read_many(requests)
        out.put([(a.shape, a.dtype.str, a.tobytes()) for a in got] + [reader.path_used("fallback")])
    except BaseException as exc:  # the parent reports it, not a silent dead child
        out.put(repr(exc))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_child_processes_read_the_same_bytes(tmp_path: Path, method: str) -> None:
    root, requests = stores_for_fork(tmp_path)
    reader = StoreReader(root, max_open=2)  # fewer than the arrays: the LRU closes some on the way
    want = [(a.shape, a.dtype.str, a.tobytes()) for a in reader.read_many(requests)]
    assert reader.open_arrays() == 2 and reader.path_used("fallback") == "zarr"
    ctx = multiprocessing.get_context(method)
    out = ctx.Queue()
    # Under fork the child inherits this very object (descriptors, cached indexes, zarr handles) unpickled.
    child = ctx.Process(target=child_read, args=(reader, requests, out))
    child.start()
    try:
        got = out.get(timeout=50)
    finally:
        child.join(timeout=10)
    assert got == [*want, "zarr"]
    assert child.exitcode == 0
    assert [(a.shape, a.dtype.str, a.tobytes()) for a in reader.read_many(requests)] == want  # the parent still reads


def test_pickling_keeps_only_configuration(tmp_path: Path) -> None:
    root, requests = stores_for_fork(tmp_path)
    reader = StoreReader(root, storage_options={}, max_open=3)
    want = [a.tobytes() for a in reader.read_many(requests)]
    assert reader.open_arrays() == 3
    state = reader.__getstate__()
    assert state == {"store": root, "storage_options": {}, "backend": "auto", "max_open": 3, "slots": {}}
    again = pickle.loads(pickle.dumps(reader))
    assert again.open_arrays() == 0
    assert [a.tobytes() for a in again.read_many(requests)] == want
    array = reader.array(NAME)  # labzarr's own array reader pickles too, without its descriptors or indexes
    blob = pickle.dumps(array)
    assert len(blob) < 4000 and b"_fds" not in blob
    assert pickle.loads(blob).read(requests[0][1]).tobytes() == want[0]


@pytest.mark.parametrize("sel, error", [
    pytest.param((slice(0, 4, 2),), ValueError, id="step"),
    pytest.param((99,), IndexError, id="int-out-of-range"),
    pytest.param((0, 0, 0, 0, 0), IndexError, id="too-many"),
    pytest.param((..., 0, ...), IndexError, id="two-ellipses"),
    pytest.param((True,), IndexError, id="bool"),
])
def test_selection_errors_match_numpy(tmp_path: Path, sel: tuple[Any, ...], error: type[Exception]) -> None:
    write(tmp_path / "s.zarr", kind("volume"))
    with pytest.raises(error):
        StoreReader(tmp_path / "s.zarr").read(NAME, sel)


def test_missing_array_is_named(tmp_path: Path) -> None:
    write(tmp_path / "s.zarr", kind("locations"))
    with pytest.raises(FileNotFoundError, match="no array 'nothing'"):
        StoreReader(tmp_path / "s.zarr", backend="labzarr").read("nothing")


def open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def test_threads_read_one_folder_transport_while_it_closes_files(tmp_path: Path) -> None:
    """A batch's shards are fetched in the reader's threads through one transport: with more files than it keeps
    open, a descriptor another thread is reading from is closed only after that read (were it closed under the
    read, its number could be reused by the next open and the read return another file's bytes)."""
    from concurrent.futures import ThreadPoolExecutor

    from labzarr.store.location import FolderTransport

    blobs = {f"f{n}": np.random.default_rng(n).bytes(64 << 10) for n in range(24)}
    for name, blob in blobs.items():
        (tmp_path / name).write_bytes(blob)
    before = open_descriptors()
    transport = FolderTransport(tmp_path, max_open=2)
    order = [name for _ in range(40) for name in blobs]
    np.random.default_rng(0).shuffle(order)

    def read(name: str) -> bool:
        whole = transport.read_ranges(name, [(0, 64 << 10)])[0]
        tail = transport.read_ranges(name, [(-100, 0), (5, 7)])
        return whole == blobs[name] and tail == [blobs[name][-100:], blobs[name][5:12]]

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, order))
    assert open_descriptors() <= before + 2  # the LRU's bound holds, none leaked on the way
    transport.close()
    assert open_descriptors() == before


def test_threads_read_a_batch_from_zip_and_folder_alike(tmp_path: Path) -> None:
    """`read_many` through a thread pool (fetches and decodes both in threads) equals the plain map, for a folder
    store and its zip, the zip's one descriptor opened once however many threads ask for it first."""
    from concurrent.futures import ThreadPoolExecutor

    root, requests = stores_for_fork(tmp_path)
    want = [a.tobytes() for a in StoreReader(root).read_many(requests)]
    with zipfile.ZipFile(tmp_path / "s.zip", "w", zipfile.ZIP_STORED) as zf:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(root).as_posix())
    before = open_descriptors()
    with ThreadPoolExecutor(4) as pool:
        for store in (root, tmp_path / "s.zip"):
            reader = StoreReader(store)
            got = reader.read_many(requests, mapper=pool.map)
            assert [a.tobytes() for a in got] == want
            reader.close()
    assert open_descriptors() == before
