"""Reading a store: the per-process `Transport` every kind of location hands out (`Location.transport()`).

Invariant: a `Transport` is per process. It opens files (or an fsspec filesystem)
lazily and forgets them in a child process (a new pid opens its own), so a
handle made before a fork is never used after it, and nothing it holds is
pickled. Keys are the store's posix paths relative to its root (`zarr.json`,
`volumes/case1/c/0/0/0/0`). Reads are byte ranges: a suffix (`start < 0`) for a
shard index, then `(start, length)` ranges for the chunks a region touches.
A missing key raises `FileNotFoundError`, a range past an object's end
`EOFError`; nothing here ever returns fill bytes. Within its process a transport
is safe to read from several threads at once (a batch's chunks are fetched in
the reader's thread pool): what it opens lazily is opened under a lock, and a
file is never closed while a read on it is in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Descriptors", "Range", "Transport"]

Range = tuple[int, int]  # (start, length); start < 0 with length 0 reads the last -start bytes


class Descriptors(Protocol):
    """Open file descriptors of a store's keys, for reading with `pread` outside Python (the compiled batched
    read, `store/_batched.py`): a descriptor taken is open until given back, whatever else the transport closes."""

    def take(self, key: str) -> int:
        """The open descriptor of `key`, held until `give`; raises FileNotFoundError for a missing key."""

    def give(self, fd: int) -> None:
        """The end of a use of `fd` from `take`."""


class Transport(Protocol):
    """Read access to the keys of one store, in this process."""

    @property
    def where(self) -> str:
        """The store's path or URL, for messages."""

    def read(self, key: str) -> bytes:
        """The whole object at `key`."""

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> list[bytes]:
        """The bytes of each range of `key`, in order (a suffix range: the object's last bytes)."""

    def size(self, key: str) -> int:
        """The length of the object at `key`."""

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under `prefix` (all keys for "") with its length, from one listing."""

    def close(self) -> None:
        """Close what this process holds open (files, a connection); a later read opens it again."""

    def descriptors(self) -> Descriptors | None:
        """File descriptors of this store's keys (a local folder's), or None where keys are no files of their own
        (a zip's members, a URL's objects)."""
