"""`labzarr inspect`: counts, arrays, shapes, bytes on disk and compression ratio of a store."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from labzarr.loaders.store import StoreView

__all__ = ["describe_store"]


def _disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _url_sizes(view: StoreView) -> dict[str, int]:
    """Bytes per key under a URL store, from one listing."""
    import fsspec  # only URL stores need it

    url = str(view.path)
    protocol, _, root = url.partition("://")
    fs = fsspec.filesystem(protocol, **{"use_listings_cache": False, **view.storage_options})
    found = fs.find(root, detail=True)
    return {name[len(root) + 1:]: int(info.get("size") or 0) for name, info in found.items()}


def _stored(sizes: dict[str, int], prefix: str) -> int:
    return sum(n for key, n in sizes.items() if key.startswith(prefix))


def describe_store(view: StoreView) -> str:
    """A table of the store's ok items with their stored and decoded sizes."""
    lines = [f"store:     {view.path}", f"delivery:  {view.attrs.get('delivery', '?')}",
             f"version:   labzarr {view.attrs.get('tool_version', '?')}, format {view.attrs.get('format_version', '?')}",
             f"items:     {len(view.items)} ok", "",
             f"{'item_id':<16} {'array':<28} {'shape':<18} {'dtype':<8} {'stored':>10} {'ratio':>6}  labels"]
    sizes = _url_sizes(view) if isinstance(view.path, str) else None
    if sizes is not None:
        on_disk = {a: _stored(sizes, f"{a}/") for a in {i.array for i in view.items}}
    else:
        assert isinstance(view.path, Path)
        on_disk = {a: _disk_bytes(view.path / a) if view.path.is_dir() else 0 for a in {i.array for i in view.items}}
    total_raw = 0
    total_disk = sum(on_disk.values())
    for item in view.items:
        raw = int(np.prod(item.shape)) * np.dtype(item.dtype).itemsize
        total_raw += raw
        # A stack's images share shard files: a 2D item shows its slot; the stack's bytes are listed below.
        disk = on_disk[item.array] if item.slot is None else 0
        ratio = f"{raw / disk:.2f}" if disk else "-"
        where = item.array if item.slot is None else f"{item.array}[{item.slot}]"
        stored = f"{disk:,}" if disk else "-"
        lines.append(f"{item.item_id:<16} {where:<28} {'x'.join(map(str, item.shape)):<18} {item.dtype:<8} "
                     f"{stored:>10} {ratio:>6}  {', '.join(f'{k}={v}' for k, v in item.labels.items())}".rstrip())
    images = Counter(i.array for i in view.items if i.slot is not None)
    if images:
        lines += ["", f"{'stack':<36} {'images':>8} {'shard files':>12} {'stored':>12}"]
        for name, n in sorted(images.items()):
            if sizes is not None:
                files = sum(1 for key in sizes if key.startswith(f"{name}/c/"))
            else:
                shard_dir = Path(view.path) / name / "c"
                files = sum(1 for f in shard_dir.rglob("*") if f.is_file()) if shard_dir.is_dir() else 0
            lines.append(f"{name:<36} {n:>8} {files:>12} {on_disk[name]:>12,}")
    whole = sum(sizes.values()) if sizes is not None else _disk_bytes(Path(view.path))
    lines += ["", f"decoded {total_raw:,} B, arrays on disk {total_disk:,} B"
              + (f" (ratio {total_raw / total_disk:.2f})" if total_disk else "") + f", store total {whole:,} B"]
    return os.linesep.join(lines)
