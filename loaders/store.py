"""Read-only access to a converted store: its index of ok items, their labels and arrays.

Works on a store folder, on a zipped store (a zip of the folder's contents, via
`zarr.storage.ZipStore`) and on a store at an fsspec URL (`s3://bucket/x.zarr`, via
`zarr.storage.FsspecStore`; credentials and endpoint from the standard environment or
`storage_options`). Opening reads only the root's small index; arrays open on demand.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
import zarr.storage

__all__ = ["ClassInfo", "IndexItem", "StoreView", "class_names", "is_url", "open_store", "open_zarr_store",
           "store_location"]

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


def is_url(text: str) -> bool:
    """True for an fsspec URL with a protocol other than `file` (`s3://bucket/x.zarr`)."""
    head, sep, _ = text.partition("://")
    return bool(sep) and head.isidentifier() and head != "file"


def store_location(store: Path | str) -> Path | str:
    """A URL (kept as text, trailing `/` dropped) or a local path."""
    if isinstance(store, str) and is_url(store):
        return store.rstrip("/")
    return Path(str(store).removeprefix("file://"))


def open_zarr_store(path: Path | str, storage_options: Mapping[str, Any] | None = None) -> zarr.storage.StoreLike:
    """A read-only zarr store for a folder, a zip file (recognised by content, whatever its name) or a URL."""
    if isinstance(path, str):
        # Listings are not cached: a store can be rewritten by a conversion while a reader lives.
        return zarr.storage.FsspecStore.from_url(path, read_only=True,
                                                 storage_options={"use_listings_cache": False,
                                                                  **(storage_options or {})})
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise ValueError(f"{path}: a file but not a zip; a store is a folder or a zip of one")
        return zarr.storage.ZipStore(path, mode="r")
    return zarr.storage.LocalStore(path, read_only=True)


def class_names(values: Iterable[str]) -> tuple[str, ...]:
    """The distinct label values in a stable order: numerically when every value is a number, else by text."""
    distinct = set(values)
    try:
        return tuple(sorted(distinct, key=lambda v: (float(v), v)))
    except ValueError:
        return tuple(sorted(distinct))


def read_index(path: Path | str, storage_options: Mapping[str, Any] | None = None
               ) -> tuple[dict[str, Any], tuple[IndexItem, ...]]:
    """The store's root attrs (without items) and its items; raises FileNotFoundError/ValueError, and
    ConnectionError for a URL store that cannot be read (endpoint, credentials)."""
    if isinstance(path, str):
        root = _open_url_root(path, storage_options)
    elif not path.exists():
        raise FileNotFoundError(f"{path}: no such store; run `labzarr convert` first")
    else:
        root = zarr.open_group(open_zarr_store(path), mode="r", zarr_format=3)
    meta: dict[str, Any] = dict(root.attrs.get(INDEX_KEY) or {})  # type: ignore[arg-type]  # JSON from the store
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


def _open_url_root(url: str, storage_options: Mapping[str, Any] | None) -> zarr.Group:
    try:
        return zarr.open_group(open_zarr_store(url, storage_options), mode="r", zarr_format=3)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{url}: no such store ({exc}); run `labzarr convert` first") from exc
    except PermissionError as exc:
        raise ConnectionError(f"{url}: access denied ({exc}); check the credentials") from exc
    except (ValueError, ImportError):
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's connection errors share no base class with OSError
        raise ConnectionError(f"{url}: cannot read the store ({type(exc).__name__}: {exc}); check the endpoint "
                              "(AWS_ENDPOINT_URL or storage_options) and the network") from exc


@dataclass(frozen=True, slots=True)
class StoreView:
    """A read-only view of a store: `items` in manifest order, `attrs` of the root, arrays on demand."""

    path: Path | str  # a folder or zip, or a URL
    attrs: Mapping[str, Any]
    items: Sequence[IndexItem]
    storage_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec's, for a URL store

    def array(self, item: IndexItem | str) -> zarr.Array[Any]:
        """Open one item's array (by IndexItem or array path) read-only."""
        name = item.array if isinstance(item, IndexItem) else item
        arr = zarr.open_array(open_zarr_store(self.path, self.storage_options), path=name, mode="r", zarr_format=3)
        assert isinstance(arr, zarr.Array)
        return arr

    def read(self, item: IndexItem | str) -> npt.NDArray[Any]:
        """One item's voxels, `(C, *spatial)` (its own image, for an item of a 2D stack); by IndexItem or item_id."""
        if isinstance(item, str):
            item = self.item(item)
        arr = self.array(item)
        return np.asarray(arr[item.slot] if item.slot is not None else arr[...])

    def item(self, item_id: str) -> IndexItem:
        """The item with this ID; KeyError names a few known IDs."""
        for i in self.items:
            if i.item_id == item_id:
                return i
        raise KeyError(f"{self.path}: no ok item {item_id!r}; items are e.g. "
                       f"{', '.join(i.item_id for i in self.items[:5])}")

    def labels(self, name: str) -> list[str]:
        """The label `name` of every item, in index order ('' where missing)."""
        return [i.labels.get(name, "") for i in self.items]

    def label_names(self) -> tuple[str, ...]:
        """Every label name some item carries, sorted."""
        return tuple(sorted({k for i in self.items for k in i.labels}))

    def classes(self, name: str) -> tuple[str, ...]:
        """The distinct values of label `name` in the order PatchDataset numbers them."""
        return class_names(v for v in self.labels(name) if v)


def open_store(path: Path | str, *, storage_options: Mapping[str, Any] | None = None) -> StoreView:
    """Open a converted store for inspection.

    Parameters
    ----------
    path:
        A store folder (``data/stores/x.zarr``), a zipped store (``x.zarr.zip``) or a URL
        (``s3://bucket/x.zarr``).
    storage_options:
        For a URL: options for its fsspec filesystem (e.g. ``{"endpoint_url": ...}``); credentials and
        endpoint otherwise come from the standard environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``).

    Raises
    ------
    FileNotFoundError
        No store at ``path``.
    ValueError
        ``path`` is a zarr group but not a labzarr store.
    ConnectionError
        A URL store that cannot be read (endpoint unreachable, access denied).
    """
    p = store_location(path)
    attrs, items = read_index(p, storage_options)
    return StoreView(path=p, attrs=attrs, items=items, storage_options=dict(storage_options or {}))
