"""A run's rows on disk as they complete: the driver keeps a row's place and sort key, not the row.

Workers return rows in any order, and the manifest lists them by (item_id, source). Each row is pickled to one
append-only, unnamed file as it arrives; in memory the spill keeps the row's end offset, its item_id and source
as UTF-8 bytes in two growing buffers, and for a row `duplicate_content` compares, the digest of what it is
compared by (`plan.splits.duplicate_key`). The manifest order is then a stable sort of those keys, the duplicates
a sort of the digests, and the rows are read back one at a time in either order. So what the driver holds per
row is its key (docs/benchmarks.md, "Scale: many tiny files").
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Generic, TypeVar, overload

import numpy as np

from labzarr.store.format.table import fixed_width

from ..manifest import Row
from ..plan.splits import duplicate_key
from ..source_index import utf8
from ..spec import SplitsSpec

__all__ = ["PickleFile", "RowFile", "RowSpill"]

_T = TypeVar("_T")
_DIGEST = 16  # bytes of a duplicate key's digest; equal digests are confirmed on the keys themselves


class PickleFile(Generic[_T]):
    """Objects of one type pickled one after another into an unnamed temporary file in `folder` (None: the system's
    temporary folder), a few bytes each in memory: appended (`append`), then read back by position (`load`). The
    file goes when the object is closed or collected."""

    def __init__(self, kind: type[_T], folder: Path | None = None) -> None:
        self._kind = kind
        self._file: IO[bytes] = tempfile.TemporaryFile(dir=folder)
        self._ends = array("q")  # where each object's pickle ends; object i starts where object i-1 ends
        self._size = 0
        self._unflushed = False  # objects appended since the file's buffer was last written out

    def close(self) -> None:
        self._file.close()

    def append(self, obj: _T) -> None:
        self.append_pickled(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def append_pickled(self, blob: bytes) -> None:
        """Append an object of this file's type that was pickled already (`pickle.dumps`); `load` checks its
        type."""
        self._file.write(blob)
        self._size += len(blob)
        self._ends.append(self._size)
        self._unflushed = True

    def __len__(self) -> int:
        return len(self._ends)

    def load(self, i: int) -> _T:
        """The `i`-th object appended (0 <= i < len)."""
        if self._unflushed:
            self._file.flush()
            self._unflushed = False
        start = self._ends[i - 1] if i else 0
        obj = pickle.loads(os.pread(self._file.fileno(), self._ends[i] - start, start))
        assert isinstance(obj, self._kind)
        return obj


class RowFile(Sequence[Row]):
    """Rows in an unnamed temporary file (`PickleFile`), a few bytes each in memory: appended (`append`), then read
    back by position, one at a time. What `RunResult.rows` is: the file goes when this object does."""

    def __init__(self, folder: Path | None = None) -> None:
        self._rows = PickleFile(Row, folder)

    def close(self) -> None:
        self._rows.close()

    def append(self, row: Row) -> None:
        self._rows.append(row)

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> Row: ...

    @overload
    def __getitem__(self, i: slice) -> list[Row]: ...

    def __getitem__(self, i: int | slice) -> Row | list[Row]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._rows.load(i)

    def __iter__(self) -> Iterator[Row]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"<RowFile: {len(self)} rows>"


class RowSpill:
    """Rows appended as they arrive (`add`), read back by position (`row`), whose order `manifest_order` gives.

    `splits`: the run's `[splits]`, which `duplicate_key` depends on. The file is unnamed (nothing to sweep
    after a killed run) and closed with the spill.
    """

    def __init__(self, folder: Path | None, *, splits: SplitsSpec | None) -> None:
        self._rows = RowFile(folder)
        self._splits = splits
        self._ids, self._id_ends = bytearray(), array("q")
        self._sources, self._source_ends = bytearray(), array("q")
        self._digests = bytearray()  # _DIGEST bytes a row; zeros where the row is not compared
        self._compared = bytearray()  # 1 where the row takes part in `duplicates`
        self._planar = bytearray()  # 1 where the row is a stack's image's (`add`)
        self.roles = False  # whether any row has roles (a delivery of samples: the manifest's role columns)
        self._sources_made: np.ndarray | None = None  # `_sources_column`, once made

    def __enter__(self) -> RowSpill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._rows.close()

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, row: Row, *, compared: bool = True, planar: bool = False) -> None:
        """Append `row`; `compared`: an ok row that `duplicates` may find a copy of (a decoded one); `planar`: the
        row of a stack's image (from a shard task), whatever its outcome."""
        self._rows.append(row)
        self.roles = self.roles or bool(row.roles)
        self._ids += utf8(row.item_id)
        self._id_ends.append(len(self._ids))
        self._sources += utf8(row.source)
        self._source_ends.append(len(self._sources))
        compare = compared and row.status == "ok"
        self._compared.append(compare)
        self._planar.append(planar)
        self._digests += _digest(self._key(row)) if compare else bytes(_DIGEST)

    def row(self, i: int) -> Row:
        """The `i`-th row added."""
        return self._rows[i]

    def planar(self, i: int) -> bool:
        """Whether the `i`-th row added is a stack's image's (`add`)."""
        return bool(self._planar[i])

    def manifest_order(self) -> np.ndarray:
        """Positions in manifest order: by item_id, then source; rows equal in both stay in the order added
        (`manifest.sort_rows` over the rows in that order)."""
        return np.lexsort((self._sources_column(), fixed_width(self._ids, self._id_ends)))

    def duplicates(self) -> dict[int, int]:
        """Each compared ok row whose `duplicate_key` an earlier one has (by source, rows of one source in the order
        added), mapped to that first row's position: those are `duplicate_content`."""
        compared = np.flatnonzero(np.frombuffer(self._compared, dtype=np.uint8))
        if not len(compared):
            return {}
        by_source = np.argsort(self._sources_column(), kind="stable")
        rank = np.empty(len(self), dtype=np.int64)
        rank[by_source] = np.arange(len(self))
        digests = np.frombuffer(self._digests, dtype=f"S{_DIGEST}")  # fixed width: equal bytes, equal values
        # Sorted by digest, then by source rank: each run of equal digests starts with its first row by source.
        order = compared[np.lexsort((rank[compared], digests[compared]))]
        sorted_digests = digests[order]
        starts = np.flatnonzero(np.r_[True, sorted_digests[1:] != sorted_digests[:-1]])
        out: dict[int, int] = {}
        for a, b in zip(starts, [*starts[1:], len(order)]):
            if b - a > 1:  # equal digests: confirmed on the keys (a digest collision is two keys)
                first: dict[tuple[str, str], int] = {}
                for i in order[a:b]:
                    key = self._key(self.row(int(i)))
                    if key in first:
                        out[int(i)] = first[key]
                    else:
                        first[key] = int(i)
        return out

    def _key(self, row: Row) -> tuple[str, str]:
        return duplicate_key(self._splits, row.item_id, row.sha256)

    def _sources_column(self) -> np.ndarray:
        """The sources' column (`fixed_width`), made once for both `duplicates` and `manifest_order`; rows added after
        it was made make it anew."""
        if self._sources_made is None or len(self._sources_made) != len(self):
            self._sources_made = None  # the old column goes before the new one is made
            self._sources_made = fixed_width(self._sources, self._source_ends)
        return self._sources_made


def _digest(key: tuple[str, str]) -> bytes:
    return hashlib.blake2b(utf8(f"{key[0]}\0{key[1]}"), digest_size=_DIGEST).digest()
