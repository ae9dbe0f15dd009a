"""Read-only access to a converted store: its index of ok items, their labels and arrays.

Works on a store folder and on a zipped store (`.zip`, via `zarr.storage.ZipStore`).
Opening reads only the root's small index; arrays open on demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zarr
import zarr.storage

__all__ = ["ClassInfo", "IndexItem", "StoreView", "open_store", "open_zarr_store"]

INDEX_KEY = "labzarr"  # the root attr convert.store writes; loaders never import convert


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """A mask class of one sample: its voxel count and the rows [start, stop) of its stored locations."""

    voxels: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class IndexItem:
    """One ok item from the store's index, in manifest order.

    A sample (a delivery with ``[items] roles``) also has `roles` (role -> array path, ``image``
    is `array`), and with a mask its `classes` and the `locations` array ((N, 3) canonical x, y, z).
    """

    item_id: str
    array: str
    slot: int | None
    kind: str
    source: str
    shape: tuple[int, ...]
    dtype: str
    spacing: tuple[float, ...]
    labels: Mapping[str, str]
    roles: Mapping[str, str] = field(default_factory=dict)
    classes: Mapping[int, ClassInfo] = field(default_factory=dict)
    locations: str | None = None

    def role_array(self, role: str) -> str:
        """The array path of `role` (``image`` is the item's own array when the store has no roles)."""
        if role in self.roles:
            return self.roles[role]
        if role == "image" and not self.roles:
            return self.array
        have = ", ".join(self.roles) or "image"
        raise KeyError(f"item {self.item_id!r} has no role {role!r} (it has: {have})")


def open_zarr_store(path: Path) -> zarr.storage.StoreLike:
    """A read-only zarr store for a folder or a `.zip` file."""
    if path.is_file() and path.suffix == ".zip":
        return zarr.storage.ZipStore(path, mode="r")
    return zarr.storage.LocalStore(path, read_only=True)


def read_index(path: Path) -> tuple[dict[str, Any], tuple[IndexItem, ...]]:
    """The store's root attrs (without items) and its items; raises FileNotFoundError/ValueError."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such store; run `labzarr convert` first")
    root = zarr.open_group(open_zarr_store(path), mode="r", zarr_format=3)
    meta = dict(root.attrs.get(INDEX_KEY) or {})
    if "items" not in meta:
        raise ValueError(f"{path}: not a labzarr store (root attr {INDEX_KEY!r} missing)")
    items = tuple(
        IndexItem(item_id=d["item_id"], array=d["array"], slot=d.get("slot"), kind=d.get("kind", ""),
                  source=d.get("source", ""), shape=tuple(d["shape"]), dtype=d["dtype"],
                  spacing=tuple(d.get("spacing", ())), labels=dict(d.get("labels", {})),
                  roles=dict(d.get("roles", {})),
                  classes={int(v): ClassInfo(voxels=int(c["voxels"]), start=int(c["locations"][0]),
                                             stop=int(c["locations"][1])) for v, c in d.get("classes", {}).items()},
                  locations=d.get("locations"))
        for d in meta.pop("items")
    )
    return meta, items


@dataclass(frozen=True, slots=True)
class StoreView:
    """A read-only view of a store: `items` in manifest order, `attrs` of the root, arrays on demand."""

    path: Path
    attrs: Mapping[str, Any]
    items: Sequence[IndexItem]

    def array(self, item: IndexItem | str) -> zarr.Array:
        """Open one item's array (by IndexItem or array path) read-only."""
        name = item.array if isinstance(item, IndexItem) else item
        arr = zarr.open_array(open_zarr_store(self.path), path=name, mode="r", zarr_format=3)
        assert isinstance(arr, zarr.Array)
        return arr

    def labels(self, name: str) -> list[str]:
        """The label `name` of every item, in index order ('' where missing)."""
        return [i.labels.get(name, "") for i in self.items]


def open_store(path: Path | str) -> StoreView:
    """Open a converted store for inspection.

    Parameters
    ----------
    path:
        A store folder (``data/stores/x.zarr``) or a zipped store (``x.zarr.zip``).

    Raises
    ------
    FileNotFoundError
        No store at ``path``.
    ValueError
        ``path`` is a zarr group but not a labzarr store.
    """
    p = Path(path)
    attrs, items = read_index(p)
    return StoreView(path=p, attrs=attrs, items=items)
