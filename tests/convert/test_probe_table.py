"""Probes kept on disk until the plan (run/probe_table.py) against the dict of probes they replace: the same keys,
equal probes, and the same plan; and the plan's slim probes (`_kept`) plan alike."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest

from labzarr.convert import load_spec
from labzarr.convert.demo import write_demo, write_spec
from labzarr.convert.discover import discover, walk
from labzarr.convert.plan.build import plan
from labzarr.convert.probe import Probe, probe_files
from labzarr.convert.run.probe_table import ProbeTable
from labzarr.convert.survey import readable
from tests.scale_data import tiny_jpegs


def _probed(tmp_path: Path, raw: Path) -> tuple[object, list, list[Probe]]:
    spec = load_spec(write_spec(tmp_path / "manifests" / "d" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr",
                                labels=False))
    found = discover(walk(spec.delivery.raw), spec.items)
    todo = [(c.rel, str(c.entry.path)) for c in found if readable(c)]
    # As the driver receives them: unpickled from the workers' messages, a batch at a time.
    probes = [p for i in range(0, len(todo), 7) for p in pickle.loads(pickle.dumps(probe_files(todo[i:i + 7])))]
    return spec, found, probes


@pytest.mark.parametrize("delivery", ["demo", "jpegs"])
def test_a_probe_table_is_the_dict_and_plans_alike(tmp_path: Path, delivery: str) -> None:
    raw = write_demo(tmp_path / "raw") if delivery == "demo" else tiny_jpegs(tmp_path / "raw", 30)
    spec, found, probes = _probed(tmp_path, raw)
    plain = {p.rel: p for p in probes}
    with ProbeTable(tmp_path) as table:
        for i in range(0, len(probes), 5):
            table.add(probes[i:i + 5])
        assert len(table) == len(plain) > 10 and list(table) == list(plain)
        assert dict(table) == plain and "no/such/file" not in table and table.get("no/such/file") is None
        shuffled = list(plain)
        random.Random(1).shuffle(shuffled)  # lookups out of order: across batches, none the one after the last
        assert all(table[rel] == plain[rel] for rel in shuffled)
        with pytest.raises(KeyError):
            table["no/such/file"]
        assert plan(spec, found, table) == plan(spec, found, plain)
    assert list(tmp_path.iterdir())  # the table's file is unnamed: nothing of it left in the folder
    assert not [p for p in tmp_path.iterdir() if p.is_file()]


def test_the_plans_slim_probes_keep_what_it_reads_and_share_planes(tmp_path: Path) -> None:
    from labzarr.convert.plan.build import _kept

    _, _, probes = _probed(tmp_path, tiny_jpegs(tmp_path / "raw", 20))
    planes: dict = {}
    kept = [_kept(p, p.rel, planes) for p in probes]
    assert [(k.rel, k.size, k.sha256, k.kind, k.plane) for k in kept] == \
        [(p.rel, p.size, p.sha256, p.kind, p.plane) for p in probes]
    assert len({id(k.plane) for k in kept}) == 1 and len({id(p.plane) for p in probes}) == len(probes)


def test_a_batch_kept_as_it_came_from_where_it_was_probed_is_the_same_table(tmp_path: Path) -> None:
    from labzarr.convert.probe import probe_batch, probe_with

    raw = write_demo(tmp_path / "raw")
    spec = load_spec(write_spec(tmp_path / "manifests" / "d" / "delivery.toml", raw=raw, store=tmp_path / "s.zarr",
                                labels=False))
    found = discover(walk(spec.delivery.raw), spec.items)
    todo = [(c.rel, str(c.entry.path)) for c in found if readable(c)]
    batches = [todo[i:i + 7] for i in range(0, len(todo), 7)]
    # As a worker returns it: sent in a message, unpickled by the driver (the probes inside stay pickled).
    probed = [pickle.loads(pickle.dumps(probe_batch(b, plugins=[]))) for b in batches]
    plain = {p.rel: p for b in batches for p in probe_with(b, plugins=[])}
    assert [rel for p in probed for rel in p.rels] == list(plain)
    assert sum(p.size for p in probed) == sum(p.size for p in plain.values()) > 0
    assert [q for p in probed for q in p.probes()] == list(plain.values())
    with ProbeTable(tmp_path) as table:
        for p in probed:
            table.add_batch(p)
        table.add_batch(probe_batch([], plugins=[]))  # an empty batch adds nothing
        assert list(table) == list(plain) and dict(table) == plain
        assert plan(spec, found, table) == plan(spec, found, plain)
