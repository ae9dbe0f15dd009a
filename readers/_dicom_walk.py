"""Walking a DICOM file's data set, up to its pixel data, from bytes in memory into the dataset `dcmread` would give.

Why not `pydicom.dcmread(stop_before_pixels=True)`: its element generator
works through a file object (a read, a tell and checks for every element) and
takes well over twice as long as this walk over the same bytes; probing reads
the header of every file of a delivery, so on a series of many small slices
that is much of a conversion (`bench/dicom.py` reads headers both ways;
docs/benchmarks.md keeps the figures).

Invariant: the walk yields what pydicom's reader yields, element for element:
pydicom `RawDataElement`s (same tag, VR, length, value bytes, value offset and
encoding), so every value is still decoded by pydicom, lazily, exactly as it
decodes a `dcmread` dataset's; an undefined-length sequence is read by
pydicom's own `read_sequence`. The result is a `FileDataset` with its File Meta,
preamble and original encoding set as `dcmread` sets them.

Scope: a file with its 128-byte preamble and "DICM", a File Meta group in
explicit VR little endian naming an implicit or explicit VR little endian,
explicit VR big endian, or encapsulated transfer syntax. Anything else, or
anything unusual on the way (no File Meta, deflated data, command-set
elements, a VR that is not one pydicom knows, an element or sequence running
past the bytes given, a data set whose first element contradicts its transfer
syntax), returns None: the caller reads that file with `dcmread`, which then
decides how it reads, warns or fails. tests/readers/test_dicom_walk.py checks
the walk against `dcmread` on every DICOM file pydicom and nibabel ship.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO, cast

import pydicom.uid
from pydicom import config
from pydicom.charset import convert_encodings, default_encoding
from pydicom.datadict import dictionary_VR
from pydicom.dataelem import DataElement, RawDataElement, empty_value_for_VR
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.filebase import DicomBytesIO
from pydicom.filereader import read_sequence
from pydicom.tag import BaseTag
from pydicom.valuerep import EXPLICIT_VR_LENGTH_32, VR
from pydicom.values import convert_string

__all__ = ["DecodedValues", "Walked", "walk_header"]

_PIXEL_TAGS = frozenset((0x7FE00010, 0x7FE00008, 0x7FE00009))  # Pixel Data, Float and Double Float Pixel Data
_SPECIFIC_CHARACTER_SET = 0x00080005
_ITEM_DELIMITER, _ITEM = 0xFFFEE00D, 0xFFFEE000
_UNDEFINED = 0xFFFFFFFF
_CACHED_BYTES = 256  # longer values (text blobs, private data) are seldom repeated and costly to key on
_VRS = {str(vr).encode(): (str(vr), vr in EXPLICIT_VR_LENGTH_32) for vr in VR}  # VR bytes: (VR, 4-byte length)
# Elements are made as tuples of all of RawDataElement's fields (its generated __new__ costs as much as the
# rest of a step of the walk): the fields the walk fills, then the defaults of the rest, as pydicom declares them.
_FILLED = ("tag", "VR", "length", "value", "value_tell", "is_implicit_VR", "is_little_endian")
if RawDataElement._fields[: len(_FILLED)] != _FILLED:
    raise ImportError(f"pydicom's RawDataElement fields are {RawDataElement._fields}; this walk fills {_FILLED}")
_DEFAULTS = tuple(RawDataElement._field_defaults[f] for f in RawDataElement._fields[len(_FILLED):])


class _Unwalkable(Exception):
    """This file is left to `dcmread`."""


_Key = tuple[int, str | None, bytes, bool, bool, str | tuple[str, ...]]  # tag, VR, value, implicit, little, encoding


class DecodedValues:
    """Elements pydicom decoded in earlier files, to reuse in later ones: the files of one series repeat most of
    their header byte for byte (the same Rows, PixelSpacing, Manufacturer, ...), so a walk that meets an element
    with the same tag, VR, value bytes and encoding as one decoded before puts that decoded element in its
    dataset instead of a raw one, and pydicom does not decode it again.

    Shared elements are only ever read: a walked dataset serves to read a header and is then dropped. Only
    short values of public (even-group), non-sequence elements are kept, at most `limit` of them; one instance
    serves one batch of files (`convert/probe.py`), never the whole process.
    """

    def __init__(self, *, limit: int = 4096) -> None:
        self._decoded: dict[_Key, DataElement] = {}
        self._limit = limit

    def get(self, key: _Key) -> DataElement | None:
        """The decoded element of an earlier file with this (tag, VR, value, implicit, little, encoding)."""
        return self._decoded.get(key)

    def learn(self, walked: Walked) -> None:
        """Keep what pydicom decoded of `walked` (after its header was read) for the next files."""
        for tag, key in walked.raw.items():
            if len(self._decoded) >= self._limit:
                return
            elem = walked.dataset.get_item(tag)
            if isinstance(elem, DataElement):
                self._decoded[key] = elem


@dataclass(frozen=True, slots=True)
class Walked:
    """A walked header: the dataset `dcmread(stop_before_pixels=True)` would return, and `pixel_at`, the offset of
    its top-level pixel data element (where `dcmread` leaves the file), or the end of the file when it has none.
    `raw`: the elements it holds raw that `DecodedValues` may keep once decoded, with their keys there."""

    dataset: FileDataset
    pixel_at: int
    raw: dict[BaseTag, _Key] = field(default_factory=dict)


def walk_header(buf: bytes, *, name: str, whole: bool, values: DecodedValues | None = None) -> Walked | None:
    """Walk the DICOM file `name` whose first bytes are `buf` (all of it when `whole`), reusing elements `values`
    holds; None: read it with dcmread."""
    if len(buf) < 132 or buf[128:132] != b"DICM":
        return None
    try:
        return _walk_file(buf, name, whole, values)
    except _Unwalkable:
        return None


def _walk_file(buf: bytes, name: str, whole: bool, values: DecodedValues | None) -> Walked:
    meta_elements, pos, _ = _elements(buf, 132, implicit=False, little=True, meta=True, whole=whole)
    if not meta_elements:
        raise _Unwalkable("no File Meta group")
    meta = FileMetaDataset(meta_elements)
    meta.set_original_encoding(is_implicit_vr=False, is_little_endian=True, character_encoding=default_encoding)
    syntax = meta.get("TransferSyntaxUID")
    if syntax is None or pos + 8 > len(buf):
        raise _Unwalkable("no transfer syntax, or nothing after the File Meta group")
    ts = pydicom.uid.UID(str(syntax))
    if ts == pydicom.uid.ImplicitVRLittleEndian:
        implicit, little = True, True
    elif ts == pydicom.uid.ExplicitVRBigEndian:
        implicit, little = False, False
    elif ts in (pydicom.uid.DeflatedExplicitVRLittleEndian, *pydicom.uid.PrivateTransferSyntaxes):
        raise _Unwalkable(f"transfer syntax {ts}")
    else:  # explicit VR little endian, and every encapsulated syntax
        implicit, little = False, True
    group = struct.unpack_from("<H" if little else ">H", buf, pos)[0]
    looks_explicit = 0x40 < buf[pos + 4] < 0x5B and 0x40 < buf[pos + 5] < 0x5B
    if group == 0 or looks_explicit == implicit:  # command-set elements, or a VR switch dcmread would detect
        raise _Unwalkable("command set, or a data set encoded against its transfer syntax")
    raw: dict[BaseTag, _Key] = {}
    elements, pixel_at, _ = _elements(buf, pos, implicit=implicit, little=little, meta=False, whole=whole,
                                      values=values, raw=raw)
    # dcmread wraps the elements in a Dataset first and gives the FileDataset that Dataset's character set:
    # the same elements, the same default parent encoding, so the FileDataset's own character set is it.
    ds = FileDataset(name, elements, buf[:128], meta, implicit, little)
    ds.set_original_encoding(implicit, little, ds._character_set)
    return Walked(ds, pixel_at, raw)


def _elements(buf: bytes, pos: int, *, implicit: bool, little: bool, meta: bool, whole: bool,
              values: DecodedValues | None = None, raw: dict[BaseTag, _Key] | None = None
              ) -> tuple[dict[BaseTag, RawDataElement | DataElement], int, str | list[str]]:
    """The elements from `pos` on, as pydicom's data_element_generator yields them: (elements, where the walk
    stopped, the character encoding). The File Meta walk (`meta`) stops at the first element not in group 2; the
    data set's walk stops at a top-level pixel data element, or at the end of a `whole` buffer. An element
    `values` holds is taken decoded from there; the others `values` may keep are listed in `raw`."""
    endian = "<" if little else ">"
    head = struct.Struct(f"{endian}HHL" if implicit else f"{endian}HH2sH").unpack_from
    long_length = struct.Struct(f"{endian}L").unpack_from
    out: dict[BaseTag, RawDataElement | DataElement] = {}
    encoding: str | list[str] = default_encoding
    shared: str | tuple[str, ...] = default_encoding  # `encoding`, hashable, for the keys of `values`
    end = len(buf)
    new, raw_type = tuple.__new__, RawDataElement  # a RawDataElement without its Python-level __new__
    vrs, pixel_tags, defaults = _VRS, _PIXEL_TAGS, _DEFAULTS
    lookup = values.get if values is not None else None
    while True:
        if pos + 8 > end:
            if whole and pos == end:
                return out, end, encoding
            # A few bytes short of an element (dcmread stops quietly there; the header check calls it cut), or
            # the header runs past the bytes read.
            raise _Unwalkable("the file ends inside an element header, or the header runs past the bytes read")
        vr: str | None
        if implicit:
            group, elem, length = head(buf, pos)
            vr, value_at = None, pos + 8
        else:
            group, elem, raw_vr, length = head(buf, pos)
            if meta and group != 2:  # whatever encoding follows the File Meta group
                return out, pos, encoding
            known = vrs.get(raw_vr)
            if known is None:
                raise _Unwalkable(f"VR {raw_vr!r}")
            vr, long = known
            if long:
                if pos + 12 > end:
                    raise _Unwalkable("element header cut")
                length, value_at = long_length(buf, pos + 8)[0], pos + 12
            else:
                value_at = pos + 8
        tag = group << 16 | elem
        if (meta and group != 2) or (not meta and tag in pixel_tags):
            return out, pos, encoding
        if tag == _ITEM_DELIMITER:
            raise _Unwalkable("item delimiter at the top level")
        key = BaseTag(tag)
        if length != _UNDEFINED:
            pos = value_at + length
            if pos > end:
                raise _Unwalkable("element value past the bytes read")
            # empty: what pydicom's reader puts there (b"" for text and SQ, else None), as raw bytes
            value = buf[value_at:pos] if length else cast(bytes | None, empty_value_for_VR(vr, raw=True))
            if tag == _SPECIFIC_CHARACTER_SET:
                encoding = convert_encodings(convert_string(value or b"", little))
                shared = encoding if isinstance(encoding, str) else tuple(encoding)
            # Worth sharing: a short value of a public (even-group) element that is not a sequence.
            if raw is not None and not group & 1 and 0 < length <= _CACHED_BYTES and vr != "SQ":
                cache_key: _Key = (tag, vr, value, implicit, little, shared)  # type: ignore[assignment]  # length > 0: bytes
                hit = lookup(cache_key) if lookup is not None else None
                if hit is not None:
                    out[key] = hit
                    continue
                raw[key] = cache_key
            out[key] = new(raw_type, (key, vr, length, value, value_at, implicit, little, *defaults))
            continue
        if meta or not _is_sequence(buf, value_at, tag, vr, endian):
            raise _Unwalkable("undefined length outside a sequence")
        fp = DicomBytesIO(buf)
        fp.is_little_endian, fp.is_implicit_VR = little, implicit
        fp.seek(value_at)
        try:
            seq = read_sequence(cast(BinaryIO, fp), implicit, little, length, encoding)
        except Exception as exc:  # a cut or malformed sequence: dcmread decides what that means
            raise _Unwalkable(f"sequence {key}: {exc}") from exc
        pos = fp.tell()
        if pos > end or (pos == end and not whole):
            raise _Unwalkable("sequence past the bytes read")
        out[key] = DataElement(key, VR.SQ, seq, value_at, is_undefined_length=True)


def _is_sequence(buf: bytes, at: int, tag: int, vr: str | None, endian: str) -> bool:
    """pydicom's rule for an undefined-length element: UN is read as SQ, an implicit VR as its dictionary VR, and
    a private one as SQ when an item follows."""
    if vr == VR.UN and config.settings.infer_sq_for_un_vr:
        return True
    if vr is None or (vr == VR.UN and config.replace_un_with_known_vr):
        try:
            return bool(dictionary_VR(tag) == VR.SQ)
        except KeyError:
            if at + 4 > len(buf):
                return False
            group, elem = struct.unpack_from(f"{endian}HH", buf, at)
            return bool((group << 16 | elem) == _ITEM)
    return vr == VR.SQ
