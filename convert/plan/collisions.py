"""ID collisions: one item ID given to distinct contents, found from rows alone (pure).

`[items] id_pattern` can give two different files the same ID (a pattern that matches a
folder name gives every file in it that folder's ID). Both stay items, stored as `<id>~1`,
`<id>~2`, with one label between them: nothing is rejected, but the run says so, in
`labzarr check`, the console summary and `summary.json` (`id_collisions`); console.collision_lines words it.

A *content* is a file's (or a DICOM series') sha256; the parts one series is split into
(echoes, image planes, matrix sizes) count as that series, so a multi-echo scan is one
content, not a collision. Files that are not items (`ignored`) and rows without content
(a dangling symlink) never collide; a byte-identical copy under the same ID is one content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..manifest import Row
from .series import series_of

__all__ = ["Collisions", "IdCollision", "collision_summary", "find_collisions"]


@dataclass(frozen=True, slots=True)
class IdCollision:
    """One item ID and the rows (in manifest order) holding its distinct contents."""

    item_id: str
    rows: tuple[Row, ...]

    @property
    def contents(self) -> int:
        """How many distinct contents share the ID."""
        return len({_content(r) for r in self.rows})


def _content(row: Row) -> str:
    # The parts of one split series share its source stem; any other row is its bytes.
    return f"series:{series_of(row.source)}" if row.kind == "dicom" and series_of(row.source) else row.sha256


class Collisions:
    """`find_collisions` a row at a time, the rows given in manifest order (by item ID, then source): what it holds
    is the rows of one item ID."""

    def __init__(self) -> None:
        self.found: list[IdCollision] = []
        self._item = ""
        self._group: list[Row] = []

    def add(self, row: Row) -> None:
        if row.status == "ignored" or not row.item_id or not row.sha256:
            return
        if row.item_id != self._item:
            self._close()
            self._item = row.item_id
        self._group.append(row)

    def done(self) -> tuple[IdCollision, ...]:
        """Every ID that more than one distinct content carries, sorted by ID."""
        self._close()
        return tuple(self.found)

    def _close(self) -> None:
        if len({_content(r) for r in self._group}) > 1:
            self.found.append(IdCollision(self._item, tuple(self._group)))
        self._group = []


def find_collisions(rows: Sequence[Row]) -> tuple[IdCollision, ...]:
    """Every ID that more than one distinct content carries, sorted by ID; rows sorted by source."""
    found = Collisions()
    for row in sorted(rows, key=lambda r: (r.item_id, r.source)):
        found.add(row)
    return found.done()


def collision_summary(collisions: Sequence[IdCollision]) -> list[dict[str, Any]]:
    """`summary.json`'s `id_collisions`: per ID, each row's source, status, file count, sha256 and array."""
    return [{"id": c.item_id, "contents": c.contents,
             "items": [{"source": r.source, "status": r.status, "n_files": r.n_files, "sha256": r.sha256,
                        "array": r.group or r.array} for r in c.rows]}
            for c in collisions]
