"""Probing: the per-file facts planning needs (content hash, sniffed kind, a 2D image's or a DICOM file's header),
read on dask workers.

No pixel is decoded here: a 2D reader's `plane` reads only the header, so
planning can give every 2D image its stack and slot before any decoding; a
DICOM file's header is read here too, in the batch that hashes it, so the
driver receives one small frozen record per file and plans series from those
alone -- no dataset and no pixel ever reaches the driver.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import pickle
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias, cast

from labzarr.readers import (
    ByFields,
    DicomHeader,
    DicomReader,
    Head,
    Plane,
    Reader,
    Reason,
    Rejected,
    as_planar,
    looks_like_text,
    read_head,
    reader_for,
    readers_with,
)

_ReadDicom: TypeAlias = Callable[[Path, Head], DicomHeader]  # `read_dicom_header` with a batch's shared values

__all__ = ["Probe", "ProbedBatch", "probe_batch", "probe_files", "probe_with"]

log = logging.getLogger(__name__)

_HASH_BLOCK = 1 << 20
_WHOLE_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Probe(ByFields):
    """What one file is: `kind` is a reader's kind, or None for content no reader knows."""

    rel: str
    size: int
    sha256: str
    kind: str | None
    text: bool  # content (un-gzipped) reads as text: notes, CSV, logs
    gzipped: bool
    gzip_error: str | None  # the head of a gzip stream did not inflate
    magic: bytes  # first 16 content bytes, for details
    plane: Plane | None = None  # a 2D image's decoded (C, H, W) and dtype, from its header
    header_rejected: tuple[Reason, str] | None = None  # a 2D or DICOM header already refused: (reason, detail)
    dicom: DicomHeader | None = None  # kind "dicom": the header, read with stop_before_pixels
    error: str | None = None  # the file could not be read (permissions, I/O error, vanished)


def probe_files(files: Sequence[tuple[str, str]], readers: Sequence[Reader] | None = None) -> list[Probe]:
    """Probe a batch of (rel, path) pairs with `readers` (default `READERS`); one dask task per batch keeps per-task
    overhead small, and the DICOM files of a batch (mostly slices of one series) share the header values pydicom
    decoded once."""
    # Imported here, where the files are read: the driver imports this module for `Probe` alone, and pydicom with
    # the built-in readers only where it probes (readers/__init__.py).
    from labzarr.readers import READERS, DecodedValues, read_dicom_header

    # One reader for the batch, bound to the values its files share: imported once, not once a file.
    read_dicom = functools.partial(read_dicom_header, values=DecodedValues())
    chosen = READERS if readers is None else readers
    return [_probe_or_error(rel, Path(path), chosen, read_dicom) for rel, path in files]


def probe_with(files: Sequence[tuple[str, str]], plugins: Sequence[str]) -> list[Probe]:
    """`probe_files` with the readers of a run (`readers_with(plugins)`), chosen where the batch runs: the driver
    then sends only the plugins' names and imports no reader's format library (readers/__init__.py)."""
    return probe_files(files, readers_with(plugins))


@dataclass(frozen=True, slots=True)
class ProbedBatch:
    """A batch's probes as they reach the driver: pickled where they were made, and unpickled once, when the plan
    reads them (`run/probe_table.py`), not on arrival too; with what the driver uses meanwhile, their rels and the
    bytes probed. The driver then keeps the pickle on disk as it came: unpickling thousands of probes (each a
    `Probe`, a `DicomHeader` and its frames, rebuilt by their constructors) and pickling them again to disk was most
    of what the driver did during a large probe (docs/benchmarks.md)."""

    rels: tuple[str, ...]  # the probes' rels, in their order
    size: int  # the bytes of the files probed
    pickled: bytes  # the list of probes, pickled

    @staticmethod
    def of(probes: Sequence[Probe]) -> ProbedBatch:
        """`probes` packed: their rels, their bytes, and the list of them pickled."""
        return ProbedBatch(tuple(p.rel for p in probes), sum(p.size for p in probes),
                           pickle.dumps(list(probes), protocol=pickle.HIGHEST_PROTOCOL))

    def probes(self) -> list[Probe]:
        """The probes themselves."""
        return cast(list[Probe], pickle.loads(self.pickled))


def probe_batch(files: Sequence[tuple[str, str]], plugins: Sequence[str]) -> ProbedBatch:
    """`probe_with`, packed for the driver (`ProbedBatch`): the job a runner runs for each batch of the probe."""
    return ProbedBatch.of(probe_with(files, plugins))


def _probe_or_error(rel: str, path: Path, readers: Sequence[Reader], read_dicom: _ReadDicom) -> Probe:
    try:
        return _probe(rel, path, readers, read_dicom)
    except OSError as exc:
        return Probe(rel=rel, size=0, sha256="", kind=None, text=False, gzipped=False, gzip_error=None, magic=b"",
                     error=f"{type(exc).__name__}: {exc.strerror or exc}")


def _probe(rel: str, path: Path, readers: Sequence[Reader], read_dicom: _ReadDicom) -> Probe:
    # Every byte is hashed anyway: a file up to _WHOLE_BYTES is read once, for its hash and its reader alike.
    head = read_head(path, whole_up_to=_WHOLE_BYTES)
    gzip_error = None
    if head.gzipped and not head.data:
        try:
            zlib.decompressobj(wbits=31).decompress(head.raw)
            gzip_error = f"gzip stream holds no data in its first {len(head.raw):,} B"
        except zlib.error as exc:
            gzip_error = f"gzip stream broken at its start: {exc}"
    reader = reader_for(head.data, readers) if head.data else None
    plane, header_rejected = _plane(reader, path, head)
    dicom = None
    if reader is not None and reader.kind == DicomReader.kind:
        try:
            dicom = read_dicom(path, head)
        except Rejected as exc:
            header_rejected = (exc.reason, exc.detail)
        except Exception as exc:  # a per-file boundary: a parser bug costs this file, not the probe batch
            log.exception("reading the DICOM header of %s crashed", rel)
            header_rejected = (Reason.DECODER_CRASH, f"header reader crashed: {type(exc).__name__}: {exc}")
    return Probe(
        rel=rel,
        size=head.size,
        sha256=hashlib.sha256(head.whole).hexdigest() if head.whole is not None else _sha256(path),
        kind=reader.kind if reader else None,
        text=looks_like_text(head.data),
        gzipped=head.gzipped,
        gzip_error=gzip_error,
        magic=head.data[:16],
        plane=plane,
        header_rejected=header_rejected,
        dicom=dicom,
    )


def _plane(reader: Reader | None, path: Path, head: Head) -> tuple[Plane | None, tuple[Reason, str] | None]:
    planar = as_planar(reader)
    if planar is None:
        return None, None
    try:
        return planar.plane(path, head), None
    except Rejected as exc:
        return None, (exc.reason, exc.detail)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()
