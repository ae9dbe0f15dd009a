"""Which of a store's items a PatchDataset uses: by split, fold, ID, label or kind, from the index alone."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from labzarr.store import IndexItem

__all__ = ["Selection"]

_FIELDS = ("kind", "split", "fold", "group", "dtype")  # IndexItem fields `where` may name, after the labels
_KINDS = {"volume": 3, "image": 2}


@dataclass(frozen=True, slots=True)
class Selection:
    """A PatchDataset's item selection (see `PatchDataset`); empty selects every item."""

    split: str | None = None
    fold: int | None = None
    holdout: bool | None = None
    items: tuple[str, ...] | None = None
    where: Mapping[str, object] | Callable[[IndexItem], bool] | None = None
    kind: Literal["volume", "image"] | None = None

    def apply(self, items: Sequence[IndexItem], *, where: str) -> tuple[IndexItem, ...]:
        """The selected items, in index order; ValueError (prefixed `where`) for a selection that does not fit
        the store or selects nothing."""
        keep = list(items)
        if self.kind is not None:
            if self.kind not in _KINDS:
                raise ValueError(f"{where}: kind = {self.kind!r}; expected 'volume' or 'image'")
            keep = [i for i in keep if i.spatial_axes == _KINDS[self.kind]]
        if self.split is not None:
            have = sorted({i.split for i in items if i.split})
            if not have:
                raise ValueError(f"{where}: split = {self.split!r}, but the store has no splits; add [splits] to "
                                 "the delivery spec and convert again")
            if self.split not in have:
                raise ValueError(f"{where}: split = {self.split!r}; the store's splits are {', '.join(have)}")
            keep = [i for i in keep if i.split == self.split]
        keep = self._fold(keep, items, where)
        if self.items is not None:
            if isinstance(self.items, str):
                raise ValueError(f"{where}: items = {self.items!r}; expected a sequence of item IDs")
            known = {i.item_id for i in items}
            unknown = [i for i in self.items if i not in known]
            if unknown:
                raise ValueError(f"{where}: items names {len(unknown)} ID(s) not among the store's ok items: "
                                 f"{', '.join(map(repr, unknown[:5]))}{', ...' if len(unknown) > 5 else ''}")
            wanted = set(self.items)
            keep = [i for i in keep if i.item_id in wanted]
        if self.where is not None:
            labels = frozenset(k for i in items for k in i.labels)
            keep = [i for i in keep if self._where(i, labels, where)]
        if not keep:
            raise ValueError(f"{where}: the selection ({self.describe().lstrip(', ')}) keeps none of the store's "
                             f"{len(items)} items")
        return tuple(keep)

    def _fold(self, keep: list[IndexItem], items: Sequence[IndexItem], where: str) -> list[IndexItem]:
        if self.fold is None:
            if self.holdout is not None:
                raise ValueError(f"{where}: holdout = {self.holdout!r} needs fold=")
            return keep
        folds = sorted({i.fold for i in items if i.fold is not None})
        if not folds:
            raise ValueError(f"{where}: fold = {self.fold!r}, but the store has no folds; set [splits] folds in the "
                             "delivery spec and convert again")
        if self.fold not in folds:
            raise ValueError(f"{where}: fold = {self.fold!r}; the store's folds are {folds[0]}..{folds[-1]}")
        if self.holdout is None:
            raise ValueError(f"{where}: fold = {self.fold} needs holdout=True (the fold's validation items) or "
                             "holdout=False (its training items: every other fold)")
        return [i for i in keep if i.fold is not None and (i.fold == self.fold) == self.holdout]

    def _where(self, item: IndexItem, labels: frozenset[str], where: str) -> bool:
        if callable(self.where):
            return bool(self.where(item))
        assert self.where is not None
        for key, allowed in self.where.items():
            if key in labels:
                value: object = item.labels.get(key, "")
            elif key in _FIELDS:
                value = getattr(item, key)
            else:
                raise ValueError(f"{where}: where= names {key!r}, which is neither a label of the store "
                                 f"({', '.join(sorted(labels)) or 'none'}) nor one of {', '.join(_FIELDS)}")
            if isinstance(allowed, str) or not isinstance(allowed, Collection):
                allowed = (allowed,)
            if value not in allowed:
                return False
        return True

    def describe(self) -> str:
        """The selection as `repr` shows it (`""` when it selects everything)."""
        parts = [f"{name}={value!r}" for name, value in (
            ("split", self.split), ("fold", self.fold), ("holdout", self.holdout), ("kind", self.kind),
            ("items", None if self.items is None else f"{len(self.items)} IDs"),
            ("where", None if self.where is None else ("<callable>" if callable(self.where) else dict(self.where))),
        ) if value is not None]
        return "".join(f", {p}" for p in parts)
