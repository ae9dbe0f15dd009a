"""Repair after damage: a plain `convert` redoes arrays whose chunk files or attributes are lost (a cheap check,
no chunk read); `verify --repair SPEC` and `convert --verify` redo exactly what verify finds damaged. Either way
the store ends as a clean run leaves it, and the intact items are not converted again."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pytest

from labzarr.convert import convert_delivery, load_spec
from labzarr.convert.cli import main
from labzarr.convert.demo import write_demo, write_spec
from labzarr.convert.discover import Candidate, FileEntry
from labzarr.convert.manifest import Row
from labzarr.convert.plan.build import plan
from labzarr.convert.plan.records import Damage, Outcome, Recorded, merge_damage
from labzarr.convert.probe import Probe
from labzarr.convert.qc.verify import Problem, VerifyReport, verify_store
from labzarr.convert.repair import damage_of, repair_delivery, repaired_line
from labzarr.store import STATE, Location, UrlStore, as_location

from ..conftest import Delivery, make_delivery
from ..corpus._util import jpeg, put
from .test_resume import N_DECODED

STACK = "stacks/3x16x16_uint8"
BIG_STACK, N_BIG, PER_SHARD = "stacks/3x1024x1024_uint8", 23, 21


@dataclass(frozen=True)
class Snapshot:
    """What must equal a clean run's: the committed files' bytes and every array's content hash."""

    manifest: bytes
    summary: bytes
    hashes: dict[str, str]


def snapshot(spec: Path, store: Location) -> Snapshot:
    nodes = store.array_nodes(skip=STATE)
    return Snapshot(manifest=(spec.parent / "manifest.csv").read_bytes(),
                    summary=(spec.parent / "summary.json").read_bytes(),
                    hashes={path: meta["attributes"].get("content_sha256", "") for path, meta in nodes})


def chunk_files(store: Path, array: str) -> list[Path]:
    return sorted(p for p in (store / array / "c").rglob("*") if p.is_file())


def flip(path: Path) -> None:
    """Flip one bit in the middle of a file, as a failing disk would."""
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x10
    path.write_bytes(bytes(blob))


def repaired(result) -> list[tuple[str, str]]:  # noqa: ANN001 - a RunResult
    return sorted((r.item_id, r.why) for r in result.repaired)


# --- volumes ---------------------------------------------------------------------------------------------------


def test_convert_repairs_lost_chunk_files_and_attributes_and_verify_repair_the_rest(
        tmp_path: Path, scheduler: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = make_delivery(tmp_path)
    clean = convert_delivery(d.spec, scheduler=scheduler)
    want = snapshot(d.spec, as_location(d.store))
    assert clean.converted == N_DECODED and not clean.repaired
    flip(chunk_files(d.store, "volumes/case2/0")[0])  # inside a chunk: only a full read can see it
    chunk_files(d.store, "volumes/case1/0")[-1].unlink()
    meta = d.store / "volumes" / "case4" / "0" / "zarr.json"
    meta.write_bytes(meta.read_bytes()[:60])  # torn: no longer JSON
    (d.store / "volumes" / "case5" / "0" / "zarr.json").unlink()

    again = convert_delivery(d.spec, scheduler=scheduler)
    assert repaired(again) == [("case1", "chunk files missing"), ("case4", "attributes unreadable"),
                               ("case5", "attributes missing")]
    assert (again.converted, again.unchanged) == (3, N_DECODED - 3)  # the intact items are reused
    log = json.loads((d.store / STATE / "last-run.json").read_bytes())
    assert [(r["array"], r["why"]) for r in log["repaired"]] == [
        ("volumes/case1/0", "chunk files missing"), ("volumes/case4/0", "attributes unreadable"),
        ("volumes/case5/0", "attributes missing")]
    assert verify_store(d.store).damaged() == ["volumes/case2/0"]  # the cheap check reads no chunk
    assert snapshot(d.spec, as_location(d.store)).manifest == want.manifest

    assert main(["verify", "--repair", str(d.spec), "--scheduler", scheduler]) == 0
    out = capsys.readouterr().out
    line = f"\n\nrepair: 1 repaired (chunk unreadable: case2); 1 converted, {N_DECODED - 1} unchanged\n\n"
    before, after = out.split(line)  # the verdict before, what was converted again, the verdict after
    assert "DAMAGED: 1 item(s)" in before and "volumes/case2/0" in before
    assert after.rstrip().endswith("ok: every chunk present and intact, every content hash matches")
    assert snapshot(d.spec, as_location(d.store)) == want

    assert main(["verify", "--repair", str(d.spec), "--scheduler", scheduler]) == 0  # intact: nothing converted
    assert capsys.readouterr().out.rstrip().endswith("nothing to repair")


def test_convert_verify_repairs_in_one_run(tmp_path: Path, scheduler: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = make_delivery(tmp_path)
    assert main(["convert", str(d.spec), "--verify", "--scheduler", scheduler]) == 0  # a first run: verified after
    out = capsys.readouterr().out
    assert "before converting" not in out and "\nverify: " in out and out.rstrip().endswith("content hash matches")
    want = snapshot(d.spec, as_location(d.store))
    flip(chunk_files(d.store, "volumes/case3/0")[0])
    chunk_files(d.store, "volumes/case6/0")[0].unlink()

    assert main(["convert", str(d.spec), "--verify", "--scheduler", scheduler]) == 0
    out = capsys.readouterr().out
    assert f"2 converted, {N_DECODED - 2} unchanged" in out
    assert "2 repaired (chunk unreadable: case3; chunk files missing: case6)" in out
    assert "before converting: " in out and "DAMAGED: 2 item(s)" in out
    assert out.rstrip().endswith("ok: every chunk present and intact, every content hash matches")
    assert snapshot(d.spec, as_location(d.store)) == want


def test_verify_repair_prints_no_dask_chatter(tmp_path: Path, scheduler: str) -> None:
    """`labzarr verify --repair` starts its own cluster, as convert does, and as quietly: stderr holds progress
    only, never distributed's INFO lines (its import sets their level; the command sets it after that)."""
    d = make_delivery(tmp_path)
    convert_delivery(d.spec, scheduler=scheduler)
    flip(chunk_files(d.store, "volumes/case3/0")[0])
    out = subprocess.run([str(Path(sys.executable).parent / "labzarr"), "verify", "--repair", str(d.spec),
                          "--workers", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "1 repaired (chunk unreadable: case3)" in out.stdout
    assert "INFO" not in out.stderr and "distributed" not in out.stderr, out.stderr[-2000:]


def test_an_array_removed_by_hand_is_reported_as_repaired(tmp_path: Path, scheduler: str) -> None:
    d = make_delivery(tmp_path)
    convert_delivery(d.spec, scheduler=scheduler)
    want = snapshot(d.spec, as_location(d.store))
    for p in sorted((d.store / "volumes" / "case7").rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    (d.store / "volumes" / "case7").rmdir()
    again = convert_delivery(d.spec, scheduler=scheduler)
    assert repaired(again) == [("case7", "array missing")] and again.converted == 1
    assert snapshot(d.spec, as_location(d.store)) == want


# --- stacks of 2D images -----------------------------------------------------------------------------------------


def test_a_damaged_stack_redoes_only_its_damaged_shards(tmp_path: Path, scheduler: str) -> None:
    raw = tmp_path / "raw"
    # 1024x1024 RGB images: 21 to a shard (SHARD_BYTES), so 23 make two shards (slots 0..20 and 21..22). Two
    # shards, one damaged, are the point: 23 big images cost less than 1100 16x16 tiles (1024 to a shard).
    for i in range(N_BIG):
        put(raw, f"tiles/tile_{i:05d}.jpg", jpeg(i, (1024, 1024, 3)))
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr", name="t", labels=False)
    store = tmp_path / "s.zarr"
    stack = store / BIG_STACK
    clean = convert_delivery(spec, scheduler=scheduler)
    assert clean.converted == N_BIG
    want = snapshot(spec, as_location(store))

    flip(stack / "c/0/0/0/0")
    (stack / "c/1/0/0/0").unlink()
    again = convert_delivery(spec, scheduler=scheduler)
    # only the lost shard; the flipped one is carried
    assert (again.converted, again.unchanged) == (N_BIG - PER_SHARD, PER_SHARD)
    assert {r.why for r in again.repaired} == {"chunk files missing"} and len(again.repaired) == N_BIG - PER_SHARD
    assert verify_store(store).damaged() == [BIG_STACK]
    shard1 = (stack / "c/1/0/0/0").stat().st_ino

    fixed = repair_delivery(spec, only_damaged=True, scheduler=scheduler)
    assert fixed.before is not None and fixed.before.damaged() == [BIG_STACK] and fixed.ok
    assert fixed.run is not None and (fixed.run.converted, fixed.run.unchanged) == (PER_SHARD, N_BIG - PER_SHARD)
    assert {r.why for r in fixed.run.repaired} == {"chunk unreadable"} and len(fixed.run.repaired) == PER_SHARD
    assert (stack / "c/1/0/0/0").stat().st_ino == shard1  # the intact shard was carried over, not rewritten
    assert snapshot(spec, as_location(store)) == want

    meta = stack / "zarr.json"
    meta.write_bytes(b"{" + meta.read_bytes()[1:-9])  # torn
    third = convert_delivery(spec, scheduler=scheduler)
    assert (third.converted, third.unchanged) == (N_BIG, 0)
    assert {r.why for r in third.repaired} == {"attributes unreadable"} and len(third.repaired) == N_BIG
    assert snapshot(spec, as_location(store)) == want
    assert verify_store(store).ok


def test_a_shard_left_empty_on_purpose_is_no_damage(tmp_path: Path, scheduler: str) -> None:
    """A one-image stack whose image fails to decode holds an all-zero shard, which zarr does not store: the
    stack's record of stored files says it was never written, so the cheap check does not call it lost, and its
    slot reads as zeros."""
    raw = tmp_path / "raw"
    put(raw, "a/img_001.jpg", jpeg(1))
    blob = jpeg(2, (20, 20, 3))
    put(raw, "b/img_002.jpg", blob[: len(blob) - 40])  # its header is whole, its scan cut short
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr", name="t", labels=False)
    first = convert_delivery(spec, scheduler=scheduler)
    assert [r.status for r in first.rows] == ["ok", "rejected"]
    meta = json.loads((tmp_path / "s.zarr" / "stacks" / "3x20x20_uint8" / "zarr.json").read_bytes())
    assert meta["attributes"]["stored"]["nbytes"][0] == 0 and all(meta["attributes"]["stored"]["nbytes"][1:])
    from labzarr.store import StoreReader

    assert not StoreReader(tmp_path / "s.zarr").read("stacks/3x20x20_uint8").any()
    again = convert_delivery(spec, scheduler=scheduler)
    assert not again.repaired and again.manifest.read_bytes() == first.manifest.read_bytes()
    assert verify_store(tmp_path / "s.zarr").ok


# --- a store at a URL --------------------------------------------------------------------------------------------


@pytest.mark.slow  # a moto S3 server and two conversions on it: make stress; the folder cases above run always
def test_convert_repairs_a_url_store(s3: object, tmp_path: Path) -> None:
    url = "s3://labzarr/repair.zarr"
    raw = write_demo(tmp_path / "raw" / "demo")
    spec = write_spec(tmp_path / "manifests" / "demo" / "delivery.toml", raw=raw, store=url, name="demo")
    convert_delivery(spec, workers=1)
    want = snapshot(spec, UrlStore(url))
    fs = fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)
    fs.rm_file(sorted(fs.find("labzarr/repair.zarr/volumes/case1/0/c"))[0])
    fs.pipe_file("labzarr/repair.zarr/volumes/case4/0/zarr.json", b'{"zarr_format": 3, "node_ty')
    again = convert_delivery(spec, workers=1)
    assert repaired(again) == [("case1", "chunk files missing"), ("case4", "attributes unreadable")]
    assert (again.converted, again.unchanged) == (2, N_DECODED - 2)
    assert snapshot(spec, UrlStore(url)) == want
    assert verify_store(UrlStore(url)).ok


# --- the command line --------------------------------------------------------------------------------------------


def test_verify_repair_needs_the_spec_and_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = make_delivery(tmp_path)
    assert main(["verify", "--repair", str(d.store)]) == 2
    err = capsys.readouterr().err
    assert "repairing needs the delivery's spec" in err and "hint: pass the delivery.toml" in err
    assert main(["verify", "--repair", str(d.spec)]) == 2  # nothing converted yet
    assert "hint: nothing to repair: run `labzarr convert SPEC` first" in capsys.readouterr().err


# --- pure: what the planner does with damage, what verify's findings become ----------------------------------------


def _one_volume(tmp_path: Path, *, damage: Damage | None, recorded: bool = True, sha: str = "a" * 64):
    d: Delivery = make_delivery(tmp_path)
    spec = load_spec(d.spec, root=tmp_path)
    rel = "case_001.nii"
    probe = Probe(rel=rel, size=10, sha256=sha, kind="nifti", text=False, gzipped=False, gzip_error=None, magic=b"")
    row = Row(item_id="case1", status="ok", source=rel, kind="nifti", sha256="a" * 64, array="volumes/case1/0")
    done = Recorded(volumes={rel: Outcome(fingerprint="s1", row=row)} if recorded else {},
                    damaged={"volumes/case1/0": damage} if damage else {})
    return plan(spec, [Candidate(FileEntry(rel, f"/raw/{rel}", 10), "case1")], {rel: probe}, done,
                fingerprint="s1")


@pytest.mark.parametrize(("damage", "recorded", "sha", "tasks", "repairs"), [
    pytest.param(None, True, "a" * 64, 0, [], id="intact-reused"),
    pytest.param(Damage("chunk files missing"), True, "a" * 64, 1, [("case1", "chunk files missing")],
                 id="damaged-redone"),
    pytest.param(Damage("chunk files missing"), True, "b" * 64, 1, [], id="changed-anyway"),
    pytest.param(Damage("attributes unreadable", source="case_001.nii"), False, "a" * 64, 1,
                 [("case1", "attributes unreadable")], id="record-lost-with-the-attributes"),
    pytest.param(Damage("array missing", source="other.nii"), False, "a" * 64, 1, [], id="another-items-array"),
])
def test_plan_redoes_damaged_arrays(tmp_path: Path, damage: Damage | None, recorded: bool, sha: str, tasks: int,
                                    repairs: list[tuple[str, str]]) -> None:
    p = _one_volume(tmp_path, damage=damage, recorded=recorded, sha=sha)
    assert (len(p.tasks), len(p.unchanged)) == (tasks, 1 - tasks)
    assert [(r.item_id, r.why) for r in p.repaired] == repairs
    assert ("  repair " in p.describe()) == bool(repairs)


def test_verify_findings_become_damage() -> None:
    def report(*problems: Problem) -> VerifyReport:
        return VerifyReport(store=as_location("/s"), arrays=3, chunks=0, stored_bytes=0, problems=problems,
                            leftovers=0)

    found = damage_of(report(
        Problem("volumes/case1/0", "case1", "x", "chunk unreadable", (0, 32, 0, 0)),
        Problem("volumes/case1/2", "case1", "x", "chunk files missing", (0, 8, 0, 0)),  # a level: the item's
        Problem(STACK, "", "x", "chunk files missing", (1024, 0, 0, 0)),
        Problem(STACK, "", "x", "content hash differs"),  # the missing file's doing: not the whole stack
        Problem("stacks/1x8x8_uint8", "", "x", "chunk unreadable", (3, 0, 0, 0)),
        Problem("stacks/1x8x8_uint8", "", "x", "metadata unreadable"),
    ))
    assert found == {"volumes/case1/0": Damage("chunk unreadable, chunk files missing"),
                     STACK: Damage("chunk files missing", slots=frozenset({1024})),
                     "stacks/1x8x8_uint8": Damage("chunk unreadable, metadata unreadable")}
    assert damage_of(report()) == {}
    merged = merge_damage({STACK: Damage("chunk files missing", slots=frozenset({0}))},
                          {STACK: Damage("chunk unreadable", slots=frozenset({5})), "volumes/a": Damage("x")})
    assert merged == {STACK: Damage("chunk files missing, chunk unreadable", slots=frozenset({0, 5})),
                      "volumes/a": Damage("x")}


def test_repaired_line_names_a_few_items_per_reason() -> None:
    from labzarr.convert.plan.records import Repair

    many = [Repair(f"img{i}", f"img{i}.jpg", STACK, "chunk files missing") for i in range(8)]
    assert repaired_line([*many, Repair("case4", "c4.nii", "volumes/case4", "attributes unreadable")]) == (
        "9 repaired (chunk files missing: img0, img1, img2, img3, img4 and 3 more; attributes unreadable: case4)")
    assert repaired_line([]) == ""

