"""`labzarr verify` catches every flipped byte and every missing chunk file, and passes an intact store."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import zarr

from labzarr.convert import execute, load_spec
from labzarr.convert.cli import main
from labzarr.convert.demo import write_spec
from labzarr.convert.qc.verify import verify_store


@pytest.fixture
def store(converted_demo, tmp_path: Path) -> Path:
    """A private copy of the converted demo store, free to damage."""
    d, _ = converted_demo
    return Path(shutil.copytree(d.store, tmp_path / "demo.zarr"))


def chunk_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "volumes").rglob("*") if p.is_file() and "c" in p.relative_to(store).parts)


def inner_chunks(store: Path) -> int:
    """Chunks of every volume array (several per shard file)."""
    arrays = [zarr.open_array(meta.parent, mode="r") for meta in (store / "volumes").glob("*/0/zarr.json")]
    return sum(int(np.prod([-(-n // c) for n, c in zip(a.shape, a.chunks)])) for a in arrays)


def test_intact_store_passes(store: Path) -> None:
    report = verify_store(store)
    assert report.ok, report.describe()
    # level 0 of each image, and the two tables: the index and the statistics
    assert report.arrays == len(list((store / "volumes").glob("*/0/zarr.json"))) + 2
    assert report.chunks == inner_chunks(store) + 2 > len(chunk_files(store))  # volumes are sharded; a table's one


def test_every_flipped_byte_is_caught(store: Path) -> None:
    rng = random.Random(8)
    files = chunk_files(store)
    assert len(files) >= 30
    located = 0
    for path in files:
        blob = bytearray(path.read_bytes())
        pos = rng.randrange(len(blob))
        blob[pos] ^= 1 << rng.randrange(8)
        original = path.read_bytes()
        path.write_bytes(bytes(blob))
        report = verify_store(store)
        array = "/".join(path.relative_to(store).parts[:3])  # volumes/<item>/0
        assert report.damaged() == [array], f"{path} byte {pos}: {report.describe()}"
        # a shard that fails to read whole is read again chunk by chunk: each problem names one inner chunk
        chunks = zarr.open_array(store / array, mode="r").chunks
        for problem in report.problems:
            if "unreadable" in problem.what:
                extents = [int(b) - int(a) for a, b in re.findall(r"(\d+):(\d+)", problem.what.split(" unreadable")[0])]
                assert len(extents) == len(chunks) and all(e <= c for e, c in zip(extents, chunks)), problem.what
                located += 1
        path.write_bytes(original)
    assert located >= len(files) // 2  # most flips land in chunk data, which crc32c pins to its chunk
    assert verify_store(store).ok


def test_every_missing_chunk_file_is_caught(store: Path) -> None:
    files = chunk_files(store)
    for path in files:
        original = path.read_bytes()
        path.unlink()
        report = verify_store(store)
        array = "/".join(path.relative_to(store).parts[:3])
        assert report.damaged() == [array], report.describe()
        assert any("missing" in p.what for p in report.problems)
        path.write_bytes(original)


def test_all_fill_chunks_are_written_and_a_missing_one_is_caught(tmp_path: Path, dask_client) -> None:
    """A shard of zeros reads back as zeros when its file is gone: only the file check can see it."""
    raw = tmp_path / "raw"
    raw.mkdir()
    data = np.zeros((300, 20, 20), np.int16)
    data[256:] = 7  # x < 256, the first shard (8 chunks of 32), is all fill value
    (raw / "case_001.nii").write_bytes(bytes(nib.Nifti1Image(data, np.eye(4)).to_bytes()))
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr", labels=False)
    execute(load_spec(spec, root=tmp_path), dask_client)
    store, name = tmp_path / "s.zarr", "volumes/case1/0"
    assert verify_store(store).ok
    zero_chunk = store / name / "c" / "0" / "0" / "0" / "0"
    assert zero_chunk.is_file()  # written although all fill value
    zero_chunk.unlink()
    assert not zarr.open_array(store / name, mode="r")[0, :256].any()  # zarr hides the loss
    report = verify_store(store)
    assert report.damaged() == [name] and "c/0/0/0/0 missing" in report.problems[0].what


def test_index_entry_without_array_and_unsealed_array(store: Path) -> None:
    shutil.rmtree(store / "volumes" / "case2")
    meta_path = store / "volumes" / "case3" / "0" / "zarr.json"
    meta = json.loads(meta_path.read_bytes())
    del meta["attributes"]["complete"]
    meta_path.write_text(json.dumps(meta))
    report = verify_store(store)
    assert report.damaged() == ["volumes/case2/0", "volumes/case3/0"]
    assert "never finished" in report.describe()


def test_cli_exit_codes_and_table(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(store)]) == 0
    assert "ok: every chunk present and intact" in capsys.readouterr().out
    victim = chunk_files(store)[0]
    blob = bytearray(victim.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    victim.write_bytes(bytes(blob))
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED: 1 item(s)" in out and "/".join(victim.relative_to(store).parts[:3]) in out
    assert main(["verify", str(tmp_path / "nope.zarr")]) == 2
    assert "hint:" in capsys.readouterr().err


def test_stacks_flipped_bytes_and_missing_shards_are_caught(converted_images, tmp_path: Path) -> None:
    d, _, _ = converted_images
    store = Path(shutil.copytree(d.store, tmp_path / "images.zarr"))
    assert verify_store(store).ok
    shards = sorted(p for p in (store / "stacks").rglob("*") if p.is_file() and p.name != "zarr.json")
    assert len(shards) >= 4
    rng = random.Random(5)
    for path in shards:
        original = path.read_bytes()
        blob = bytearray(original)
        blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(blob))
        assert verify_store(store).damaged() == ["/".join(path.relative_to(store).parts[:2])], path
        path.unlink()
        report = verify_store(store)
        assert report.damaged() == ["/".join(path.relative_to(store).parts[:2])] and "missing" in report.describe()
        path.write_bytes(original)
    assert verify_store(store).ok


def _zip(folder: Path, dest: Path) -> Path:
    from ..loaders.conftest import zip_store

    return zip_store(folder, dest)


def test_a_zipped_store_is_verified_as_its_folder_is(store: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    intact = verify_store(_zip(store, tmp_path / "intact.zarr.zip"))
    folder = verify_store(store)
    assert intact.ok and (intact.arrays, intact.chunks, intact.stored_bytes) == (folder.arrays, folder.chunks,
                                                                                 folder.stored_bytes)
    assert main(["verify", str(tmp_path / "intact.zarr.zip")]) == 0
    assert "every chunk present and intact" in capsys.readouterr().out

    shard = chunk_files(store)[0]
    lost = "/".join(shard.relative_to(store).parts[:3])  # volumes/<item>/0
    blob = bytearray(shard.read_bytes())
    blob[len(blob) // 3] ^= 0x40
    shard.write_bytes(bytes(blob))
    second = chunk_files(store)[-1]
    second.unlink()
    report = verify_store(_zip(store, tmp_path / "damaged.zarr.zip"))
    assert not report.ok
    kinds = {(p.array, p.kind) for p in report.problems}
    assert (lost, "chunk unreadable") in kinds
    assert ("/".join(second.relative_to(store).parts[:3]), "chunk files missing") in kinds
    assert main(["verify", str(tmp_path / "damaged.zarr.zip")]) == 1


def test_repair_refuses_a_zip_and_says_how(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zipped = _zip(store, tmp_path / "s.zarr.zip")
    assert main(["verify", "--repair", str(zipped)]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "zip that folder again" in err
