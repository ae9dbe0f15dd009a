"""The store's index at scale: opening a store of 10k, 100k and 1M items, format 4 (tables) vs format 3 (JSON).

Each store is written through the real write path (`write_index`, `write_statistics`) from generated index items
shaped like a delivery of small 2D images (a stack slot, one label, a group, one channel's statistics with a
histogram of 200 bins). Each measurement runs in a fresh process: seconds, and MB the process grew (RSS after
minus before; peak: its high-water mark minus the RSS before). The format-3 baseline is the JSON index attr of
the same items, `IndexItem.encode` per item, decoded as format 3 did (`json.loads` of the root `zarr.json`, then
`IndexItem.decode` per entry): what its `PatchDataset` construction spent most of its time on, so the baseline
is a lower bound of format 3's construction. It is measured up to `_JSON_MAX` items (beyond, it takes minutes
and gigabytes). Store bytes per item: the index's table (or the root `zarr.json`) and the statistics table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from common import Result

from labzarr.convert.write.arrays import write_index, write_statistics
from labzarr.store import FORMAT_VERSION, ChannelStats, Folder, Histogram, IndexItem, ItemStats, StoreIndex

NAME = "index at scale: PatchDataset construction, format 4 tables vs format 3 JSON"

SIZES = (10_000, 100_000, 1_000_000)
_JSON_MAX = 100_000
_REF_MAX = 100_000  # the per-item merge (`dataset_stats` of built records): linear in Python, minutes at 1M
_PER_STACK = 100_000

_PROBE = r"""
import json, os, sys, time
def kb(field):
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field))
what, store = sys.argv[1], sys.argv[2]
from labzarr import PatchDataset
from labzarr.store import IndexItem
r0 = kb("VmRSS")
t = time.perf_counter()
if what == "dataset":
    kept = PatchDataset(store, (32, 32), label="cell_type")
    n = len(kept.items)
elif what == "stats":
    ds = PatchDataset(store, (32, 32), label="cell_type")
    r0, t = kb("VmRSS"), time.perf_counter()
    kept = ds.stats()
    n = kept.items
elif what == "state":
    ds = PatchDataset(store, (32, 32), label="cell_type")
    sampler = ds.stratified_sampler()
    r0, t = kb("VmRSS"), time.perf_counter()
    kept = sampler.state_dict(0)
    n = len(kept["selection"]["keys"])
elif what == "state_entries":
    from labzarr.loaders.resume import entries_hash
    ds = PatchDataset(store, (32, 32), label="cell_type")
    r0, t = kb("VmRSS"), time.perf_counter()
    kept = (entries_hash(ds.store_items), [i.digest()[:16] for i in ds.items])
    n = len(kept[1])
elif what == "stats_items":
    from labzarr.store import dataset_stats, read_statistics
    ds = PatchDataset(store, (32, 32), label="cell_type")
    r0, t = kb("VmRSS"), time.perf_counter()
    kept = dataset_stats(ds.items, read_statistics(store))
    n = kept.items
else:
    with open(os.path.join(store, "zarr.json"), "rb") as f:
        kept = tuple(IndexItem.decode(d) for d in json.loads(f.read())["attributes"]["labzarr"]["items"])
    n = len(kept)
s = time.perf_counter() - t
print(json.dumps({"s": s, "mb": (kb("VmRSS") - r0) / 1024, "peak_mb": (kb("VmHWM") - r0) / 1024, "n": n}))
"""


def _items(n: int) -> list[IndexItem]:
    moments = [ItemStats(channels=(ChannelStats(count=4096, mean=100.0 + k, m2=1.5e6 + k, min=0.0, max=255.0,
                                                integral=True),)) for k in range(7)]
    return [IndexItem(item_id=f"img{i:07d}", array=f"stacks/1x64x64_uint8~{i // _PER_STACK}", slot=i % _PER_STACK,
                      kind="jpeg", source=f"d{i // 1000:04d}/img{i:07d}.jpg", shape=(1, 64, 64), dtype="uint8",
                      spacing=(), labels={"cell_type": ("a", "b", "c")[i % 3]}, group=f"img{i:07d}",
                      stats=moments[i % 7]) for i in range(n)]


def _records(items: list[IndexItem]) -> dict[str, ItemStats]:
    """An 8-bit image's statistics per item, each with its own counts in 200 bins (histograms compress as real
    ones do, not as copies of one)."""
    rng = np.random.default_rng(0)
    bins = np.sort(rng.choice(np.arange(0x3F80, 0x4380), 200, replace=False))  # ordinals of values 1..255
    counts = rng.integers(1, 40, (len(items), 200))
    return {i.key: ItemStats(channels=(ChannelStats(count=int(counts[k].sum()), mean=1.0 + k % 97, m2=1.0 + k,
                                                    min=1.0, max=255.0, histogram=Histogram(bins, counts[k]),
                                                    integral=True),))
            for k, i in enumerate(items)}


def _store(workdir: Path, n: int) -> Path:
    store = workdir / f"v{FORMAT_VERSION}-{n}.zarr"
    if not (store / "zarr.json").exists():
        items = _items(n)
        write_statistics(Folder(store), _records(items))
        write_index(Folder(store), StoreIndex(delivery="scale", spec_sha256="", manifest_sha256="",
                                              tool_version="bench", items=items))
    return store


def _json_store(workdir: Path, n: int) -> Path:
    store = workdir / f"v3-json-{n}.zarr"
    if not (store / "zarr.json").exists():
        store.mkdir(parents=True, exist_ok=True)
        value = {"delivery": "scale", "format_version": 3, "items": [i.encode() for i in _items(n)]}
        doc = {"zarr_format": 3, "node_type": "group", "attributes": {"labzarr": value}}
        (store / "zarr.json").write_text(json.dumps(doc))
    return store


def _probe(what: str, store: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _PROBE, what, str(store)], capture_output=True, text=True,
                         check=True, timeout=1800)
    return dict(json.loads(out.stdout.splitlines()[-1]))


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def run(workdir: Path) -> list[Result]:
    workdir = workdir / "index_scale"
    rows: list[Result] = []
    cores = os.cpu_count()
    for n in SIZES:
        group = f"{n:,} items ({cores} cores, shared)"
        if n <= _JSON_MAX:
            old = _probe("json", _json_store(workdir, n))
            size = (_json_store(workdir, n) / "zarr.json").stat().st_size
            rows += [Result("format 3 JSON index: decode (s)", old["s"], "s", higher_is_better=False, baseline=True,
                            group=group, note=f"+{old['mb']:.0f} MB, peak +{old['peak_mb']:.0f} MB; "
                                              f"{size / n:.0f} B/item")]
        new = _probe("dataset", _store(workdir, n))
        index_b = _bytes(_store(workdir, n) / "index") + (_store(workdir, n) / "zarr.json").stat().st_size
        stats_b = _bytes(_store(workdir, n) / "statistics")
        rows += [Result("format 4 tables: PatchDataset(store) (s)", new["s"], "s", higher_is_better=False,
                        group=group, note=f"+{new['mb']:.0f} MB, peak +{new['peak_mb']:.0f} MB; index "
                                          f"{index_b / n:.0f} B/item, statistics {stats_b / n:.0f} B/item"),
                 Result("format 4 tables: PatchDataset(store) grew (MB)", new["mb"], "MB", higher_is_better=False,
                        group=group, note="target: 1M items in <= 2 s and <= 300 MB")]
        rows += _stats_rows(_store(workdir, n), n, f"{n:,} items: ds.stats(), every item ({cores} cores, shared)")
        rows += _state_rows(_store(workdir, n), n, f"{n:,} items: a sampler's first state_dict ({cores} cores, shared)")
    return rows


def _stats_rows(store: Path, n: int, group: str) -> list[Result]:
    """`ds.stats()` (the merge over the tables' columns) against the per-item merge of built records."""
    rows: list[Result] = []
    if n <= _REF_MAX:
        ref = _probe("stats_items", store)
        rows.append(Result("per-item merge: dataset_stats(records) (s)", ref["s"], "s", higher_is_better=False,
                           baseline=True, group=group,
                           note=f"+{ref['mb']:.0f} MB, peak +{ref['peak_mb']:.0f} MB"))
    merged = _probe("stats", store)
    rows.append(Result("columns: ds.stats() (s)", merged["s"], "s", higher_is_better=False, group=group,
                       note=f"+{merged['mb']:.0f} MB, peak +{merged['peak_mb']:.0f} MB; target 1M in a few s"))
    return rows


def _state_rows(store: Path, n: int, group: str) -> list[Result]:
    """A sampler's first `state_dict` (the index's hash and the selection's digests, read from the tables) against
    what it computed before: a hash over every entry and each selected item's digest, items built."""
    rows: list[Result] = []
    if n <= _REF_MAX:
        ref = _probe("state_entries", store)
        rows.append(Result("per entry: hash and digests of built items (s)", ref["s"], "s", higher_is_better=False,
                           baseline=True, group=group, note=f"+{ref['mb']:.0f} MB, peak +{ref['peak_mb']:.0f} MB"))
    state = _probe("state", store)
    rows.append(Result("tables: sampler.state_dict(0) (s)", state["s"], "s", higher_is_better=False, group=group,
                       note=f"+{state['mb']:.0f} MB, peak +{state['peak_mb']:.0f} MB"))
    return rows
