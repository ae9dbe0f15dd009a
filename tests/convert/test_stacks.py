"""Stack planning is pure: slots in manifest order, one task per shard, caps and header rejections decided early."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from labzarr.convert import load_spec
from labzarr.convert.demo import write_spec
from labzarr.convert.discover import FileEntry, discover
from labzarr.convert.plan.build import plan
from labzarr.convert.plan.records import parse_shard_digests, parse_shard_record, shard_record
from labzarr.convert.plan.stacks import (
    MAX_IMAGES_PER_SHARD,
    SHARD_BYTES,
    StackEntry,
    images_per_shard,
    plan_stacks,
    stack_name,
)
from labzarr.convert.probe import Probe
from labzarr.readers import Plane, Reason
from labzarr.store import ChannelStats, Histogram, ItemStats

RGB16 = Plane(channels=3, height=16, width=16, dtype="uint8")
GREY = Plane(channels=1, height=20, width=24, dtype="uint16")


def entry(i: int, plane: Plane = RGB16, item_id: str | None = None) -> StackEntry:
    return StackEntry(item_id=item_id or f"img{i:05d}", source=f"tiles/img_{i:05d}.jpg", path=f"/raw/img_{i:05d}.jpg",
                      kind="jpeg", sha256=f"{i:064x}", plane=plane)


def test_slots_follow_manifest_order_whatever_the_input_order() -> None:
    entries = [entry(i) for i in range(2500)] + [entry(i, GREY) for i in range(3)]
    shuffled = entries[:]
    random.Random(7).shuffle(shuffled)
    a, b = plan_stacks(entries), plan_stacks(shuffled)
    assert a == b
    stacks, tasks = a
    assert [s.array for s in stacks] == ["stacks/1x20x24_uint16", "stacks/3x16x16_uint8"]
    rgb = [i for t in tasks if t.stack.array == "stacks/3x16x16_uint8" for i in t.items]
    assert [i.slot for i in rgb] == list(range(2500))
    assert [i.item_id for i in rgb] == sorted(e.item_id for e in entries if e.plane == RGB16)


def test_same_id_twice_ordered_by_source() -> None:
    twins = [StackEntry(item_id="a1", source=s, path=f"/raw/{s}", kind="jpeg", sha256=s * 8, plane=RGB16)
             for s in ("z/a1.jpg", "b/a1.jpg")]
    _, (task,) = plan_stacks(twins)
    assert [(i.source, i.slot) for i in task.items] == [("b/a1.jpg", 0), ("z/a1.jpg", 1)]


def test_every_shard_has_exactly_one_task_covering_its_slots() -> None:
    stacks, tasks = plan_stacks([entry(i) for i in range(2500)])
    (stack,) = stacks
    assert stack.per_shard == MAX_IMAGES_PER_SHARD and stack.n_shards == 3
    assert stack.shape == (2500, 3, 16, 16) and stack.chunks == (1, 3, 16, 16)
    assert stack.shards == (MAX_IMAGES_PER_SHARD, 3, 16, 16)
    owners = [(t.stack.array, t.shard) for t in tasks]
    assert len(owners) == len(set(owners)) == stack.n_shards
    for t in tasks:
        slots = [i.slot for i in t.items]
        assert slots == list(range(t.first, t.stop))  # contiguous: written in one call
        assert all(s // stack.per_shard == t.shard for s in slots)
    assert sorted(i.slot for t in tasks for i in t.items) == list(range(2500))


@pytest.mark.parametrize(("plane", "n", "want"), [
    (RGB16, 10_000, MAX_IMAGES_PER_SHARD),  # tiny tiles: capped by image count
    (Plane(3, 256, 256, "uint8"), 100_000, SHARD_BYTES // (3 * 256 * 256)),  # 341: ~300 shard files per 100k
    (Plane(3, 2048, 2048, "uint8"), 50, 5),
    (Plane(3, 8192, 8192, "uint16"), 50, 1),  # one image is bigger than a shard's budget
    (RGB16, 30, 30),  # a small stack is one shard, its index no bigger than the stack
])
def test_images_per_shard(plane: Plane, n: int, want: int) -> None:
    assert images_per_shard(plane, n) == want


def test_stack_names_say_shape_and_dtype() -> None:
    assert stack_name(RGB16) == "stacks/3x16x16_uint8"
    assert stack_name(Plane(1, 1024, 256, "uint16")) == "stacks/1x1024x256_uint16"


def _probe(rel: str, plane: Plane | None, kind: str = "jpeg", rejected: tuple[Reason, str] | None = None) -> Probe:
    return Probe(rel=rel, size=100, sha256=rel.ljust(64, "0")[:64], kind=kind, text=False, gzipped=False,
                 gzip_error=None, magic=b"\xff\xd8\xff", plane=plane, header_rejected=rejected)


def test_plan_decides_caps_and_broken_headers_without_decoding(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    spec = load_spec(write_spec(tmp_path / "m" / "delivery.toml", raw=tmp_path / "raw", store=tmp_path / "s.zarr",
                                extra="\n[validate]\nmax_pixels = 1000000\n", labels=False), root=tmp_path)
    rels = ["img_1.jpg", "img_2.jpg", "img_3.jpg", "img_4.jpg", "img_5.png"]
    found = discover([FileEntry(r, str(tmp_path / "raw" / r), 100) for r in rels], spec.items)
    probes = {p.rel: p for p in [
        _probe("img_1.jpg", RGB16),
        _probe("img_2.jpg", Plane(3, 2000, 2000, "uint8")),  # 4 Mpx > the 1 Mpx cap
        _probe("img_3.jpg", None, rejected=(Reason.TRUNCATED, "the file ends at byte 40, before the first scan")),
        _probe("img_4.jpg", GREY, kind="png"),  # a PNG named .jpg
        _probe("img_5.png", RGB16, kind="png"),
    ]}
    the_plan = plan(spec, found, probes)
    assert the_plan.tasks == ()
    rows = {r.source: r for r in the_plan.rows}
    assert rows["img_2.jpg"].reason is Reason.TOO_LARGE
    assert "2,000x2,000 = 4,000,000 pixels, cap 1,000,000" in rows["img_2.jpg"].detail
    assert (rows["img_3.jpg"].reason, rows["img_3.jpg"].kind) == (Reason.TRUNCATED, "jpeg")
    items = {i.source: (t.stack.array, i.slot, i.warnings) for t in the_plan.shards for i in t.items}
    assert items == {
        "img_1.jpg": ("stacks/3x16x16_uint8", 0, ()),
        "img_5.png": ("stacks/3x16x16_uint8", 1, ()),
        "img_4.jpg": ("stacks/1x20x24_uint16", 0, ("named .jpg but the content is png; read as png",)),
    }
    assert the_plan.n_items == 3
    assert the_plan.describe().startswith("3 to convert, 0 unchanged, 2 decided without decoding")
    assert "img_1.jpg -> stacks/3x16x16_uint8[0] (shard 0)" in the_plan.describe()


def test_a_shard_records_digests_read_alone_equal_the_whole_record() -> None:
    """Hashing a stack reads only each shard record's slots and digests (`parse_shard_digests`): the same as the
    whole record's, statistics and all left unbuilt."""
    stats = ItemStats(channels=(ChannelStats(count=4, mean=1.5, m2=2.0, min=0.0, max=3.0,
                                             histogram=Histogram(np.arange(4), np.ones(4, np.int64))),))
    (task, *_) = plan_stacks([entry(i) for i in range(5)])[1]
    rows = [replace(i.base_row(), slot=i.slot, stats=stats) for i in task.items]
    digests = [bytes([i]) * 32 for i in range(len(rows))]
    name, blob = shard_record(task, rows, digests, "fingerprint")
    whole = parse_shard_record(name, blob)
    assert parse_shard_digests(name, blob) == (whole.first, whole.stop, whole.digests) == \
        (0, 5, tuple(d.hex() for d in digests))
    assert whole.rows[0].stats == stats
    with pytest.raises(ValueError, match="not a gzipped record"):
        parse_shard_digests(name, blob[:20])
