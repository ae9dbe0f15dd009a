"""An enhanced multi-frame file's functional groups, read item by item from the bytes the header walk left raw.

Why not the pydicom `Sequence`: reading the Per-frame Functional Groups
Sequence makes a pydicom `Dataset` of every item of every frame (a plane
position, a pixel measure, a frame content, ... for each of hundreds of
frames), and that took most of reading an enhanced file's header, several
times the rest of probing it (`bench/dicom.py`'s `bench_functional_groups`
reads the groups both ways; docs/benchmarks.md keeps the figures). python-gdcm's
`Scanner` was measured as the other route and left: it sees top-level elements
only, never the items of a sequence, and on classic files it was no faster
than the walk.

Here a `RawGroup` is one item located in the file's bytes: its elements are
indexed (tag, VR, where the value lies) when it is first used, and a value is
decoded by pydicom (`convert_raw_data_element`, the VR resolved as pydicom's
`raw_element_vr` hook resolves it, a private one from the item's own private
creator), so every value is pydicom's. Only what is asked for is decoded:
per frame, the few groups that give its geometry, scaling and kind.

Anything unusual (an item or element pydicom would read differently, a
character set of its own, an ambiguous VR) raises `Unwalkable` and the
caller reads the sequence through pydicom instead, as a `DatasetGroup`:
the same questions, answered by pydicom's own datasets. A file read with
`dcmread` (the reference path) is always read that way.
tests/readers/test_dicom_groups.py checks both give the same header on every
DICOM file pydicom ships and on every file of the dcm2niix QA corpora present.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from pydicom import config
from pydicom.datadict import dictionary_VR, private_dictionary_VR
from pydicom.dataelem import RawDataElement, convert_raw_data_element
from pydicom.dataset import Dataset
from pydicom.valuerep import AMBIGUOUS_VR, VR

from ._dicom_walk import Unwalkable, is_sequence, item_element, tag_key

__all__ = ["DatasetGroup", "FunctionalGroups", "Group", "RawGroup", "functional_groups"]

PER_FRAME = 0x52009230  # Per-frame Functional Groups Sequence
SHARED = 0x52009229  # Shared Functional Groups Sequence
_SPECIFIC_CHARACTER_SET = 0x00080005
_ITEM, _ITEM_DELIMITER, _SEQUENCE_DELIMITER = 0xFFFEE000, 0xFFFEE00D, 0xFFFEE0DD
_UNDEFINED = 0xFFFFFFFF


class Group(Protocol):
    """One item of a sequence (a frame's functional groups, or one group of them), asked by tag."""

    def get(self, tag: int) -> Any:
        """The element's value as pydicom decodes it; None when the item does not hold it."""

    def first(self, tag: int) -> Group | None:
        """The first item of the sequence `tag`; None when absent or empty."""

    def items(self, tag: int) -> Sequence[Group]:
        """The items of the sequence `tag`; () when absent or when the element is not a sequence."""


@dataclass(frozen=True, slots=True)
class DatasetGroup:
    """A `Group` over a pydicom `Dataset`: the reference the raw reading is tested against."""

    ds: Dataset

    def get(self, tag: int) -> Any:
        elem = self.ds.get(tag_key(tag))
        return elem.value if elem is not None else None

    def first(self, tag: int) -> Group | None:
        seq = self.get(tag)
        return DatasetGroup(seq[0]) if seq else None

    def items(self, tag: int) -> Sequence[Group]:
        elem = self.ds.get(tag_key(tag))
        return tuple(DatasetGroup(i) for i in elem.value) if elem is not None and elem.VR == VR.SQ else ()


@dataclass(frozen=True, slots=True)
class _Reading:
    """What every item of one file's sequence shares: its bytes, encoding, and the values decoded so far (keyed
    by tag, VR and value bytes: most frames repeat most groups byte for byte)."""

    buf: bytes
    implicit: bool
    little: bool
    encoding: str | list[str]
    decoded: dict[tuple[int, str, bytes], Any]


class RawGroup:
    """A `Group` over one item's bytes (`start`..`end`, the end past its delimiter or its defined length)."""

    __slots__ = ("_index", "_reading", "_start", "_stop")

    def __init__(self, reading: _Reading, start: int, stop: int, index: _Index | None = None) -> None:
        self._reading, self._start, self._stop, self._index = reading, start, stop, index

    def get(self, tag: int) -> Any:
        found = self._elements().get(tag)
        if found is None:
            return None
        vr, length, at, _, _ = found
        r = self._reading
        resolved = self._vr(tag, vr, length)
        if resolved == VR.SQ:
            raise Unwalkable(f"({tag >> 16:04X},{tag & 0xFFFF:04X}) is a sequence, asked as a value")
        if resolved in AMBIGUOUS_VR:  # pydicom corrects these from the dataset around them
            raise Unwalkable(f"({tag >> 16:04X},{tag & 0xFFFF:04X}) has the ambiguous VR {resolved}")
        value = r.buf[at : at + length]
        key = (tag, resolved, value)
        if key in r.decoded:
            return r.decoded[key]
        raw = RawDataElement(tag_key(tag), resolved, length, value, at, r.implicit, r.little)
        out = convert_raw_data_element(raw, encoding=r.encoding).value
        r.decoded[key] = out
        return out

    def first(self, tag: int) -> Group | None:
        items = self._sequence(tag, strict=True)
        return items[0] if items else None

    def items(self, tag: int) -> Sequence[Group]:
        return self._sequence(tag, strict=False)

    def _sequence(self, tag: int, *, strict: bool) -> tuple[RawGroup, ...]:
        found = self._elements().get(tag)
        if found is None:
            return ()
        vr, length, at, after, items = found
        if items is not None:  # an undefined-length sequence, its items read with the item holding it
            return items
        if self._vr(tag, vr, length) != VR.SQ:
            if strict:  # a public sequence written with another VR: pydicom decides what it holds
                raise Unwalkable(f"({tag >> 16:04X},{tag & 0xFFFF:04X}) is not a sequence")
            return ()
        return sequence_items(self._reading, at, after)[0]

    def _vr(self, tag: int, vr: str | None, length: int) -> str:
        """The VR pydicom's `raw_element_vr` hook gives this element, its private dictionary looked up with the
        item's own private creator."""
        if vr == VR.SQ or length == _UNDEFINED:
            return VR.SQ  # the walk of the item read an undefined length as a sequence, as pydicom does
        if vr is None:
            try:
                return str(dictionary_VR(tag))
            except KeyError:
                if tag >> 16 & 1:
                    return self._private_vr(tag)
                if tag & 0xFFFF == 0:
                    return VR.UL
                raise Unwalkable(f"({tag >> 16:04X},{tag & 0xFFFF:04X}): no VR known") from None
        if vr == VR.UN and config.replace_un_with_known_vr:
            if tag >> 16 & 1:
                return self._private_vr(tag)
            if length < 0xFFFF:
                try:
                    return str(dictionary_VR(tag))
                except KeyError:
                    pass
        return vr

    def _private_vr(self, tag: int) -> str:
        element = tag & 0xFFFF
        if 0x10 <= element <= 0xFF:  # a private creator
            return VR.LO
        if element & 0xFF00:
            creator = self.get((tag & 0xFFFF0000) | element >> 8)
            if creator:
                try:
                    return str(private_dictionary_VR(tag, creator))
                except KeyError:
                    pass
        return VR.UN

    def _elements(self) -> _Index:
        if self._index is None:
            self._index, _ = _index(self._reading, self._start, self._stop)
        return self._index


# An item's elements: tag -> (VR as written, None in implicit VR; value length; where the value starts; where
# the element ends; the items of an undefined-length sequence, read in the same pass)
_Index = dict[int, tuple[str | None, int, int, int, "tuple[RawGroup, ...] | None"]]


def sequence_items(reading: _Reading, at: int, end: int | None) -> tuple[tuple[RawGroup, ...], int]:
    """The items of the sequence whose items start at `at` and end at `end` or, when None (an undefined length),
    at its Sequence Delimitation Item; and where they end (that delimiter)."""
    buf, little = reading.buf, reading.little
    head = struct.Struct("<HHL" if little else ">HHL").unpack_from
    out: list[RawGroup] = []
    pos, stop = at, len(buf) if end is None else end
    while end is None or pos < end:
        if pos + 8 > stop:
            raise Unwalkable("sequence item header cut")
        group, elem, item_length = head(buf, pos)
        if end is None and group << 16 | elem == _SEQUENCE_DELIMITER:
            return tuple(out), pos
        if group << 16 | elem != _ITEM:
            raise Unwalkable(f"({group:04X},{elem:04X}) inside a sequence, not an item")
        if item_length == _UNDEFINED:  # indexed now: its end is only found by walking its elements
            index, after = _index(reading, pos + 8, None)
            out.append(RawGroup(reading, pos + 8, after, index))
            pos = after
        else:
            if pos + 8 + item_length > stop:
                raise Unwalkable("sequence item past its sequence")
            out.append(RawGroup(reading, pos + 8, pos + 8 + item_length))
            pos += 8 + item_length
    return tuple(out), pos


def _index(reading: _Reading, pos: int, stop: int | None) -> tuple[_Index, int]:
    """An item's elements from `pos`, up to `stop` or, for an undefined-length item, its Item Delimitation Item;
    and where the item ends."""
    buf, implicit, little = reading.buf, reading.implicit, reading.little
    endian = "<" if little else ">"
    head = struct.Struct(f"{endian}HHL" if implicit else f"{endian}HH2sH").unpack_from
    long_length = struct.Struct(f"{endian}L").unpack_from
    end = len(buf) if stop is None else stop
    out: _Index = {}
    while True:
        if stop is not None and pos == stop:
            return out, pos
        if pos + 8 > end:
            raise Unwalkable("item past the bytes read")
        group, elem, vr, length, value_at = item_element(buf, pos, end, implicit, head, long_length)
        tag = group << 16 | elem
        if tag == _ITEM_DELIMITER and stop is None:
            return out, pos + 8
        if group == 0xFFFE or tag == _SPECIFIC_CHARACTER_SET or tag in out:
            raise Unwalkable(f"({group:04X},{elem:04X}) in an item: read by pydicom")
        items = None
        if length == _UNDEFINED:
            if not is_sequence(buf, value_at, tag, vr, endian):
                raise Unwalkable("undefined length outside a sequence")
            items, delimiter = sequence_items(reading, value_at, None)
            after = delimiter + 8
        else:
            after = value_at + length
        if after > end:
            raise Unwalkable("element past its item")
        out[tag] = (vr, length, value_at, after, items)
        pos = after


@dataclass(frozen=True, slots=True)
class FunctionalGroups:
    """An enhanced file's per-frame functional groups (one `Group` a frame) and its shared ones (None: none)."""

    per_frame: Sequence[Group]
    shared: Group | None


def functional_groups(ds: Dataset, *, raw: bool = True) -> FunctionalGroups | None:
    """The functional groups of `ds`: read from the bytes where the header walk left them raw (`raw`), else, and
    where `RawGroup` finds them laid out in a way it leaves to pydicom, through pydicom's own datasets; None when
    `ds` has no Per-frame Functional Groups Sequence. A `RawGroup` may still raise `Unwalkable` when asked for
    an element: read again with `raw` False."""
    if tag_key(PER_FRAME) not in ds._dict:
        return None
    try:
        if raw:
            return _raw_groups(ds)
    except Unwalkable:
        pass
    per_frame = ds.get(tag_key(PER_FRAME)).value
    shared = ds.get(tag_key(SHARED))
    return FunctionalGroups(tuple(DatasetGroup(i) for i in per_frame),
                            DatasetGroup(shared.value[0]) if shared is not None and shared.value else None)


def _raw_groups(ds: Dataset) -> FunctionalGroups:
    elements: list[RawDataElement | None] = []
    for t in (PER_FRAME, SHARED):
        elem = ds._dict.get(tag_key(t))
        # raw as the walk left it (VR None: a defined-length sequence in implicit VR), not read by pydicom yet
        if elem is not None and not (isinstance(elem, RawDataElement) and elem.VR in (VR.SQ, None)
                                     and isinstance(elem.value, bytes)):
            raise Unwalkable("read by pydicom already, or not a sequence")
        elements.append(elem)
    # what pydicom decodes the items' values with: the encoding it passes to `read_sequence`, which every item
    # inherits (an item with a character set of its own is left to pydicom)
    encoding = ds.original_character_set or ds._character_set
    groups: list[tuple[RawGroup, ...]] = []
    for elem in elements:
        if elem is None:
            groups.append(())
            continue
        value = cast(bytes, elem.value)
        reading = _Reading(value, bool(elem.is_implicit_VR), bool(elem.is_little_endian),
                           encoding if isinstance(encoding, str) else list(encoding), {})
        # the bytes hold the value alone (an undefined-length one without its delimiter): offsets count from 0
        groups.append(sequence_items(reading, 0, len(value))[0])
    return FunctionalGroups(groups[0], groups[1][0] if groups[1] else None)
