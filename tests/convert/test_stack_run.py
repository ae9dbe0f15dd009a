"""2D deliveries end to end: documented outcomes, pixels equal to the decoders', sharded stacks, stable slots."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image
from turbojpeg import TJPF_RGB, TurboJPEG

from labzarr.convert import convert_delivery, read_manifest
from labzarr.convert.demo import write_spec
from labzarr.loaders import open_store

from ..faulty_readers import PLANAR_PLUGINS, PLANAR_SEGFAULT_MAGIC
from ..imaging import PYDICOM_DATA, pillow_decode, turbo_decode


def test_every_file_has_its_documented_outcome(converted_images) -> None:
    d, result, expected = converted_images
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    assert set(rows) == set(expected)
    for source, (status, reason) in expected.items():
        assert (rows[source]["status"], rows[source]["reason"]) == (status, reason), (source, rows[source]["detail"])
        if status == "rejected":
            assert rows[source]["detail"] and not rows[source]["slot"] and not rows[source]["array"]
    assert rows["tiles/tile_025.jpg"]["kind"] == "png"
    assert "named .jpg but the content is png" in rows["tiles/tile_025.jpg"]["warnings"]
    assert rows["tiles/tile_026.jpg"]["kind"] == "tiff"
    assert "CMYK converted to RGB" in rows["tiles/tile_015.jpg"]["warnings"]
    assert "EXIF orientation 6 applied" in rows["tiles/tile_016.jpg"]["warnings"]
    assert "Premature end" in rows["tiles/tile_023.jpg"]["detail"] or "no EOI" in rows["tiles/tile_023.jpg"]["detail"]
    assert "60,000x60,000" in rows["tiles/tile_029.jpg"]["detail"]


def test_store_pixels_equal_the_decoders(converted_images) -> None:
    d, result, _ = converted_images
    view = open_store(d.store)
    items = {i.source: i for i in view.items}
    assert all(i.slot is not None and i.array.startswith("stacks/") for i in view.items)
    got = {src: np.asarray(view.array(i)[i.slot]) for src, i in items.items()}
    for n in (*range(1, 15), 17):  # baseline 4:2:0 and 4:4:4, progressive, grey, arithmetic
        src = f"tiles/tile_{n:03d}.jpg"
        np.testing.assert_array_equal(got[src], turbo_decode((d.raw / src).read_bytes()), err_msg=src)
        diff = np.abs(got[src].astype(np.int16) - pillow_decode((d.raw / src).read_bytes()).astype(np.int16))
        assert diff.max() <= 2, src
    for n in (15, 16):  # CMYK and EXIF-rotated: as Pillow shows them, within 2 levels
        src = f"tiles/tile_{n:03d}.jpg"
        want = pillow_decode((d.raw / src).read_bytes(), transpose_exif=True)
        assert got[src].shape == want.shape == (3, 32, 40)
        assert np.abs(got[src].astype(np.int16) - want.astype(np.int16)).max() <= 2, src
    twelve = pydicom.dcmread(PYDICOM_DATA / "JPGExtended.dcm").pixel_array
    np.testing.assert_array_equal(got["tiles/tile_018.jpg"], twelve[np.newaxis])
    for n in (25, 26, 30):  # PNG and TIFF named .jpg, lossless JPEG: exact
        src = f"tiles/tile_{n:03d}.jpg"
        np.testing.assert_array_equal(got[src], pillow_decode((d.raw / src).read_bytes()), err_msg=src)
    assert items["tiles/tile_018.jpg"].array == "stacks/1x1024x256_uint16"
    assert items["tiles/tile_014.jpg"].array == "stacks/1x32x40_uint8"


def test_rejected_slots_hold_nothing_and_stacks_are_sharded(converted_images) -> None:
    d, result, _ = converted_images
    view = open_store(d.store)
    arr = view.array("stacks/3x32x40_uint8")
    ok = {i.slot for i in view.items if i.array == "stacks/3x32x40_uint8"}
    # The 50/90/99 % cuts got slots (their headers were whole): they stay empty. (The duplicate has none:
    # duplicates are decided from the probes' hashes, before any decoding.)
    assert arr.shape[0] == len(ok) + 3
    for slot in set(range(arr.shape[0])) - ok:
        assert not np.asarray(arr[slot]).any()
    assert arr.shards == (arr.shape[0], 3, 32, 40) and arr.chunks == (1, 3, 32, 40)
    assert arr.path_used == "labzarr" and arr.layout is not None and arr.layout.codecs == ("blosc", "crc32c")
    assert arr.attrs["complete"] and arr.attrs["ok"] == len(ok)
    stacks = {i.array for i in view.items}
    assert len(stacks) == 4  # RGB 32x40 (JPEG, PNG, TIFF alike), grey 32x40, 12-bit 1024x256, RGB 100x100
    files = [p for p in (d.store / "stacks").rglob("*") if p.is_file()]
    assert len(files) == 2 * len(stacks) + 1  # per stack a zarr.json and one shard file; the group's zarr.json


def _tiles(raw: Path, n: int) -> None:
    tj = TurboJPEG()
    rng = np.random.default_rng(0)
    for i in range(n):
        (raw / f"d{i // 1000}").mkdir(parents=True, exist_ok=True)
        shape = (16, 16, 3) if i % 3 else (16, 24, 3)  # two sizes: two stacks
        data = tj.encode(rng.integers(0, 256, shape, dtype=np.uint8), quality=90, pixel_format=TJPF_RGB)
        (raw / f"d{i // 1000}" / f"tile_{i:05d}.jpg").write_bytes(data)


@pytest.mark.parametrize("n", [pytest.param(10_000, marks=pytest.mark.slow, id="10000"),
                               pytest.param(1_000, id="1000")])
def test_thousands_of_jpegs_make_few_files_and_the_same_slots_on_1_and_2_workers(tmp_path: Path, n: int) -> None:
    raw = tmp_path / "raw"
    _tiles(raw, n)
    runs = []
    for workers in (1, 2):
        store = tmp_path / f"w{workers}.zarr"
        spec = write_spec(tmp_path / f"m{workers}" / "delivery.toml", raw=raw, store=store, name="tiles", labels=False)
        runs.append((store, convert_delivery(spec, workers=workers)))
    (store1, one), (store2, two) = runs
    assert one.manifest.read_bytes() == two.manifest.read_bytes()
    rows = read_manifest(one.manifest)
    assert len(rows) == n and all(r["status"] == "ok" for r in rows)
    assert {r["array"] for r in rows} == {"stacks/3x16x16_uint8", "stacks/3x16x24_uint8"}
    for store in (store1, store2):
        files = [p for p in store.rglob("*") if p.is_file() and ".labzarr" not in p.relative_to(store).parts]
        assert len(files) <= 20, len(files)  # at most 7 + 4 shard files, a handful of zarr.json: not one per image
        # run bookkeeping: one record per shard task (what a rerun reuses), the lock, a few more
        assert len(list((store / ".labzarr").rglob("*.json"))) <= 20
    a, b = open_store(store1), open_store(store2)
    assert [(i.source, i.array, i.slot) for i in a.items] == [(i.source, i.array, i.slot) for i in b.items]
    tj = TurboJPEG()
    for i in a.items[:: 997]:
        want = np.moveaxis(tj.decode((raw / i.source).read_bytes(), pixel_format=TJPF_RGB), 2, 0)
        np.testing.assert_array_equal(a.array(i)[i.slot], want)
        np.testing.assert_array_equal(b.array(i)[i.slot], want)


def test_a_worker_dying_in_a_shard_costs_only_its_own_image(tmp_path: Path) -> None:
    """A shard task whose worker dies (a decoder segfault) is redone image by image, one at a time."""
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = np.random.default_rng(3)
    pixels = {}
    for i in range(7):
        if i == 3:
            (raw / f"tile_{i:03d}.png").write_bytes(PLANAR_SEGFAULT_MAGIC + bytes(64))
            continue
        pixels[i] = rng.integers(0, 256, (8, 8), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels[i]).save(buf, format="PNG")
        (raw / f"tile_{i:03d}.png").write_bytes(buf.getvalue())
    extra = f"\n[run]\ncrash_retries = 0\nreaders = {json.dumps(PLANAR_PLUGINS)}\n"
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr", name="t", labels=False,
                      extra=extra)
    result = convert_delivery(spec, workers=1)
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    lost = rows.pop("tile_003.png")
    assert (lost["status"], lost["reason"]) == ("rejected", "decoder_crash")
    assert "Segmentation fault" in lost["detail"]
    view = open_store(tmp_path / "s.zarr")
    by_source = {i.source: i for i in view.items}
    assert sorted(by_source) == sorted(rows) and all(r["status"] == "ok" for r in rows.values())
    for i, want in pixels.items():
        item = by_source[f"tile_{i:03d}.png"]
        np.testing.assert_array_equal(view.array(item)[item.slot], want[np.newaxis])


def test_damage_in_a_stack_names_the_items_stored_there(converted_images, tmp_path: Path) -> None:
    from labzarr.store import ChecksumError
    from labzarr.store.chunks.shard import decode_index

    d, _, _ = converted_images
    store = Path(shutil.copytree(d.store, tmp_path / "images.zarr"))
    view = open_store(store)
    array = "stacks/3x32x40_uint8"
    by_slot = {i.slot: i.item_id for i in view.items if i.array == array}
    shard = next(p for p in (store / array / "c").rglob("*") if p.is_file())
    n = view.array(array).shape[0]  # one shard holds every slot; its index has an entry per slot
    blob = bytearray(shard.read_bytes())
    index = decode_index(bytes(blob[-(16 * n + 4):]), crc=True)
    slot = min(by_slot)
    offset, nbytes = index[slot]
    blob[offset + nbytes // 2] ^= 0x08
    shard.write_bytes(bytes(blob))
    with pytest.raises(ChecksumError) as raised:  # one image per chunk: exactly the item in that slot
        open_store(store).read(by_slot[slot])
    assert raised.value.items == (by_slot[slot],) and f"(item {by_slot[slot]})" in str(raised.value)
    others = [i for s, i in by_slot.items() if s != slot]
    open_store(store).read(others[0])  # the shard's other images still read
    shard.unlink()
    with pytest.raises(ChecksumError) as raised:  # the whole shard lost: every item stored in it
        open_store(store).read(others[0])
    assert set(raised.value.items) == set(by_slot.values()) and "items " in str(raised.value)
