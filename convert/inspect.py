"""`labzarr inspect`: counts, arrays, shapes, bytes on disk and compression ratio of a store."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from labzarr.loaders.store import StoreView

__all__ = ["describe_store"]


def _disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def describe_store(view: StoreView) -> str:
    """A table of the store's ok items with their stored and decoded sizes."""
    lines = [f"store:     {view.path}", f"delivery:  {view.attrs.get('delivery', '?')}",
             f"version:   labzarr {view.attrs.get('tool_version', '?')}, format {view.attrs.get('format_version', '?')}",
             f"items:     {len(view.items)} ok", "",
             f"{'item_id':<16} {'array':<28} {'shape':<18} {'dtype':<8} {'stored':>10} {'ratio':>6}  labels"]
    total_raw = total_disk = 0
    for item in view.items:
        raw = int(np.prod(item.shape)) * np.dtype(item.dtype).itemsize
        disk = _disk_bytes(view.path / item.array) if view.path.is_dir() else 0
        total_raw += raw
        total_disk += disk
        ratio = f"{raw / disk:.2f}" if disk else "-"
        lines.append(f"{item.item_id:<16} {item.array:<28} {'x'.join(map(str, item.shape)):<18} {item.dtype:<8} "
                     f"{disk:>10,} {ratio:>6}  {', '.join(f'{k}={v}' for k, v in item.labels.items())}".rstrip())
    whole = _disk_bytes(view.path)
    lines += ["", f"decoded {total_raw:,} B, arrays on disk {total_disk:,} B"
              + (f" (ratio {total_raw / total_disk:.2f})" if total_disk else "") + f", store total {whole:,} B"]
    return os.linesep.join(lines)
