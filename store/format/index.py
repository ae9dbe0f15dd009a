"""The store format: the root index and the array attributes, as typed records with one encode and one decode.

Invariant: the converter writes these records and every reader (the Dataset,
`inspect`, `verify`, the QC page) reads them back through `decode`, so the
JSON layout of a store is spelled in this module only (the index's and the
statistics' columns in `items.py` and `stats_table.py`). `FORMAT_VERSION` names
that layout; a store of another version is refused with a message rather than
misread. The index lists the `ok` items in manifest order; a Dataset needs
nothing but the store's path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .annotations import ANNOTATIONS, Annotation, decode_annotations, encode_annotations
from .stats import ChannelStats, Histogram, ItemStats

if TYPE_CHECKING:
    from ..location import Location, Transport

__all__ = ["COMPLETE", "CONTENT_SHA256", "FORMAT_VERSION", "INDEX", "INDEX_KEY", "STATE", "STATISTICS", "STATS",
           "ClassInfo", "FormatError", "IndexItem", "StoreIndex", "VolumeAttrs", "class_names", "decode_stats",
           "encode_stats", "item_key", "stack_slots"]

# 2: every volume an OME-Zarr image group, its array at level `0` (store/ngff.py). 3: every array records which
# storage files it wrote (`written.STORED`), so a lost file is an error, not fill values. A store of version 2
# cannot tell the two apart, so it is refused with "convert again" rather than read unchecked. 4: the index and
# the statistics are tables of numpy columns (`items.py`, `stats_table.py`: `index/<table>`,
# `statistics/<table>`) instead of JSON documents, so a store of a million items opens in a second; the root attr
# `INDEX_KEY` names the index's table and keeps only the store's own fields. A version 3 index, a JSON list in
# the root attr, is refused with "convert again".
FORMAT_VERSION = 4
INDEX_KEY = "labzarr"  # the root attr naming the index
INDEX = "index"  # the root group holding the index's table (`index/<table>`)
# Array attrs written after the voxels, in this order: the content hash, then `complete` (the array is whole).
CONTENT_SHA256 = "content_sha256"
COMPLETE = "complete"
# The bookkeeping folder at the store root (lock, staging, records): never data, skipped by every listing.
STATE = ".labzarr"
# The array attr (and index entry key) holding an item's intensity statistics (`stats.py`); absent in stores
# converted before statistics existed or with `[store] statistics = false`, which read as None.
STATS = "stats"
# The root group holding the table of every ok item's full statistics record by `IndexItem.key` (its attr `STATS`
# names the table), written with the index; the index itself keeps only their moments.
STATISTICS = "statistics"


class FormatError(ValueError):
    """A store whose index or attributes do not follow this format (another version, or damaged)."""


def item_key(array: str, slot: int | None) -> str:
    """`IndexItem.key` of the item at `array` (and `slot`, for an image of a stack)."""
    return array if slot is None else f"{array}/{slot}"


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
    With ``[splits]``, `split` (``"train"``, ``"val"``, ``"test"``), `fold` (with ``folds``; None for a
    held-out test item) and `group` (what is never split: a patient, by default the item ID) are set.
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
    split: str = ""
    fold: int | None = None
    group: str = ""
    # A DICOM item's acquisition metadata (echo and repetition times, b-values, ...): an allow-list of the
    # BIDS sidecar's names, PHI-free; empty for other kinds, and then not written.
    metadata: Mapping[str, Any] = field(default_factory=dict)
    orientation: str = ""  # the source's axis codes before reorientation ("LPS"); "" for a 2D image
    stats: ItemStats | None = None  # intensity statistics (of the image role, for a sample)
    # Points, spheres and boxes from the label workbook, in canonical voxels (`annotations.py`).
    annotations: tuple[Annotation, ...] = ()

    @property
    def spatial_axes(self) -> int:
        """2 for an image, 3 for a volume (the shape is channels first)."""
        return len(self.shape) - 1

    @property
    def key(self) -> str:
        """The item's unique name in the store: its array path, with its slot for an image of a stack."""
        return item_key(self.array, self.slot)

    @property
    def split_group(self) -> str:
        """The group a sampler keeps whole (`shard_by="group"`): `group`, or the item ID without splits."""
        return self.group or self.item_id

    def role_array(self, role: str) -> str:
        """The array path of `role` (``image`` is the item's own array when the store has no roles)."""
        if role in self.roles:
            return self.roles[role]
        if role == "image" and not self.roles:
            return self.array
        have = ", ".join(self.roles) or "image"
        raise KeyError(f"item {self.item_id!r} has no role {role!r} (it has: {have})")

    def encode(self) -> dict[str, Any]:
        """The item's JSON entry in the index."""
        out: dict[str, Any] = {
            "item_id": self.item_id, "array": self.array, "slot": self.slot, "kind": self.kind,
            "source": self.source, "shape": list(self.shape), "dtype": self.dtype, "spacing": list(self.spacing),
            "labels": dict(self.labels),
        }
        if self.roles:
            out["roles"] = dict(self.roles)
        if self.classes:
            out["classes"] = {str(v): {"voxels": c.voxels, "locations": [c.start, c.stop]}
                              for v, c in self.classes.items()}
        if self.locations is not None:
            out["locations"] = self.locations
        if self.split:
            out["split"] = self.split
        if self.fold is not None:
            out["fold"] = self.fold
        if self.group:
            out["group"] = self.group
        if self.metadata:
            out["metadata"] = {k: _jsonable(v) for k, v in sorted(self.metadata.items())}
        if self.orientation:
            out["orientation"] = self.orientation
        if self.stats is not None:
            out[STATS] = encode_stats(self.stats)
        if self.annotations:
            out[ANNOTATIONS] = encode_annotations(self.annotations)
        return out

    def digest(self) -> str:
        """A sha256 of the item's index entry: changes whenever the entry does (a reconverted, relabelled or
        moved item), so a checkpoint can tell the items it was taken over from the store's now."""
        return hashlib.sha256(json.dumps(self.encode(), sort_keys=True).encode()).hexdigest()

    @classmethod
    def decode(cls, d: Mapping[str, Any]) -> IndexItem:
        """The item of one JSON entry; raises KeyError/TypeError/ValueError on a malformed one."""
        return cls(item_id=str(d["item_id"]), array=str(d["array"]),
                   slot=None if d.get("slot") is None else int(d["slot"]), kind=str(d.get("kind", "")),
                   source=str(d.get("source", "")), shape=tuple(int(n) for n in d["shape"]), dtype=str(d["dtype"]),
                   spacing=tuple(float(s) for s in d.get("spacing", ())),
                   labels={str(k): str(v) for k, v in d.get("labels", {}).items()},
                   roles={str(k): str(v) for k, v in d.get("roles", {}).items()},
                   classes={int(v): ClassInfo(voxels=int(c["voxels"]), start=int(c["locations"][0]),
                                              stop=int(c["locations"][1]))
                            for v, c in d.get("classes", {}).items()},
                   locations=None if d.get("locations") is None else str(d["locations"]),
                   split=str(d.get("split", "")), fold=None if d.get("fold") is None else int(d["fold"]),
                   metadata={str(k): v for k, v in d.get("metadata", {}).items()},
                   group=str(d.get("group", "")), orientation=str(d.get("orientation", "")),
                   stats=None if d.get(STATS) is None else decode_stats(d[STATS]),
                   annotations=decode_annotations(d.get(ANNOTATIONS)))


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """The store's root index: which delivery and run made it, and its ok items in manifest order (read from a
    store, an `items.IndexItems`, which builds each item when asked for it)."""

    delivery: str
    spec_sha256: str
    manifest_sha256: str
    tool_version: str
    items: Sequence[IndexItem]
    format_version: int = FORMAT_VERSION

    def attrs(self) -> dict[str, Any]:
        """The root-level fields without the items (what `inspect` and the report show)."""
        return {"delivery": self.delivery, "spec_sha256": self.spec_sha256,
                "manifest_sha256": self.manifest_sha256, "tool_version": self.tool_version,
                "format_version": self.format_version}

    def stack_slots(self) -> Mapping[str, Mapping[int, str]]:
        """The item ID of every image of a stack, by stack array and slot (what an error in a stack names)."""
        return stack_slots(self.items)

    def write(self, store: Location) -> dict[str, Any]:
        """Write the items as a new table under `INDEX` and return the value of the root attr `INDEX_KEY` that
        names it: the caller writes that last (the index changes when the root does)."""
        from .items import index_columns
        from .table import write_table

        attrs, columns = index_columns(self.items)
        name = write_table(store / INDEX, columns, rows=len(self.items), attrs=attrs)
        return {**self.attrs(), "items": len(self.items), "table": f"{INDEX}/{name}"}

    @classmethod
    def decode(cls, value: object, *, where: str, transport: Transport) -> StoreIndex:
        """The index the root attr's JSON value `value` names, its table read through `transport`; raises
        `FormatError` naming `where`."""
        from .items import IndexItems
        from .table import read_table

        if not isinstance(value, Mapping) or "items" not in value:
            raise FormatError(f"{where}: not a labzarr store (root attr {INDEX_KEY!r} missing)")
        version = value.get("format_version")
        if version != FORMAT_VERSION:
            raise FormatError(f"{where}: store format version {version!r}; this labzarr reads version "
                              f"{FORMAT_VERSION}: convert the delivery again with this version")
        table = value.get("table")
        try:
            if not isinstance(table, str) or not table.startswith(f"{INDEX}/"):
                raise ValueError(f"root attr {INDEX_KEY!r} names no index table ({table!r})")
            items = IndexItems.read(*read_table(transport, table), name=table.removeprefix(f"{INDEX}/"))
            if len(items) != value["items"]:
                raise ValueError(f"the table holds {len(items)} items, the root attr says {value['items']}")
        except FileNotFoundError as exc:
            raise FormatError(f"{where}: the index table {table!r} is missing ({exc}); convert the delivery "
                              "again") from exc
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise FormatError(f"{where}: damaged index ({type(exc).__name__}: {exc}); convert the delivery "
                              "again") from exc
        return cls(delivery=str(value.get("delivery", "")), spec_sha256=str(value.get("spec_sha256", "")),
                   manifest_sha256=str(value.get("manifest_sha256", "")),
                   tool_version=str(value.get("tool_version", "")), items=items, format_version=FORMAT_VERSION)


@dataclass(frozen=True, slots=True)
class VolumeAttrs:
    """A volume's (or a sample role's) array attributes written with the array: where its voxels came from and
    their canonical geometry. `content_sha256` and `complete` follow once the voxels are written."""

    item_id: str
    source: str
    sha256: str
    kind: str
    spacing: tuple[float, ...]
    affine: tuple[tuple[float, ...], ...]
    orientation: str  # "RAS" for a volume; "" for a 2D image, which has no patient frame
    source_orientation: str
    axes: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    role: str | None = None
    stats: ItemStats | None = None
    content_sha256: str | None = None
    complete: str | None = None

    def encode(self) -> dict[str, Any]:
        """The attributes as JSON (the two late ones only when set)."""
        out: dict[str, Any] = {
            "item_id": self.item_id, "source": self.source, "sha256": self.sha256, "kind": self.kind,
            "spacing": list(self.spacing), "affine": [list(row) for row in self.affine],
            "orientation": self.orientation, "source_orientation": self.source_orientation,
            "axes": list(self.axes), "labels": dict(self.labels),
        }
        if self.role is not None:
            out["role"] = self.role
        if self.stats is not None:
            out[STATS] = encode_stats(self.stats)
        if self.content_sha256 is not None:
            out[CONTENT_SHA256] = self.content_sha256
        if self.complete is not None:
            out[COMPLETE] = self.complete
        return out

    @classmethod
    def decode(cls, attrs: Mapping[str, Any], *, where: str) -> VolumeAttrs:
        """The record of an array's attributes; raises `FormatError` naming `where`."""
        try:
            return cls(item_id=str(attrs["item_id"]), source=str(attrs["source"]), sha256=str(attrs["sha256"]),
                       kind=str(attrs["kind"]), spacing=tuple(float(s) for s in attrs["spacing"]),
                       affine=tuple(tuple(float(v) for v in row) for row in attrs["affine"]),
                       orientation=str(attrs["orientation"]), source_orientation=str(attrs["source_orientation"]),
                       axes=tuple(str(a) for a in attrs["axes"]),
                       labels={str(k): str(v) for k, v in attrs.get("labels", {}).items()},
                       role=None if attrs.get("role") is None else str(attrs["role"]),
                       stats=None if attrs.get(STATS) is None else decode_stats(attrs[STATS]),
                       content_sha256=_opt_str(attrs.get(CONTENT_SHA256)), complete=_opt_str(attrs.get(COMPLETE)))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{where}: array attributes do not follow labzarr's format "
                              f"({type(exc).__name__}: {exc})") from exc


def stack_slots(items: Iterable[IndexItem]) -> Mapping[str, Mapping[int, str]]:
    """The item ID of every image of a stack among `items`, by stack array and slot (of an `IndexItems`, looked up
    in its columns when first asked: a store of a million images builds no dict of them to open)."""
    from .items import IndexItems, StackSlots

    if isinstance(items, IndexItems):
        return StackSlots(items)
    out: dict[str, dict[int, str]] = {}
    for item in items:
        if item.slot is not None:
            out.setdefault(item.array, {})[item.slot] = item.item_id
    return out


def encode_stats(stats: ItemStats) -> dict[str, Any]:
    """An item's statistics as JSON: per channel its moments, non-finite counts and histogram runs; per mask class
    the same (`classes`, only for a sample with a mask)."""
    out: dict[str, Any] = {"channels": [_encode_channel(c) for c in stats.channels]}
    if stats.classes:
        out["classes"] = {str(k): [_encode_channel(c) for c in v] for k, v in sorted(stats.classes.items())}
    return out


def decode_stats(value: Mapping[str, Any]) -> ItemStats:
    """The statistics `encode_stats` wrote; raises KeyError/TypeError/ValueError on anything else."""
    return ItemStats(channels=tuple(_decode_channel(c) for c in value["channels"]),
                     classes={int(k): tuple(_decode_channel(c) for c in v)
                              for k, v in value.get("classes", {}).items()})


def _encode_channel(c: ChannelStats) -> dict[str, Any]:
    out: dict[str, Any] = {"count": c.count, "mean": c.mean, "m2": c.m2, "min": c.min, "max": c.max}
    if c.nan:
        out["nan"] = c.nan
    if c.inf:
        out["inf"] = c.inf
    if c.integral:
        out["integral"] = True
    if c.histogram.runs:
        out["histogram"] = [list(r) for r in c.histogram.runs]
    return out


def _decode_channel(d: Mapping[str, Any]) -> ChannelStats:
    return ChannelStats(count=int(d["count"]), mean=float(d["mean"]), m2=float(d["m2"]), min=float(d["min"]),
                        max=float(d["max"]), histogram=Histogram.from_runs(d.get("histogram", ())),
                        nan=int(d.get("nan", 0)), inf=int(d.get("inf", 0)), integral=bool(d.get("integral", False)))


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, list | tuple) else value


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def class_names(values: Iterable[str]) -> tuple[str, ...]:
    """The distinct label values in a stable order: numerically when every value is a number, else by text."""
    distinct = set(values)
    try:
        return tuple(sorted(distinct, key=lambda v: (float(v), v)))
    except ValueError:
        return tuple(sorted(distinct))

