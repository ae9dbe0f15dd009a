"""Which of a store's items a PatchDataset uses: by split, fold, ID, label or kind, from the index alone."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Literal, TypedDict

import numpy as np
import numpy.typing as npt

from labzarr.store import IndexItem
from labzarr.store.format.items import IndexItems

__all__ = ["Selection", "SelectionKeywords", "selection_of"]

_FIELDS = ("kind", "split", "fold", "group", "dtype")  # IndexItem fields `where` may name, after the labels
_KINDS = {"volume": 3, "image": 2}

Where = Mapping[str, object] | Callable[[IndexItem], bool]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which of a store's items a PatchDataset uses, chosen from the index alone; empty selects every item.

    `split`: only the items of this split (``"train"``, ``"val"``, ``"test"``; the spec's ``[splits]``).
    `fold`, `holdout`: with ``[splits] folds``, ``holdout=True`` gives fold `fold`'s validation items,
    ``holdout=False`` its training items (every other fold); held-out test items are in neither.
    `items`: only these item IDs (kept as a tuple; the dataset keeps index order).
    `where`: a mapping of a label name (or ``kind``, ``split``, ``fold``, ``group``, ``dtype``) to its allowed
    value or values, e.g. ``{"diagnosis": ["tumour", "cyst"]}``; or a callable taking an `IndexItem` and
    returning whether to keep it.
    `kind`: ``"volume"`` (3 spatial axes) or ``"image"`` (2), for a store that holds both.
    """

    split: str | None = None
    fold: int | None = None
    holdout: bool | None = None
    items: Sequence[str] | None = None
    where: Where | None = None
    kind: Literal["volume", "image"] | None = None

    def __post_init__(self) -> None:
        # A tuple, so that equal selections compare equal whatever sequence they were given; a str is left for
        # `apply` to refuse with the store's name.
        if self.items is not None and not isinstance(self.items, str):
            object.__setattr__(self, "items", tuple(self.items))

    def apply(self, items: Sequence[IndexItem], *, where: str) -> IndexItems:
        """The selected items, in index order; ValueError (prefixed `where`) for a selection that does not fit
        the store or selects nothing. Chosen from the index's columns (`IndexItems`): a callable `where` is the
        only choice that builds each item."""
        items = IndexItems.of(items)
        keep = np.ones(len(items), dtype=bool)
        if self.kind is not None:
            if self.kind not in _KINDS:
                raise ValueError(f"{where}: kind = {self.kind!r}; expected 'volume' or 'image'")
            keep &= items.spatial_axes() == _KINDS[self.kind]
        if self.split is not None:
            codes, values = items.text("split")
            have = sorted({v for c in np.unique(codes).tolist() if c >= 0 and (v := values[c])})
            if not have:
                raise ValueError(f"{where}: split = {self.split!r}, but the store has no splits; add [splits] to "
                                 "the delivery spec and convert again")
            if self.split not in have:
                raise ValueError(f"{where}: split = {self.split!r}; the store's splits are {', '.join(have)}")
            keep &= codes == values.index(self.split)
        keep &= self._fold(items, where)
        if self.items is not None:
            if isinstance(self.items, str):
                raise ValueError(f"{where}: items = {self.items!r}; expected a sequence of item IDs")
            ids = items.values("item_id")
            known = set(ids)
            unknown = [i for i in self.items if i not in known]
            if unknown:
                raise ValueError(f"{where}: items names {len(unknown)} ID(s) not among the store's ok items: "
                                 f"{', '.join(map(repr, unknown[:5]))}{', ...' if len(unknown) > 5 else ''}")
            wanted = set(self.items)
            keep &= np.fromiter((i in wanted for i in ids), dtype=bool, count=len(ids))
        if self.where is not None:
            keep &= self._where(items, where)
        if not keep.any():
            raise ValueError(f"{where}: the selection ({self.describe().lstrip(', ')}) keeps none of the store's "
                             f"{len(items)} items")
        return items.take(np.flatnonzero(keep))

    def _fold(self, items: IndexItems, where: str) -> npt.NDArray[np.bool_]:
        if self.fold is None:
            if self.holdout is not None:
                raise ValueError(f"{where}: holdout = {self.holdout!r} needs fold=")
            return np.ones(len(items), dtype=bool)
        of = items.folds()
        folds = sorted(set(np.unique(of[of >= 0]).tolist()))
        if not folds:
            raise ValueError(f"{where}: fold = {self.fold!r}, but the store has no folds; set [splits] folds in the "
                             "delivery spec and convert again")
        if self.fold not in folds:
            raise ValueError(f"{where}: fold = {self.fold!r}; the store's folds are {folds[0]}..{folds[-1]}")
        if self.holdout is None:
            raise ValueError(f"{where}: fold = {self.fold} needs holdout=True (the fold's validation items) or "
                             "holdout=False (its training items: every other fold)")
        out: npt.NDArray[np.bool_] = (of >= 0) & ((of == self.fold) == self.holdout)
        return out

    def _where(self, items: IndexItems, where: str) -> npt.NDArray[np.bool_]:
        if callable(self.where):
            chosen = self.where
            return np.fromiter((bool(chosen(i)) for i in items), dtype=bool, count=len(items))
        assert self.where is not None
        labels = frozenset(items.label_names)
        keep = np.ones(len(items), dtype=bool)
        for key, allowed in self.where.items():
            if isinstance(allowed, str) or not isinstance(allowed, Collection):
                allowed = (allowed,)
            if key in labels or key in _FIELDS:
                # Each distinct value is tested once, as `IndexItem` gives it ("" or None where there is none).
                if key in labels:
                    codes, values = items.label(key)
                    absent: object = ""
                elif key == "fold":
                    codes, values, absent = items.folds(), [], None
                    values = [*range(int(codes.max(initial=-1)) + 1)]
                else:
                    codes, values = items.text(key)
                    absent = ""
                ok = [(v if v is not None else absent) in allowed for v in values]
                lut = np.asarray([*ok, absent in allowed], dtype=bool)  # code -1 (none) picks the last
                keep &= lut[codes]
            else:
                raise ValueError(f"{where}: where= names {key!r}, which is neither a label of the store "
                                 f"({', '.join(sorted(labels)) or 'none'}) nor one of {', '.join(_FIELDS)}")
        return keep

    def describe(self) -> str:
        """The selection as `repr` shows it (`""` when it selects everything)."""
        parts = [f"{name}={value!r}" for name, value in (
            ("split", self.split), ("fold", self.fold), ("holdout", self.holdout), ("kind", self.kind),
            ("items", None if self.items is None else f"{len(self.items)} IDs"),
            ("where", None if self.where is None else ("<callable>" if callable(self.where) else dict(self.where))),
        ) if value is not None]
        return "".join(f", {p}" for p in parts)


class SelectionKeywords(TypedDict, total=False):
    """`Selection`'s fields as keywords: `PatchDataset(store, patch, split="train")` builds the selection."""

    split: str | None
    fold: int | None
    holdout: bool | None
    items: Sequence[str] | None
    where: Where | None
    kind: Literal["volume", "image"] | None


_KEYWORDS = frozenset(f.name for f in fields(Selection))


def selection_of(selection: Selection | None, keywords: SelectionKeywords, *, where: str) -> Selection:
    """`selection`, or the one `keywords` build; TypeError (prefixed `where`) when both choose, or for a keyword
    that is no field of `Selection`. A keyword given as None is not a choice: None is every field's default."""
    unknown = sorted(set(keywords) - _KEYWORDS)
    if unknown:
        # Any misspelt keyword lands here, an option's as much as a field's: name both kinds.
        raise TypeError(f"{where}: unexpected keyword argument(s) {', '.join(map(repr, unknown))}; besides its "
                        f"options it takes Selection's fields: {', '.join(f.name for f in fields(Selection))}")
    if selection is None:
        return Selection(**keywords)
    if not isinstance(selection, Selection):
        raise TypeError(f"{where}: selection = {selection!r}; expected a labzarr.loaders.Selection")
    given = [f"{k}=" for k, v in keywords.items() if v is not None]
    if given:
        raise TypeError(f"{where}: selection= and {', '.join(given)} both choose the items; pass the selection "
                        f"once: selection=Selection(..., {given[0]}...) or the keywords alone")
    return selection
