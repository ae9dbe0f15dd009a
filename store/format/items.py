"""The store's index of ok items as a table (`table.py`): one row per item, in manifest order.

Invariant: `index_columns` encodes every `IndexItem` field and `IndexItems` decodes it back equal, item for item.
`IndexItems` is the index as a read-only `Sequence[IndexItem]` that builds an item only when it is asked for, so
opening a store of a million items costs its columns, not a million objects; callers that choose among all of
them (a `Selection`, a Dataset's checks) use the column accessors (`text`, `label`, `spatial_axes`, ...), which
answer with numpy arrays over the items in view. `take` gives a view of some of them, sharing the columns.

Columns: text fields dictionary-encoded (`Strings`: ``item_id``, ``array``, ``kind``, ``source``, ``dtype``,
``locations``, ``split``, ``group``, ``orientation``; ``metadata`` and ``annotations`` as their JSON text, ""
when empty); ``slot`` and ``fold`` as int64, -1 for None; ``shape`` and ``spacing`` as `Ragged`; each label and
each role a text column (``label.<n>``, ``role.<n>``: the n-th name the table's ``labels``/``roles`` attrs list,
None where an item has none); mask classes as `Ragged` rows of (value, voxels, start, stop); the statistics'
moments as `stats_table.StatsColumns` (``stats.*``); ``digest``, each entry's `IndexItem.digest` (its first 64 bits
as int64; absent from tables written before it was recorded, where `IndexItems.digests` computes them).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from .annotations import decode_annotations, encode_annotations
from .index import ClassInfo, IndexItem
from .stats_table import StatsColumns, StatsTable
from .table import Ragged, RaggedColumn, Strings, TextColumn

__all__ = ["TEXT", "IndexColumns", "IndexItems", "index_columns"]

TEXT = ("item_id", "array", "kind", "source", "dtype", "locations", "split", "group", "orientation")
_CLASS_FIELDS = ("value", "voxels", "start", "stop")
_BATCH = 4096  # items built at a time when iterating: each column converted once per batch

Array = npt.NDArray[Any]
Rows = npt.NDArray[np.int64]


def index_columns(items: Iterable[IndexItem]) -> tuple[dict[str, Any], dict[str, Array]]:
    """(table attrs, columns) of `items`, in order: what `IndexItems` reads back (for a whole table's view, the
    columns it was read from)."""
    if isinstance(items, IndexItems) and items.whole and items._c.digest is not None:
        return items._c.attrs, items._c.columns
    columns = IndexColumns()
    for item in items:
        columns.add(item)
    return columns.columns()


class IndexColumns:
    """The index table's columns, built one item at a time (`add`), in order: `index_columns` of the items
    added, to the bit, with a few machine numbers per item held instead of the items."""

    def __init__(self) -> None:
        self._empty()

    def _empty(self) -> None:
        self.rows = 0
        self.text = {name: TextColumn() for name in (*TEXT, "metadata", "annotations")}
        self.labels: dict[str, TextColumn] = {}
        self.roles: dict[str, TextColumn] = {}
        self.slot, self.fold, self.digest = array("q"), array("q"), array("Q")
        self.shape, self.spacing = RaggedColumn("q", np.int64), RaggedColumn("d", np.float64)
        self.classes = [RaggedColumn("q", np.int64) for _ in _CLASS_FIELDS]
        self.stats = StatsColumns("stats", histograms=False)

    def add(self, item: IndexItem) -> None:
        """The next item."""
        for name in TEXT:
            self.text[name].add(getattr(item, name))
        self.text["metadata"].add(_metadata_text(item.metadata))
        self.text["annotations"].add(json.dumps(encode_annotations(item.annotations)) if item.annotations else "")
        for named, values in ((self.labels, item.labels), (self.roles, item.roles)):
            for name in values:
                if name not in named:
                    named[name] = TextColumn(self.rows)
            for name, column in named.items():
                column.add(values.get(name))
        self.slot.append(-1 if item.slot is None else item.slot)
        self.fold.append(-1 if item.fold is None else item.fold)
        self.shape.add(item.shape)
        self.spacing.add(item.spacing)
        ordered = sorted(item.classes.items())
        for k, field in enumerate(self.classes):
            field.add([(v, c.voxels, c.start, c.stop)[k] for v, c in ordered])
        self.stats.add(item.stats)
        # each entry's digest (`IndexItem.digest`, its first 64 bits), recorded once: a checkpoint compares them
        self.digest.append(int(item.digest()[:16], 16))
        self.rows += 1

    def columns(self, *, spend: bool = False) -> tuple[dict[str, Any], dict[str, Array]]:
        """(table attrs, columns) of the items added. `spend`: let each builder go as soon as its column is made,
        so the builders and the columns are not all held at once; the object then holds no item."""
        out: dict[str, Array] = {}
        attrs = {"labels": list(self.labels), "roles": list(self.roles)}
        for name in list(self.text):
            out |= self.text[name].columns(name)
            if spend:
                self.text[name] = TextColumn()
        for kind, named in (("label", self.labels), ("role", self.roles)):
            for n, name in enumerate(list(named)):
                out |= named[name].columns(f"{kind}.{n}")
                if spend:
                    named[name] = TextColumn()
        out["slot"] = np.array(self.slot, dtype=np.int64)
        out["fold"] = np.array(self.fold, dtype=np.int64)
        out |= self.shape.columns("shape") | self.spacing.columns("spacing")
        out["classes.ends"] = np.array(self.classes[0].ends, dtype=np.int64)
        for f, values in zip(_CLASS_FIELDS, self.classes):
            out[f"classes.{f}"] = np.array(values.values, dtype=np.int64)
        out |= self.stats.columns()
        out["digest"] = np.array(self.digest, dtype=np.uint64).view(np.int64)
        if spend:
            self._empty()
        return attrs, out


def _metadata_text(metadata: Mapping[str, Any]) -> str:
    if not metadata:
        return ""
    return json.dumps({k: _jsonable(v) for k, v in sorted(metadata.items())}, sort_keys=True)


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, list | tuple) else value


class _Columns:
    """The decoded columns of one index table, shared by every view of it."""

    def __init__(self, attrs: Mapping[str, Any], columns: Mapping[str, Array], name: str | None = None) -> None:
        self.name = name  # the table's name in the store: a digest of its content (`table.write_table`)
        self.attrs, self.columns = dict(attrs), dict(columns)  # as given: what `index_columns` of the whole gives
        self.digest: Rows | None = columns.get("digest")  # absent from tables written before it was recorded
        self.label_names = [str(n) for n in attrs.get("labels", [])]
        self.role_names = [str(n) for n in attrs.get("roles", [])]
        self.text = {name: Strings(columns, name) for name in (*TEXT, "metadata", "annotations")}
        self.labels = {name: Strings(columns, f"label.{n}") for n, name in enumerate(self.label_names)}
        self.roles = {name: Strings(columns, f"role.{n}") for n, name in enumerate(self.role_names)}
        self.slot: Rows = columns["slot"]
        self.fold: Rows = columns["fold"]
        self.shape = Ragged(columns, "shape")
        self.spacing = Ragged(columns, "spacing")
        self.classes = Ragged({"classes.ends": columns["classes.ends"], "classes.values": columns["classes.value"]},
                              "classes")
        self.class_fields = [columns[f"classes.{f}"] for f in _CLASS_FIELDS]
        self.stats = StatsTable(columns, "stats")
        self.rows = len(self.slot)
        sized: list[Strings | Ragged | StatsTable | Rows] = [*self.text.values(), *self.labels.values(),
                                                             *self.roles.values(), self.fold, self.shape,
                                                             self.spacing, self.classes, self.stats]
        lengths = [len(c) for c in sized]
        if self.digest is not None:
            lengths.append(len(self.digest))
        if any(n != self.rows for n in lengths) or any(len(f) != len(self.classes.values)
                                                       for f in self.class_fields):
            raise ValueError("index columns of different lengths")

    def items(self, rows: Rows) -> list[IndexItem]:
        """The items of `rows`, each column converted for all of them at once (`item`, in bulk)."""
        text = {name: col.strings(rows) for name, col in self.text.items()}
        labels = [(k, col.strings(rows)) for k, col in self.labels.items()]
        roles = [(k, col.strings(rows)) for k, col in self.roles.items()]
        slots, folds = self.slot[rows].tolist(), self.fold[rows].tolist()
        shapes, spacings = self.shape.take(rows), self.spacing.take(rows)
        values, voxels, starts, stops = (self.classes.take(rows, f) for f in self.class_fields)
        stats = self.stats.many(rows)
        out = []
        for n in range(len(rows)):
            t = {name: values[n] for name, values in text.items()}
            metadata, annotations = t["metadata"], t["annotations"]
            out.append(IndexItem(
                item_id=t["item_id"] or "", array=t["array"] or "", slot=None if slots[n] < 0 else slots[n],
                kind=t["kind"] or "", source=t["source"] or "", shape=tuple(shapes[n]), dtype=t["dtype"] or "",
                spacing=tuple(spacings[n]), labels={k: v for k, values in labels if (v := values[n]) is not None},
                roles={k: v for k, values in roles if (v := values[n]) is not None},
                classes={v: ClassInfo(voxels=k, start=a, stop=b)
                         for v, k, a, b in zip(values[n], voxels[n], starts[n], stops[n])},
                locations=t["locations"], split=t["split"] or "", fold=None if folds[n] < 0 else folds[n],
                group=t["group"] or "", metadata=json.loads(metadata) if metadata else {},
                orientation=t["orientation"] or "", stats=stats[n],
                annotations=decode_annotations(json.loads(annotations)) if annotations else ()))
        return out

    def item(self, r: int) -> IndexItem:
        t = self.text
        slot, fold = int(self.slot[r]), int(self.fold[r])
        start, stop = self.classes.bounds(r)
        metadata, annotations = t["metadata"][r], t["annotations"][r]
        return IndexItem(
            item_id=t["item_id"][r] or "", array=t["array"][r] or "", slot=None if slot < 0 else slot,
            kind=t["kind"][r] or "", source=t["source"][r] or "", shape=tuple(self.shape[r].tolist()),
            dtype=t["dtype"][r] or "", spacing=tuple(self.spacing[r].tolist()),
            labels={k: v for k, col in self.labels.items() if (v := col[r]) is not None},
            roles={k: v for k, col in self.roles.items() if (v := col[r]) is not None},
            classes={int(v): ClassInfo(voxels=int(n), start=int(a), stop=int(b))
                     for v, n, a, b in zip(*(f[start:stop].tolist() for f in self.class_fields))},
            locations=t["locations"][r], split=t["split"][r] or "", fold=None if fold < 0 else fold,
            group=t["group"][r] or "", metadata=json.loads(metadata) if metadata else {},
            orientation=t["orientation"][r] or "", stats=self.stats[r],
            annotations=decode_annotations(json.loads(annotations)) if annotations else ())


class IndexItems(Sequence[IndexItem]):
    """Index items in view: all of a table's rows, or some (`take`), in index order; items built on access."""

    __slots__ = ("_c", "_rows")

    def __init__(self, columns: _Columns, rows: Rows | None = None) -> None:
        self._c = columns
        self._rows: Rows = np.arange(columns.rows, dtype=np.int64) if rows is None else rows

    @classmethod
    def read(cls, attrs: Mapping[str, Any], columns: Mapping[str, Array], name: str | None = None) -> IndexItems:
        """Every item of a table (`index_columns`'s attrs and columns; `name`: the table's, a digest of its content);
        raises ValueError, KeyError on a damaged one."""
        return cls(_Columns(attrs, columns, name))

    @classmethod
    def of(cls, items: Iterable[IndexItem]) -> IndexItems:
        """`items` (any iterable, e.g. built by hand) as a view, for the column accessors."""
        if isinstance(items, IndexItems):
            return items
        return cls.read(*index_columns(items))

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> IndexItem: ...

    @overload
    def __getitem__(self, i: slice) -> IndexItems: ...

    def __getitem__(self, i: int | slice) -> IndexItem | IndexItems:
        if isinstance(i, slice):
            return IndexItems(self._c, self._rows[i])
        return self._c.item(int(self._rows[i]))

    def __iter__(self) -> Iterator[IndexItem]:
        for lo in range(0, len(self._rows), _BATCH):
            yield from self._c.items(self._rows[lo:lo + _BATCH])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IndexItems({len(self)} items)"

    def take(self, positions: npt.ArrayLike) -> IndexItems:
        """The items at `positions` (indexes into this view, or a boolean mask over it), in that order."""
        return IndexItems(self._c, self._rows[np.asarray(positions)])

    # -- columns over the items in view ---------------------------------------------------------------------

    def text(self, field: str) -> tuple[npt.NDArray[np.integer[Any]], list[str]]:
        """(code of each item's value, the distinct values by code) of text field `field` (one of `TEXT`)."""
        col = self._c.text[field]
        return col.codes[self._rows], col.distinct

    def values(self, field: str) -> list[str]:
        """Each item's value of text field `field` ("" for None)."""
        return [v or "" for v in self._c.text[field].strings(self._rows)]

    @property
    def label_names(self) -> list[str]:
        """Every label name of the table (some items may lack some)."""
        return list(self._c.label_names)

    @property
    def role_names(self) -> list[str]:
        """Every role name of the table."""
        return list(self._c.role_names)

    def label(self, name: str) -> tuple[npt.NDArray[np.integer[Any]], list[str]]:
        """(code of each item's value of label `name`, -1 where it has none; distinct values by code)."""
        col = self._c.labels.get(name)
        if col is None:
            return np.full(len(self), -1, dtype=np.int64), []
        return col.codes[self._rows], col.distinct

    def role(self, name: str) -> npt.NDArray[np.bool_]:
        """Whether each item has role `name` (``image`` is an item's own array when it has no roles)."""
        col = self._c.roles.get(name)
        has = np.zeros(len(self), dtype=bool) if col is None else col.codes[self._rows] >= 0
        if name == "image":
            has |= ~self.has_roles()
        return has

    def has_roles(self) -> npt.NDArray[np.bool_]:
        """Whether each item has any role."""
        out = np.zeros(len(self), dtype=bool)
        for col in self._c.roles.values():
            out |= col.codes[self._rows] >= 0
        return out

    @property
    def whole(self) -> bool:
        """Whether the view is of every item of its table, in order."""
        c = self._c
        return len(self._rows) == c.rows and bool(np.array_equal(self._rows, np.arange(c.rows)))

    @property
    def table_digest(self) -> str | None:
        """The name of the store's table these items are all of, in order: a digest of the whole index's content;
        None for a view of some of them, or items not read from a store."""
        return self._c.name if self.whole else None

    def digests(self) -> list[str]:
        """Each item's `IndexItem.digest()[:16]`: read from the table where its writer recorded them, else computed
        from each item built."""
        if self._c.digest is None:
            return [i.digest()[:16] for i in self]
        return [format(d, "016x") for d in self._c.digest[self._rows].astype(np.int64).view(np.uint64).tolist()]

    def split_groups(self) -> list[str]:
        """Each item's `IndexItem.split_group` (its group, or its item ID without splits)."""
        return [g or i for g, i in zip(self.values("group"), self.values("item_id"))]

    def keys(self) -> list[str]:
        """Each item's `IndexItem.key` (its array, with its slot for an image of a stack)."""
        codes, arrays = self.text("array")
        named = [*(a or "" for a in arrays), ""]  # code -1 (no array) picks the "" at the end
        return [named[c] if s < 0 else f"{named[c]}/{s}" for c, s in zip(codes.tolist(), self.slots().tolist())]

    def ragged(self, field: str) -> tuple[Rows, Array]:
        """(how many values each item has, the items' values one after another) of list field `field`: ``shape``,
        ``spacing``, or a mask class field ``classes.value``, ``classes.voxels``."""
        if field.startswith("classes."):
            at, lengths = self._c.classes.positions(self._rows)
            return lengths, self._c.class_fields[_CLASS_FIELDS.index(field.removeprefix("classes."))][at]
        column = {"shape": self._c.shape, "spacing": self._c.spacing}[field]
        at, lengths = column.positions(self._rows)
        return lengths, column.values[at]

    def spatial_axes(self) -> Rows:
        """Each item's spatial axes (2 for an image, 3 for a volume)."""
        return self._c.shape.lengths()[self._rows] - 1

    def slots(self) -> Rows:
        """Each item's slot in its stack, -1 for an array of its own."""
        return self._c.slot[self._rows]

    def folds(self) -> Rows:
        """Each item's fold, -1 for none."""
        return self._c.fold[self._rows]

    def has_locations(self) -> npt.NDArray[np.bool_]:
        """Whether each item has class locations."""
        return self._c.text["locations"].codes[self._rows] >= 0

    def annotated(self) -> npt.NDArray[np.bool_]:
        """Whether each item has annotations."""
        codes, values = self.text("annotations")
        empty = values.index("") if "" in values else -2
        out: npt.NDArray[np.bool_] = codes != empty
        return out


class StackSlots(Mapping[str, Mapping[int, str]]):
    """`index.stack_slots` of an `IndexItems`: the item ID of each image of a stack by slot, one stack's looked up
    in the columns when first asked for (a store of a million images opens without a dict of them)."""

    __slots__ = ("_items", "_stacks")

    def __init__(self, items: IndexItems) -> None:
        self._items = items
        self._stacks: dict[str, _Slots] = {}

    def _codes(self) -> tuple[npt.NDArray[np.integer[Any]], list[str], npt.NDArray[np.bool_]]:
        codes, arrays = self._items.text("array")
        return codes, arrays, self._items.slots() >= 0

    def __getitem__(self, array: str) -> Mapping[int, str]:
        if array not in self._stacks:
            codes, arrays, slotted = self._codes()
            code = arrays.index(array) if array in arrays else -2
            at = np.flatnonzero(slotted & (codes == code))
            if not at.size:
                raise KeyError(array)
            self._stacks[array] = _Slots(self._items.take(at))
        return self._stacks[array]

    def __bool__(self) -> bool:
        return bool(np.any(self._items.slots() >= 0))

    def __iter__(self) -> Iterator[str]:
        codes, arrays, slotted = self._codes()
        return iter([arrays[c] for c in np.unique(codes[slotted]).tolist()])

    def __len__(self) -> int:
        codes, _, slotted = self._codes()
        return len(np.unique(codes[slotted]))


class _Slots(Mapping[int, str]):
    """One stack's item IDs by slot, looked up in the columns (nothing is built per item)."""

    __slots__ = ("_items", "_slots", "_order")

    def __init__(self, items: IndexItems) -> None:
        self._items, self._slots = items, items.slots()
        self._order = np.argsort(self._slots, kind="stable")

    def _at(self, slot: object) -> int:
        if not isinstance(slot, int | np.integer):
            return -1
        k = int(np.searchsorted(self._slots, slot, sorter=self._order))
        return int(self._order[k]) if k < len(self._order) and self._slots[self._order[k]] == slot else -1

    def __getitem__(self, slot: int) -> str:
        at = self._at(slot)
        if at < 0:
            raise KeyError(slot)
        return self._items[at].item_id

    def __contains__(self, slot: object) -> bool:
        return self._at(slot) >= 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._slots[self._order].tolist())

    def __len__(self) -> int:
        return len(self._slots)
