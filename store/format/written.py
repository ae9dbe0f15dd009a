"""The record of which storage files of an array hold data: what lets a reader tell a lost file from a chunk
never written.

Invariant: an array sealed by labzarr carries, in its own attributes (`STORED`), the size in bytes of every
storage file (a shard when sharded, else a chunk) in C order of its storage grid, 0 for a file that was never
written (its voxels are the fill value). A reader then treats a missing file that the record sizes as damage, a
file of another size as damage (truncated or replaced), and only a 0 entry as fill value. Zarr itself cannot tell
the two apart: to it an absent key always means fill value. The record rides in the array's `zarr.json`, which
every reader reads anyway, so checking costs no extra request.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import zarr

__all__ = ["STORED", "StoredFiles"]

STORED = "stored"  # the array attribute holding the record


@dataclass(frozen=True, slots=True)
class StoredFiles:
    """The size of every storage file of one array, by grid position (C order); 0: never written."""

    grid: tuple[int, ...]
    nbytes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.nbytes) != math.prod(self.grid):
            raise ValueError(f"{len(self.nbytes)} sizes for a storage grid of {list(self.grid)}")

    @classmethod
    def of_array(cls, array: zarr.Array[Any], sizes: Mapping[str, int]) -> StoredFiles:
        """The record of the open `array`, whose folder holds `sizes` (key relative to the array -> bytes)."""
        unit = array.shards or array.chunks
        grid = tuple(-(-int(n) // int(u)) for n, u in zip(array.shape, unit))
        key = array.metadata.encode_chunk_key
        return cls(grid=grid, nbytes=tuple(int(sizes.get(key(c), 0))
                                           for c in itertools.product(*(range(n) for n in grid))))

    def missing(self, array: zarr.Array[Any], *, allowed: Collection[str] = ()) -> list[str]:
        """Keys of `array`'s storage files recorded as never written, but for `allowed`: after a write that stores
        every chunk, each one is a file that went missing."""
        cells = itertools.product(*(range(n) for n in self.grid))
        key = array.metadata.encode_chunk_key
        return [k for c, n in zip(cells, self.nbytes) if not n and (k := key(c)) not in allowed]

    def size(self, coords: Sequence[int]) -> int:
        """The recorded size of the storage file at grid `coords` (0: never written, reads as fill value)."""
        at = 0
        for c, n in zip(coords, self.grid):
            at = at * n + int(c)
        return self.nbytes[at]

    def encode(self) -> dict[str, Any]:
        """The record as the JSON value of the `STORED` attribute."""
        return {"grid": list(self.grid), "nbytes": list(self.nbytes)}

    @classmethod
    def decode(cls, value: object) -> StoredFiles:
        """The record of a `STORED` attribute; raises ValueError naming what does not parse."""
        if not isinstance(value, Mapping):
            raise ValueError(f"{STORED!r} is not an object")
        grid, nbytes = value.get("grid"), value.get("nbytes")
        if not isinstance(grid, list) or not isinstance(nbytes, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*grid, *nbytes]):
            raise ValueError(f"{STORED!r} needs lists of non-negative integers 'grid' and 'nbytes'")
        return cls(grid=tuple(grid), nbytes=tuple(nbytes))
