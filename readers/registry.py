"""Content sniffing and reader dispatch: one ordered tuple, first match wins; the extension is never consulted."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Final, Protocol

from ._head import Head
from .nifti import NiftiReader
from .records import Limits, Volume

__all__ = ["Reader", "READERS", "reader_for"]


class Reader(Protocol):
    """One raw format. `kind` is also the manifest's `kind` column."""

    kind: ClassVar[str]

    def sniff(self, head: bytes) -> bool:
        """True when `head` (first KiB, already un-gzipped) is this format."""
        ...

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Decode and validate the whole file; raise `Rejected`, never return junk."""
        ...


READERS: Final[tuple[Reader, ...]] = (NiftiReader(),)


def reader_for(head: bytes) -> Reader | None:
    """The first reader in `READERS` that recognises `head`, or None."""
    return next((r for r in READERS if r.sniff(head)), None)
