"""Content sniffing and reader dispatch: one ordered tuple, first match wins; the extension is never consulted.

Extension point: a spec may name extra readers (`[run] readers = ["pkg.mod:MyReader"]`), tried before the
built-in ones; `load_reader` imports one. That is how a lab plugs in an in-house format, and how the tests
plug in readers that crash or hang on purpose.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ._head import Head
from .records import Limits, Plane, Volume

if TYPE_CHECKING:
    READERS: tuple[Reader, ...]

__all__ = ["LabelMapReader", "PlanarReader", "Reader", "READERS", "as_planar", "load_reader", "reader_for",
           "readers_with"]


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


@runtime_checkable
class LabelMapReader(Reader, Protocol):
    """A 2D format whose stored values can be class indices (a palette PNG): read as a label map, not as colours."""

    def read_labels(self, path: Path, limits: Limits, head: Head) -> Volume:
        """The image as class values, one channel; raise `Rejected` as `read` does."""
        ...


# Order is priority. DICOM goes first: `DICM` at offset 128 is decisive, and the 128-byte preamble may carry
# another format's header (an Analyze header in some Siemens files, TIFF in dual-personality DICOM-TIFF).
# `READERS` is built on first use (PEP 562): a reader's module imports its format's library (pydicom, nibabel,
# Pillow, libjpeg-turbo), which a worker needs and the spec, the plan and the conversion driver do not.
@functools.cache
def _builtin() -> tuple[Reader, ...]:
    from .dicom import DicomReader
    from .jpeg import JpegReader
    from .nifti import NiftiReader
    from .png import PngReader
    from .tiff import TiffReader

    return (DicomReader(), NiftiReader(), JpegReader(), PngReader(), TiffReader())


def __getattr__(name: str) -> Any:
    if name == "READERS":
        return _builtin()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def as_planar(reader: Reader | None) -> PlanarReader | None:
    """`reader` as a PlanarReader when it reads 2D images, else None (cheaper than a Protocol isinstance per file)."""
    return reader if reader is not None and _has_plane(type(reader)) else None  # type: ignore[return-value]


@functools.cache
def _has_plane(cls: type) -> bool:
    return callable(getattr(cls, "plane", None))


def reader_for(head: bytes, readers: Sequence[Reader] | None = None) -> Reader | None:
    """The first reader in `readers` (default `READERS`) that recognises `head`, or None."""
    return next((r for r in (_builtin() if readers is None else readers) if r.sniff(head)), None)


def load_reader(ref: str) -> Reader:
    """Import the reader `module.path:Name` (a class taking no arguments, or an instance).

    Raises ValueError (malformed reference, not a reader) or ImportError.
    """
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise ValueError(f"{ref!r} is not of the form 'module.path:Name'")
    obj = getattr(importlib.import_module(module_name), attr, None)
    if obj is None:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
    reader = obj() if isinstance(obj, type) else obj
    missing = [name for name in ("kind", "sniff", "read") if not hasattr(reader, name)]
    if missing or not isinstance(getattr(reader, "kind", None), str):
        raise ValueError(f"{ref} is not a reader: it needs a str `kind` and `sniff`/`read` methods")
    return reader  # type: ignore[no-any-return]


def readers_with(plugins: Sequence[str]) -> tuple[Reader, ...]:
    """The readers for a run: `plugins` (imported, in order) before the built-in `READERS`."""
    return (*(load_reader(p) for p in plugins), *_builtin())
