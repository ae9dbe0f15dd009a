"""`labzarr inspect`: counts, arrays, shapes, bytes on disk and compression ratio of a store."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from labzarr.store import StoreView, open_transport
from labzarr.store.format.items import IndexItems

__all__ = ["describe_store"]


def _stored(sizes: dict[str, int], prefix: str) -> int:
    return sum(n for key, n in sizes.items() if key.startswith(prefix))


def _stored_by_array(sizes: dict[str, int], arrays: set[str]) -> dict[str, int]:
    """`_stored(sizes, f"{a}/")` of each of `arrays`, in one pass over the keys (a key counts for every array its
    path lies under): a store of many arrays is not one pass over its files per array."""
    out = dict.fromkeys(arrays, 0)
    for key, n in sizes.items():
        parts = key.split("/")
        for k in range(1, len(parts)):
            prefix = "/".join(parts[:k])
            if prefix in out:
                out[prefix] += n
    return out


def describe_store(view: StoreView) -> str:
    """A table of the store's ok items with their stored and decoded sizes."""
    lines = [f"store:     {view.path}", f"delivery:  {view.attrs.get('delivery', '?')}",
             f"version:   labzarr {view.attrs.get('tool_version', '?')}, "
             f"format {view.attrs.get('format_version', '?')}",
             f"items:     {len(view.items)} ok", "",
             f"{'item_id':<16} {'array':<28} {'shape':<18} {'dtype':<8} {'stored':>10} {'ratio':>6}  labels"]
    sizes = open_transport(view.path, view.storage_options).sizes()  # one listing: a folder, a zip or a URL
    items = IndexItems.of(view.items)  # read from the index's columns: no item built, whatever the store's size
    ids, arrays, slots = items.values("item_id"), items.values("array"), items.slots().tolist()
    on_disk = _stored_by_array(sizes, set(arrays))
    codes, dtypes = items.text("dtype")
    dtype_of = [*(d or "" for d in dtypes), ""]  # code -1 (None) picks the "" at the end
    itemsize: dict[int, int] = {}
    lengths, values = items.ragged("shape")
    flat = values.tolist()
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    labels = [(name, *items.label(name)) for name in items.label_names]
    label_codes = [(name, c.tolist(), distinct) for name, c, distinct in labels]
    total_raw = 0
    total_disk = sum(on_disk.values())
    for n, (item_id, array, slot, code) in enumerate(zip(ids, arrays, slots, codes.tolist())):
        shape = flat[bounds[n]:bounds[n + 1]]
        if code not in itemsize:
            itemsize[code] = np.dtype(dtype_of[code]).itemsize
        raw = int(np.prod(shape)) * itemsize[code]
        total_raw += raw
        # A stack's images share shard files: a 2D item shows its slot; the stack's bytes are listed below.
        disk = on_disk[array] if slot < 0 else 0
        ratio = f"{raw / disk:.2f}" if disk else "-"
        where = array if slot < 0 else f"{array}[{slot}]"
        stored = f"{disk:,}" if disk else "-"
        tags = ", ".join(f"{k}={distinct[c[n]]}" for k, c, distinct in label_codes if c[n] >= 0)
        lines.append(f"{item_id:<16} {where:<28} {'x'.join(map(str, shape)):<18} {dtype_of[code]:<8} "
                     f"{stored:>10} {ratio:>6}  {tags}".rstrip())
    images = Counter(a for a, slot in zip(arrays, slots) if slot >= 0)
    if images:
        lines += ["", f"{'stack':<36} {'images':>8} {'shard files':>12} {'stored':>12}"]
        for name, n in sorted(images.items()):
            files = sum(1 for key in sizes if key.startswith(f"{name}/c/"))
            lines.append(f"{name:<36} {n:>8} {files:>12} {on_disk[name]:>12,}")
    whole = os.path.getsize(view.path) if isinstance(view.path, Path) and view.path.is_file() else sum(sizes.values())
    lines += ["", f"decoded {total_raw:,} B, arrays on disk {total_disk:,} B"
              + (f" (ratio {total_raw / total_disk:.2f})" if total_disk else "") + f", store total {whole:,} B"]
    return os.linesep.join(lines)
