"""Samplers resume mid-epoch: what a killed run took plus what the resumed run yields is the uninterrupted epoch,
each position exactly once, on the same world size or another; by sample or by whole groups; in process and
over a real gloo process group of 2 ranks x 2 DataLoader workers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from labzarr import PatchDataset

from .ddp_resume import dataset, sampler_for

ROOT = Path(__file__).resolve().parents[2]


def _epoch(ds: PatchDataset, kind: str, shard_by: str, epoch: int, replicas: int = 1) -> Counter:
    """The uninterrupted epoch's keys (over all ranks), as a multiset: a class may be drawn more than once."""
    keys: Counter = Counter()
    for r in range(replicas):
        s = sampler_for(ds, kind, shard_by, replicas, r)  # type: ignore[arg-type]
        s.set_epoch(epoch)
        keys.update(list(s))
    return keys


def _resume(ds: PatchDataset, kind: str, shard_by: str, state: dict, replicas: int) -> list[list[tuple[int, int]]]:
    out = []
    for r in range(replicas):
        s = sampler_for(ds, kind, shard_by, replicas, r)  # type: ignore[arg-type]
        s.load_state_dict(state)
        out.append(list(s))
    return out


@pytest.mark.parametrize("kind", ["stratified", "shuffle"])
@pytest.mark.parametrize("shard_by", ["sample", "group"])
@pytest.mark.parametrize(("chain", "taken"), [((2, 2), 3), ((2, 4), 5), ((2, 4, 3), 2), ((4, 1), 1), ((1, 3), 7)])
def test_killed_and_resumed_on_any_world_size_sees_the_epoch_exactly_once(
        labeled_store: Path, kind: str, shard_by: str, chain: tuple[int, ...], taken: int) -> None:
    ds = dataset(str(labeled_store))
    ds.set_epoch(3)
    full = _epoch(ds, kind, shard_by, 3, chain[0])
    seen: Counter = Counter()
    state: dict | None = None
    for replicas in chain[:-1]:  # each of these runs takes `taken` samples per rank (fewer where its share ends)
        shares = _resume(ds, kind, shard_by, state, replicas) if state else [
            list(s) for s in (sampler_for(ds, kind, shard_by, replicas, r) for r in range(replicas))]  # type: ignore[arg-type]
        counts = [min(taken, len(share)) for share in shares]
        for share, k in zip(shares, counts):
            seen.update(share[:k])
        s = sampler_for(ds, kind, shard_by, replicas, 0)  # type: ignore[arg-type]
        if state:
            s.load_state_dict(state)
        state = s.state_dict(counts)
    assert state is not None and state["epoch"] == 3
    rest = _resume(ds, kind, shard_by, state, chain[-1])
    seen.update(key for share in rest for key in share)
    assert seen == full
    assert all(e == 3 for e, *_ in seen)
    if shard_by == "sample":
        assert max(map(len, rest)) - min(map(len, rest)) <= 1


def test_group_shards_give_each_rank_whole_groups(converted_cohort: Path) -> None:
    store = converted_cohort.parents[2] / "data" / "stores" / "cohort.zarr"
    ds = PatchDataset(store, None, patches_per_item=2, kind="volume")
    positions = ds.item_positions()
    for replicas in (2, 3):
        groups = []
        for r in range(replicas):
            s = ds.shuffle_sampler(num_replicas=replicas, rank=r, shard_by="group")
            groups.append({ds.items[positions[i]].split_group for _, i, *_ in s})
        assert sum(map(len, groups)) == len(set().union(*groups))  # no group on two ranks
        assert set().union(*groups) == {i.split_group for i in ds.items}
        lengths = [len(ds.shuffle_sampler(num_replicas=replicas, rank=r, shard_by="group")) for r in range(replicas)]
        assert sum(lengths) == len(ds) and max(lengths) - min(lengths) <= 3 * 2  # one patient: <= 3 items x 2


def test_a_kill_at_the_epoch_boundary_resumes_at_the_next_epoch(labeled_store: Path) -> None:
    ds = dataset(str(labeled_store))
    shares = [ds.stratified_sampler(num_replicas=2, rank=r) for r in (0, 1)]
    state = shares[0].state_dict([len(shares[0]), len(shares[1])])
    assert (state["epoch"], state["history"]) == (1, [])
    rest = _resume(ds, "stratified", "sample", state, 4)
    # Epoch 1 never started: it is the new world's own (its length rounded to a multiple of 4, not 2).
    assert Counter(k for share in rest for k in share) == _epoch(ds, "stratified", "sample", 1, 4)


def test_a_state_from_another_sampler_or_count_is_refused(labeled_store: Path) -> None:
    ds = dataset(str(labeled_store))
    s = ds.stratified_sampler(num_replicas=2, rank=0)
    state = s.state_dict([4, 4])
    cases = [
        (ds.stratified_sampler(num_replicas=2, rank=0, seed=9), "with seed = 0; this one has seed = 9"),
        (ds.shuffle_sampler(num_replicas=2, rank=0), "with sampler = 'StratifiedSampler'; this one has sampler = "
                                                    "'ShuffleSampler'"),
        (ds.stratified_sampler(num_replicas=2, rank=0, shard_by="group"), "with shard_by = 'sample'"),
        (PatchDataset(labeled_store, (4, 4, 4), label="cell_type").stratified_sampler(), "with dataset_len = 33"),
    ]
    for other, needle in cases:
        with pytest.raises(ValueError, match="the state is of a sampler") as err:
            other.load_state_dict(state)
        assert needle in str(err.value)
    with pytest.raises(ValueError, match="consumed = 18 on rank 1; its share of epoch 0 has 17 samples"):
        s.state_dict([4, 18])
    with pytest.raises(ValueError, match="pass every rank's count as a list"):
        s.state_dict(4)
    with pytest.raises(ValueError, match="expected one per rank"):
        s.state_dict([4])


# -- a real process group --------------------------------------------------------------------------------


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(store: Path, out: Path, name: str, world: int, *, kind: str, state: Path | None = None, stop: int = -1,
         batch: int = 4, patches: bool = False) -> list[list[str]]:
    """Start `world` ranks and wait for them; each rank's log lines (with `patches`, each rank also writes
    `<name>.<rank>.patches` under `out`: key, item, origin and voxel hash of every sample)."""
    port, procs, logs = _port(), [], [out / f"{name}.{r}.log" for r in range(world)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    try:
        for r in range(world):
            cmd = [sys.executable, "-m", "tests.loaders.ddp_resume", "--store", str(store), "--sampler", kind,
                   "--shard-by", "sample", "--rank", str(r), "--world", str(world), "--port", str(port),
                   "--batch", str(batch), "--log", str(logs[r]), "--save", str(out / f"{name}.state.json"),
                   "--stop", str(stop), "--state", str(state or ""),
                   "--patches", str(out / f"{name}.{r}.patches") if patches else ""]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        for p in procs:
            output, _ = p.communicate(timeout=120)
            expected = -signal.SIGKILL if stop >= 0 else 0
            assert p.returncode == expected, output.decode(errors="replace")[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [log.read_text().splitlines() for log in logs]


def _taken(lines: list[str]) -> Counter:
    """The keys a rank's training loop took before its checkpoint (all of them, for a run without one)."""
    before = lines[: lines.index("checkpoint")] if "checkpoint" in lines else lines
    return Counter(tuple(json.loads(line)) for line in before)


def test_two_ranks_killed_at_step_k_resume_on_two_and_on_four(labeled_store: Path, tmp_path: Path) -> None:
    killed = _run(labeled_store, tmp_path, "killed", 2, kind="stratified", stop=1)
    assert all(lines.count("checkpoint") == 1 and len(lines) > lines.index("checkpoint") + 1 for lines in killed)
    before = sum((_taken(lines) for lines in killed), Counter())
    assert sum(before.values()) == 2 * 2 * 4  # 2 ranks x 2 steps x batch 4
    full = _epoch(dataset(str(labeled_store)), "stratified", "sample", 0, 2)
    for world in (2, 4):
        resumed = _run(labeled_store, tmp_path, f"resumed{world}", world, kind="stratified",
                       state=tmp_path / "killed.state.json")
        after = sum((_taken(lines) for lines in resumed), Counter())
        assert before + after == full, world


def test_a_kill_exactly_at_the_epoch_end_resumes_with_the_next_epoch(labeled_store: Path, tmp_path: Path) -> None:
    ds = dataset(str(labeled_store))
    last = -(-len(ds.shuffle_sampler(num_replicas=2, rank=0)) // 4) - 1
    killed = _run(labeled_store, tmp_path, "killed", 2, kind="shuffle", stop=last)
    assert sum((_taken(lines) for lines in killed), Counter()) == _epoch(ds, "shuffle", "sample", 0, 2)
    assert json.loads((tmp_path / "killed.state.json").read_text())["epoch"] == 1
    resumed = _run(labeled_store, tmp_path, "resumed", 4, kind="shuffle", state=tmp_path / "killed.state.json")
    assert sum((_taken(lines) for lines in resumed), Counter()) == _epoch(ds, "shuffle", "sample", 1, 4)
