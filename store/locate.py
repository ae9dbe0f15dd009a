"""A store's location for writing and bookkeeping: a local `Folder` or a `UrlStore`, told apart once, here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .folder import Folder
from .location import is_url
from .url import UrlStore

__all__ = ["Location", "as_location", "sorted_glob"]

Location = Folder | UrlStore


def as_location(store: str | os.PathLike[str] | Location, options: Mapping[str, Any] | None = None) -> Location:
    """The location of `store`: a URL store for an fsspec URL (trailing `/` dropped, with `options`), else the
    local folder (`file://` stripped)."""
    if isinstance(store, Folder | UrlStore):
        return store
    text = os.fspath(store)
    if is_url(text):
        return UrlStore(text.rstrip("/"), dict(options or {}))
    return Folder(text.removeprefix("file://"))


def sorted_glob(where: Location, pattern: str) -> list[Location]:
    """`where`'s entries matching `pattern`, ordered by name (a directory lists in no set order)."""
    found: list[Location] = [*where.glob(pattern)]
    return sorted(found, key=lambda p: p.name)
