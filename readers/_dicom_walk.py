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
decodes a `dcmread` dataset's. An undefined-length sequence is stepped over
(`sequence_end`) and kept raw too, its items read by pydicom's own
`read_sequence` from the same offset when it is first used: probing uses an
enhanced file's functional groups without that (`_dicom_groups.py`), since
pydicom makes a `Dataset` of every item of every frame. The result is a
`FileDataset` with its File Meta, preamble and original encoding set as
`dcmread` sets them.

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

import bisect
import functools
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
import pydicom.uid
from pydicom import config
from pydicom.charset import convert_encodings, default_encoding
from pydicom.datadict import dictionary_VR
from pydicom.dataelem import DataElement, RawDataElement, empty_value_for_VR
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.tag import BaseTag
from pydicom.valuerep import EXPLICIT_VR_LENGTH_32, VR
from pydicom.values import convert_string

__all__ = ["DecodedValues", "Unwalkable", "Walked", "is_sequence", "sequence_end", "tag_key", "walk_header"]

_PIXEL_TAGS = frozenset((0x7FE00010, 0x7FE00008, 0x7FE00009))  # Pixel Data, Float and Double Float Pixel Data
_SPECIFIC_CHARACTER_SET = 0x00080005
_ITEM_DELIMITER, _ITEM, _SEQUENCE_DELIMITER = 0xFFFEE00D, 0xFFFEE000, 0xFFFEE0DD
_UNDEFINED = 0xFFFFFFFF
# Elements a walk against a template never reads alone: they change how the rest is read.
_OWN_WALK = frozenset((_SPECIFIC_CHARACTER_SET, 0x00020010))  # and the Transfer Syntax UID
_CACHED_BYTES = 256  # longer values (text blobs, private data) are seldom repeated and costly to key on
_VRS = {str(vr).encode(): (str(vr), vr in EXPLICIT_VR_LENGTH_32) for vr in VR}  # VR bytes: (VR, 4-byte length)
# Elements are made as tuples of all of RawDataElement's fields (its generated __new__ costs as much as the
# rest of a step of the walk): the fields the walk fills, then the defaults of the rest, as pydicom declares them.
_FILLED = ("tag", "VR", "length", "value", "value_tell", "is_implicit_VR", "is_little_endian")
if RawDataElement._fields[: len(_FILLED)] != _FILLED:
    raise ImportError(f"pydicom's RawDataElement fields are {RawDataElement._fields}; this walk fills {_FILLED}")
_DEFAULTS = tuple(RawDataElement._field_defaults[f] for f in RawDataElement._fields[len(_FILLED):])
_IMPLICIT_LE, _IMPLICIT_BE = struct.Struct("<HHL").unpack_from, struct.Struct(">HHL").unpack_from
_EXPLICIT_LE, _EXPLICIT_BE = struct.Struct("<HH2sH").unpack_from, struct.Struct(">HH2sH").unpack_from
_LENGTH_LE, _LENGTH_BE = struct.Struct("<L").unpack_from, struct.Struct(">L").unpack_from


@functools.lru_cache(maxsize=1 << 14)
def tag_key(tag: int) -> BaseTag:
    """The one BaseTag object of a tag value that walked datasets are keyed by: a lookup by the very key object
    skips `BaseTag.__eq__`, Python code that a dict otherwise calls on every hit (some 140 a DICOM header read)."""
    return BaseTag(tag)


class Unwalkable(Exception):
    """This file (or sequence) is left to pydicom's own reader."""


DatasetT = TypeVar("DatasetT", bound=Dataset)
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
        self.template: _Template | None = None  # the last file walked whole: later files are walked against it

    def get(self, key: _Key) -> DataElement | None:
        """The decoded element of an earlier file with this (tag, VR, value, implicit, little, encoding)."""
        return self._decoded.get(key)

    def learn(self, walked: Walked) -> None:
        """Keep what pydicom decoded of `walked` (after its header was read) for the next files; a file walked
        element by element becomes the template the next files are compared with."""
        if walked.layout is not None and walked.pixel_at + 4 <= len(walked.buffer):
            self.template = _Template.of(walked, walked.layout)
        for tag, key in walked.raw.items():
            if len(self._decoded) >= self._limit:
                return
            elem = walked.dataset.get_item(tag)
            if isinstance(elem, DataElement):
                self._decoded[key] = elem


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where a walked file's elements lie: each of `starts` (the File Meta group's `n_meta` first, then the data
    set's) ends where the next starts, the last at the pixel data element; `encoding` is the data set's."""

    starts: tuple[int, ...]
    n_meta: int
    implicit: bool
    little: bool
    encoding: str | list[str]


@dataclass(frozen=True, slots=True)
class Walked:
    """A walked header: the dataset `dcmread(stop_before_pixels=True)` would return, and `pixel_at`, the offset of
    its top-level pixel data element (where `dcmread` leaves the file), or the end of the file when it has none.
    `raw`: the elements it holds raw that `DecodedValues` may keep once decoded, with their keys there.
    `layout`: where its elements lie, for a file walked element by element that can serve as a template."""

    dataset: FileDataset
    pixel_at: int
    raw: dict[BaseTag, _Key] = field(default_factory=dict)
    layout: _Layout | None = None
    buffer: bytes = b""  # the bytes walked, with a layout


@dataclass(frozen=True, slots=True)
class _Template:
    """A file of the batch walked element by element, with its elements as its header read left them (decoded
    where read): a later file is compared with its bytes (`_walk_like`), and the elements found byte for byte
    the same are its very objects."""

    data: np.ndarray  # the template's bytes up to its pixel data element's tag, as uint8
    end: int  # where its last element ends: its pixel data element
    keys: tuple[BaseTag, ...]
    tags: tuple[int, ...]  # the keys as plain ints, compared without BaseTag's Python-level __eq__
    meta: dict[BaseTag, RawDataElement | DataElement]  # the File Meta group's elements, by key
    elements: dict[BaseTag, RawDataElement | DataElement]  # the data set's: a later file's start as a copy
    layout: _Layout
    dataset: FileDataset

    @staticmethod
    def of(walked: Walked, layout: _Layout) -> _Template:
        ds = walked.dataset
        meta: dict[BaseTag, RawDataElement | DataElement] = {k: ds.file_meta.get_item(k) for k in ds.file_meta.keys()}
        elements: dict[BaseTag, RawDataElement | DataElement] = {k: ds.get_item(k) for k in ds.keys()}
        keys = (*meta, *elements)
        data = np.frombuffer(walked.buffer, np.uint8, count=walked.pixel_at + 4)
        return _Template(data, walked.pixel_at, keys, tuple(int(k) for k in keys), meta, elements, layout, ds)


def walk_header(buf: bytes, *, name: str, whole: bool, values: DecodedValues | None = None,
                mtime: float | None = None) -> Walked | None:
    """Walk the DICOM file `name` whose first bytes are `buf` (all of it when `whole`), reusing elements `values`
    holds, and against the batch's template where it has one; None: read it with dcmread. `mtime`: the file's
    modification time where the caller has it already (the dataset's `timestamp`), else it is read."""
    if len(buf) < 132 or buf[128:132] != b"DICM":
        return None
    try:
        if values is not None and values.template is not None:
            like = _walk_like(buf, name, values.template, values, mtime)
            if like is not None:
                return like
    except Unwalkable:
        pass  # walked element by element, which decides
    try:
        return _walk_file(buf, name, whole, values)
    except Unwalkable:
        return None


def _walk_file(buf: bytes, name: str, whole: bool, values: DecodedValues | None) -> Walked:
    starts: list[int] | None = [] if values is not None else None
    meta_elements, pos, _ = _elements(buf, 132, implicit=False, little=True, meta=True, whole=whole, starts=starts)
    if not meta_elements:
        raise Unwalkable("no File Meta group")
    meta = FileMetaDataset(meta_elements)
    meta.set_original_encoding(is_implicit_vr=False, is_little_endian=True, character_encoding=default_encoding)
    syntax = meta.get("TransferSyntaxUID")
    if syntax is None or pos + 8 > len(buf):
        raise Unwalkable("no transfer syntax, or nothing after the File Meta group")
    ts = pydicom.uid.UID(str(syntax))
    if ts == pydicom.uid.ImplicitVRLittleEndian:
        implicit, little = True, True
    elif ts == pydicom.uid.ExplicitVRBigEndian:
        implicit, little = False, False
    elif ts in (pydicom.uid.DeflatedExplicitVRLittleEndian, *pydicom.uid.PrivateTransferSyntaxes):
        raise Unwalkable(f"transfer syntax {ts}")
    else:  # explicit VR little endian, and every encapsulated syntax
        implicit, little = False, True
    _check_first(buf, pos, implicit, little)
    raw: dict[BaseTag, _Key] = {}
    elements, pixel_at, encoding = _elements(buf, pos, implicit=implicit, little=little, meta=False, whole=whole,
                                             values=values, raw=raw, starts=starts)
    # dcmread wraps the elements in a Dataset first and gives the FileDataset that Dataset's character set:
    # the same elements, the same default parent encoding, so the FileDataset's own character set is it.
    ds = FileDataset(name, elements, buf[:128], meta, implicit, little)
    ds.set_original_encoding(implicit, little, ds._character_set)
    if starts is None or not elements:
        return Walked(ds, pixel_at, raw)
    return Walked(ds, pixel_at, raw, _Layout(tuple(starts), len(meta_elements), implicit, little, encoding), buf)


def _check_first(buf: bytes, pos: int, implicit: bool, little: bool) -> None:
    """The data set's first element, at `pos`, must be encoded as the transfer syntax says."""
    group = struct.unpack_from("<H" if little else ">H", buf, pos)[0]
    looks_explicit = 0x40 < buf[pos + 4] < 0x5B and 0x40 < buf[pos + 5] < 0x5B
    if group == 0 or looks_explicit == implicit:  # command-set elements, or a VR switch dcmread would detect
        raise Unwalkable("command set, or a data set encoded against its transfer syntax")


def _walk_like(buf: bytes, name: str, t: _Template, values: DecodedValues, mtime: float | None = None,
               ) -> Walked | None:
    """Walk `buf` against the template `t`: where its bytes equal the template's, so do its elements (the
    template's own objects, decoded where its header read them); only the elements whose bytes differ are read
    from `buf`, and a length that differs shifts the rest. None where the two differ in any other way (another
    element, a sequence, a character set or transfer syntax that differs): `buf` is then walked element by
    element and becomes the template.

    The same dataset as `_walk_file`'s, but for one thing nothing reads: an element found the same carries the
    template's `value_tell` (as an element `DecodedValues` shares carries its first file's).
    """
    layout = t.layout
    implicit, little, starts, end = layout.implicit, layout.little, layout.starts, t.end
    data, limit = np.frombuffer(buf, np.uint8), end + 4  # the pixel data element's tag, where the template's is
    changed: dict[int, RawDataElement | DataElement] = {}
    raw: dict[BaseTag, _Key] = {}
    shared = layout.encoding if isinstance(layout.encoding, str) else tuple(layout.encoding)
    delta, pos = 0, starts[0]
    while True:
        at0 = pos - delta  # where the comparison starts, in the template
        if pos + limit - at0 > len(buf):
            return None
        differ = data[pos : pos + limit - at0] != t.data[at0:limit]
        shifted, k = False, 0
        # Only the first differing byte of each element matters: the next one past an element read is found by
        # argmax (which stops at the first), not by listing every differing byte (a private blob or a tail whose
        # alignment a changed length shifted differs in thousands).
        while True:
            k += int(differ[k:].argmax())
            if not differ[k]:
                break
            at = at0 + k
            if at >= end:
                return None  # no pixel data element where the template has its own
            j = bisect.bisect_right(starts, at) - 1
            in_meta = j < layout.n_meta
            start, t_end = starts[j] + delta, starts[j + 1] if j + 1 < len(starts) else end
            one = None if in_meta else _one_element(buf, start, t.tags[j], t.keys[j], implicit, little, values, raw,
                                                    shared)
            if one is not None:
                if j == layout.n_meta:
                    _check_first(buf, start, implicit, little)
                stop, changed[j] = one
            else:
                extent = _extent(buf, start, implicit=implicit and not in_meta, little=little or in_meta)
                if extent is None or t.keys[j] in _OWN_WALK:
                    return None
                stop = extent
                if j == layout.n_meta:
                    _check_first(buf, start, implicit, little)
                read, _, _ = _elements(buf, start, implicit=implicit and not in_meta, little=little or in_meta,
                                       meta=in_meta, whole=True, values=None if in_meta else values,
                                       raw=None if in_meta else raw, stop=stop,
                                       encoding=default_encoding if in_meta else layout.encoding)
                if list(read) != [t.keys[j]]:
                    return None
                changed[j] = read[t.keys[j]]
            if stop - t_end != delta:  # a length differs: compare the rest shifted
                delta, pos, shifted = stop - t_end, stop, True
                break
            k = t_end - at0  # the first byte past this element
            if k >= len(differ):
                break
        if not shifted:
            break
    if end + delta + 12 > len(buf):
        # a pixel data element cut inside its header: the element-by-element walk decides what that is
        return None
    n_meta, keys = layout.n_meta, t.keys
    elements = t.elements.copy()
    meta_elements = None
    for j, elem in changed.items():
        if j >= n_meta:
            elements[keys[j]] = elem
        else:
            if meta_elements is None:
                meta_elements = t.meta.copy()
            meta_elements[keys[j]] = elem
    meta = t.dataset.file_meta if meta_elements is None else _clone(t.dataset.file_meta, meta_elements)
    ds = _clone(t.dataset, elements, preamble=buf[:128], file_meta=meta, filename=name,
                timestamp=_mtime(name) if mtime is None else mtime)
    return Walked(ds, end + delta, raw)


def _one_element(buf: bytes, pos: int, tag: int, key: BaseTag, implicit: bool, little: bool, values: DecodedValues,
                 raw: dict[BaseTag, _Key], shared: str | tuple[str, ...],
                 ) -> tuple[int, RawDataElement | DataElement] | None:
    """The data set element at `pos`, which must be `tag`, and where it ends, as `_elements` reads a plain one (a
    defined length, inside `buf`, not the character set): `_walk_like` reads the elements that differ from the
    template one at a time, and `_elements`' set-up for a whole walk cost as much as reading one. None: anything
    else, left to `_elements`."""
    if pos + 8 > len(buf):
        return None
    if implicit:
        group, elem, length = (_IMPLICIT_LE if little else _IMPLICIT_BE)(buf, pos)
        vr, value_at = None, pos + 8
    else:
        group, elem, raw_vr, length = (_EXPLICIT_LE if little else _EXPLICIT_BE)(buf, pos)
        known = _VRS.get(raw_vr)
        if known is None:
            return None
        vr, long = known
        if long:
            if pos + 12 > len(buf):
                return None
            length, value_at = (_LENGTH_LE if little else _LENGTH_BE)(buf, pos + 8)[0], pos + 12
        else:
            value_at = pos + 8
    if (group << 16 | elem) != tag or length == _UNDEFINED or tag == _SPECIFIC_CHARACTER_SET:
        return None
    stop = value_at + length
    if stop > len(buf):
        return None
    value = buf[value_at:stop] if length else cast(bytes | None, empty_value_for_VR(vr, raw=True))
    if not group & 1 and 0 < length <= _CACHED_BYTES and vr != "SQ":  # as `_elements` shares values
        cache_key: _Key = (tag, vr, value, implicit, little, shared)  # type: ignore[assignment]  # length > 0: bytes
        hit = values.get(cache_key)
        if hit is not None:
            return stop, hit
        raw[key] = cache_key
    return stop, tuple.__new__(RawDataElement, (key, vr, length, value, value_at, implicit, little, *_DEFAULTS))


def _clone(like: DatasetT, elements: dict[BaseTag, RawDataElement | DataElement], **fields: object) -> DatasetT:
    """A dataset read like `like` (the same class, encoding and character set) holding `elements`: `like`'s
    attributes with its elements and its per-dataset caches replaced. pydicom's constructors set some twenty
    attributes through `Dataset.__setattr__`, which took about half of a walk against a template."""
    ds = like.__class__.__new__(like.__class__)
    keep = _constructed(isinstance(like, FileDataset))  # not what pydicom caches later from the template (`_pixel_rep`)
    state = {k: v for k, v in vars(like).items() if k in keep}
    state.update(_dict=elements, _private_blocks={}, _pixel_array=None, _pixel_array_opts=dict(like._pixel_array_opts),
                 _pixel_id={}, **fields)
    vars(ds).update(state)
    return ds


@functools.cache
def _constructed(file: bool) -> frozenset[str]:
    """The attributes pydicom's constructor gives a FileDataset (`file`) or a FileMetaDataset: a memo of what this
    pydicom does."""
    ds = FileDataset("", {}, b"\0" * 128, FileMetaDataset(), True, True) if file else FileMetaDataset()
    return frozenset(vars(ds))


def _mtime(name: str) -> float | None:
    """What FileDataset records as its `timestamp`."""
    try:
        return os.stat(name).st_mtime
    except OSError:
        return None


def _extent(buf: bytes, pos: int, *, implicit: bool, little: bool) -> int | None:
    """Where the element at `pos` ends; None for an undefined length, a VR pydicom does not know, or an element
    past the end of `buf`."""
    endian = "<" if little else ">"
    if pos + 8 > len(buf):
        return None
    if implicit:
        length, at = struct.unpack_from(f"{endian}L", buf, pos + 4)[0], pos + 8
    else:
        known = _VRS.get(buf[pos + 4 : pos + 6])
        if known is None:
            return None
        if known[1]:
            if pos + 12 > len(buf):
                return None
            length, at = struct.unpack_from(f"{endian}L", buf, pos + 8)[0], pos + 12
        else:
            length, at = struct.unpack_from(f"{endian}H", buf, pos + 6)[0], pos + 8
    if length == _UNDEFINED:
        try:
            return sequence_end(buf, at, implicit=implicit, little=little, end=len(buf)) + 8
        except Unwalkable:
            return None
    return at + length if at + length <= len(buf) else None


def _elements(buf: bytes, pos: int, *, implicit: bool, little: bool, meta: bool, whole: bool,
              values: DecodedValues | None = None, raw: dict[BaseTag, _Key] | None = None,
              starts: list[int] | None = None, stop: int | None = None, encoding: str | list[str] = default_encoding,
              ) -> tuple[dict[BaseTag, RawDataElement | DataElement], int, str | list[str]]:
    """The elements from `pos` on, as pydicom's data_element_generator yields them: (elements, where the walk
    stopped, the character encoding). The File Meta walk (`meta`) stops at the first element not in group 2; the
    data set's walk stops at a top-level pixel data element, or at the end of a `whole` buffer (at `stop`, when
    given, as if the buffer ended there). An element `values` holds is taken decoded from there; the others
    `values` may keep are listed in `raw`. `starts` collects where each element starts. `encoding`: the character
    set in force where the walk starts."""
    endian = "<" if little else ">"
    head = struct.Struct(f"{endian}HHL" if implicit else f"{endian}HH2sH").unpack_from
    long_length = struct.Struct(f"{endian}L").unpack_from
    out: dict[BaseTag, RawDataElement | DataElement] = {}
    shared = encoding if isinstance(encoding, str) else tuple(encoding)  # hashable, for the keys of `values`
    end = len(buf) if stop is None else stop
    new, raw_type = tuple.__new__, RawDataElement  # a RawDataElement without its Python-level __new__
    vrs, pixel_tags, defaults, intern = _VRS, _PIXEL_TAGS, _DEFAULTS, tag_key
    lookup = values.get if values is not None else None
    while True:
        if pos + 8 > end:
            if whole and pos == end:
                return out, end, encoding
            # A few bytes short of an element (dcmread stops quietly there; the header check calls it cut), or
            # the header runs past the bytes read.
            raise Unwalkable("the file ends inside an element header, or the header runs past the bytes read")
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
                raise Unwalkable(f"VR {raw_vr!r}")
            vr, long = known
            if long:
                if pos + 12 > end:
                    raise Unwalkable("element header cut")
                length, value_at = long_length(buf, pos + 8)[0], pos + 12
            else:
                value_at = pos + 8
        tag = group << 16 | elem
        if (meta and group != 2) or (not meta and tag in pixel_tags):
            return out, pos, encoding
        if tag == _ITEM_DELIMITER:
            raise Unwalkable("item delimiter at the top level")
        if starts is not None:
            starts.append(pos)
        key = intern(tag)
        if length != _UNDEFINED:
            pos = value_at + length
            if pos > end:
                raise Unwalkable("element value past the bytes read")
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
        if meta or not is_sequence(buf, value_at, tag, vr, endian):
            raise Unwalkable("undefined length outside a sequence")
        # Left raw, as dcmread leaves a defined-length sequence: pydicom reads its items (`convert_SQ`, its own
        # `read_sequence` from the same offset) only when the sequence is used, and the probe uses a few of them
        # item by item without that (`_dicom_groups.py`).
        delimiter = sequence_end(buf, value_at, implicit=implicit, little=little, end=end)
        pos = delimiter + 8
        if pos == end and not whole:
            raise Unwalkable("sequence past the bytes read")
        out[key] = new(raw_type, (key, "SQ", _UNDEFINED, buf[value_at:delimiter], value_at, implicit, little,
                                  *defaults))


def is_sequence(buf: bytes, at: int, tag: int, vr: str | None, endian: str) -> bool:
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


def sequence_end(buf: bytes, at: int, *, implicit: bool, little: bool, end: int) -> int:
    """Where the Sequence Delimitation Item of the undefined-length sequence whose value starts at `at` lies: its
    items stepped over, element by element where an item's own length is undefined, as pydicom's `read_sequence`
    reads them. Raises `Unwalkable` for anything else (a missing item or delimiter, a VR pydicom does not know, an
    undefined length outside a sequence, bytes past `end`): pydicom's reader then decides."""
    endian = "<" if little else ">"
    item_head = struct.Struct(f"{endian}HHL").unpack_from
    pos = at
    while True:
        if pos + 8 > end:
            raise Unwalkable("sequence past the bytes read")
        group, elem, length = item_head(buf, pos)
        tag = group << 16 | elem
        if tag == _SEQUENCE_DELIMITER:
            return pos
        if tag != _ITEM:
            raise Unwalkable(f"({group:04X},{elem:04X}) inside a sequence, not an item")
        pos = pos + 8 + length if length != _UNDEFINED else _item_end(buf, pos + 8, implicit, little, end)



def item_element(buf: bytes, pos: int, end: int, implicit: bool, head: Callable[[bytes, int], tuple[Any, ...]],
                 long_length: Callable[[bytes, int], tuple[Any, ...]]) -> tuple[int, int, str | None, int, int]:
    """The header of the element at `pos` inside a sequence item: its group, element, VR (None where the
    encoding is implicit, and for items and delimiters, which carry none), value length and where its value
    starts. `head` and `long_length` unpack the encoding's element header and 32-bit length."""
    if implicit:
        group, elem, length = head(buf, pos)
        return group, elem, None, length, pos + 8
    group, elem, raw_vr, length = head(buf, pos)
    if group == 0xFFFE:
        return group, elem, None, long_length(buf, pos + 4)[0], pos + 8
    known = _VRS.get(raw_vr)
    if known is None:
        raise Unwalkable(f"VR {raw_vr!r} inside a sequence item")
    if not known[1]:
        return group, elem, known[0], length, pos + 8
    if pos + 12 > end:
        raise Unwalkable("element header cut")
    return group, elem, known[0], long_length(buf, pos + 8)[0], pos + 12

def _item_end(buf: bytes, pos: int, implicit: bool, little: bool, end: int) -> int:
    """Where an undefined-length item whose elements start at `pos` ends: past its Item Delimitation Item."""
    endian = "<" if little else ">"
    head = struct.Struct(f"{endian}HHL" if implicit else f"{endian}HH2sH").unpack_from
    long_length = struct.Struct(f"{endian}L").unpack_from
    while True:
        if pos + 8 > end:
            raise Unwalkable("item past the bytes read")
        group, elem, vr, length, value_at = item_element(buf, pos, end, implicit, head, long_length)
        tag = group << 16 | elem
        if tag == _ITEM_DELIMITER:
            return pos + 8
        if group == 0xFFFE:
            raise Unwalkable(f"({group:04X},{elem:04X}) among an item's elements")
        if length != _UNDEFINED:
            pos = value_at + length
        elif is_sequence(buf, value_at, tag, vr, endian):
            pos = sequence_end(buf, value_at, implicit=implicit, little=little, end=end) + 8
        else:
            raise Unwalkable("undefined length outside a sequence")
