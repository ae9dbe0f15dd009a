"""The last few results of a pure function, kept per process: what a batch asks for again costs nothing.

Invariant: only pure functions of their key are kept (an index item by position, an item's walk in an epoch),
so a result is the same whether it is kept or built again; a pickle carries the size alone, and each process
fills its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Recent"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """At most `size` results by key; when full, the one kept longest is dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: dict[K, V] = {}

    def get(self, key: K, build: Callable[[K], V]) -> V:
        """The result for `key`: kept, or `build(key)` (then kept)."""
        kept = self._kept
        if key in kept:
            return kept[key]
        value = kept[key] = build(key)
        if len(kept) > self.size:
            kept.pop(next(iter(kept)), None)  # a dict keeps insertion order: the first is the oldest
        return value

    def __len__(self) -> int:
        return len(self._kept)

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.size, self._kept = state["size"], {}
