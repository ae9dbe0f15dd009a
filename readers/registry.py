"""Content sniffing and reader dispatch: one ordered tuple, first match wins; the extension is never consulted."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import ClassVar, Final, Protocol, runtime_checkable

from ._head import Head
from .dicom import DicomReader
from .jpeg import JpegReader
from .nifti import NiftiReader
from .png import PngReader
from .records import Limits, Plane, Volume
from .tiff import TiffReader

__all__ = ["PlanarReader", "Reader", "READERS", "as_planar", "reader_for"]


class Reader(Protocol):
    """One raw format. `kind` is also the manifest's `kind` column."""

    kind: ClassVar[str]

    def sniff(self, head: bytes) -> bool:
        """True when `head` (first KiB, already un-gzipped) is this format."""
        ...

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Decode and validate the whole file; raise `Rejected`, never return junk."""
        ...


@runtime_checkable
class PlanarReader(Reader, Protocol):
    """A 2D format: its header tells the decoded (C, H, W) and dtype, so planning can stack it before decoding."""

    def plane(self, path: Path, head: Head) -> Plane:
        """The image's Plane from its header alone (no pixel decoded); raise `Rejected` on a broken header."""
        ...


# Order is priority. DICOM goes first: `DICM` at offset 128 is decisive, and the 128-byte preamble may carry
# another format's header (an Analyze header in some Siemens files, TIFF in dual-personality DICOM-TIFF).
READERS: Final[tuple[Reader, ...]] = (DicomReader(), NiftiReader(), JpegReader(), PngReader(), TiffReader())


def as_planar(reader: Reader | None) -> PlanarReader | None:
    """`reader` as a PlanarReader when it reads 2D images, else None (cheaper than a Protocol isinstance per file)."""
    return reader if reader is not None and _has_plane(type(reader)) else None  # type: ignore[return-value]


@functools.cache
def _has_plane(cls: type) -> bool:
    return callable(getattr(cls, "plane", None))


def reader_for(head: bytes) -> Reader | None:
    """The first reader in `READERS` that recognises `head`, or None."""
    return next((r for r in READERS if r.sniff(head)), None)
