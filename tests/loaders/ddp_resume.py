"""One rank of the distributed resume test (tests/loaders/test_resume.py): `python -m tests.loaders.ddp_resume ...`.

Joins a gloo process group on 127.0.0.1, iterates its sampler's share of an epoch through a DataLoader with
two workers, and logs every key its training loop takes, one JSON line each. With `--stop K`, after step K
every rank takes the sampler's state together (a collective), rank 0 saves it, and, as a crash would, the
rank goes on for two more steps (logged after a `checkpoint` line) and kills itself with SIGKILL. With
`--patches PATH`, each sample's key, item, origin and a hash of its voxels go to PATH too, one JSON line each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist
from torch.utils.data import DataLoader

from labzarr import PatchDataset
from labzarr.loaders import ShardBy

PATCH, PER_ITEM = (4, 4, 4), 3


class KeyedDataset(PatchDataset):
    """A PatchDataset whose samples carry their sampler key, so the log says which position was taken."""

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> list[dict[str, object]]:
        samples = super().__getitems__(keys)
        for key, sample in zip(keys, samples):
            sample["key"] = list(key) if isinstance(key, tuple) else [self.epoch, key]
        return samples


def dataset(store: str) -> KeyedDataset:
    """The dataset every rank (and the test's own reference sampler) uses."""
    return KeyedDataset(store, PATCH, patches_per_item=PER_ITEM, label="cell_type")


def sampler_for(ds: PatchDataset, kind: str, shard_by: ShardBy, replicas: int, rank: int):  # noqa: ANN201
    """The sampler of one rank: `stratified` or `shuffle`."""
    if kind == "stratified":
        return ds.stratified_sampler(num_replicas=replicas, rank=rank, shard_by=shard_by)
    return ds.shuffle_sampler(num_replicas=replicas, rank=rank, shard_by=shard_by)


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("store", "sampler", "shard-by", "log", "save", "state", "patches"):
        p.add_argument(f"--{name}", default="")
    for name in ("rank", "world", "port", "batch", "epoch"):
        p.add_argument(f"--{name}", type=int, default=0)
    p.add_argument("--stop", type=int, default=-1)
    a = p.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=60))
    ds = dataset(a.store)
    sampler = sampler_for(ds, a.sampler, a.shard_by, a.world, a.rank)
    if a.state:
        sampler.load_state_dict(json.loads(Path(a.state).read_text()))
    else:
        sampler.set_epoch(a.epoch)
    loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=2, collate_fn=list)
    consumed = 0
    with open(a.log, "w") as log, open(a.patches or os.devnull, "w") as patches:
        for step, batch in enumerate(loader):
            for sample in batch:
                log.write(json.dumps(sample["key"]) + "\n")
                voxels = hashlib.sha256(sample["image"].numpy().tobytes()).hexdigest()
                patches.write(json.dumps([sample["key"], sample["item_id"], list(sample["origin"]), voxels]) + "\n")
            consumed += len(batch)
            log.flush()
            if step == a.stop:
                state = sampler.state_dict(consumed)
                if a.rank == 0:
                    Path(a.save + ".tmp").write_text(json.dumps(state))
                    os.replace(a.save + ".tmp", a.save)
                dist.barrier()  # the checkpoint is on disk before any rank goes on
                log.write("checkpoint\n")
                log.flush()
            if a.stop >= 0 and step == a.stop + 2:
                os.kill(os.getpid(), signal.SIGKILL)
        if a.stop >= 0:  # the epoch ended within two steps of the checkpoint: the crash comes now
            log.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
