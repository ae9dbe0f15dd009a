"""`plain_value` against pydicom: the int, float(s) or str the header makes of pydicom's own value, or PYDICOM.

A table of encodings (padding, signs, exponents, several values, and the values pydicom would note or refuse),
every raw IS, DS, UI, CS, FL and UL element of every DICOM file pydicom and nibabel ship, and pydicom's configuration
changed: `plain_value` either equals pydicom or leaves the element to it.
"""

from __future__ import annotations

import gzip
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from pydicom import config, hooks, values
from pydicom.datadict import dictionary_has_tag, dictionary_VR
from pydicom.dataelem import DataElement, RawDataElement, convert_raw_data_element
from pydicom.tag import Tag

from labzarr.readers._dicom_header import _float, _float_of, _floats, _int, _text
from labzarr.readers._dicom_values import PYDICOM, plain_value
from labzarr.readers._dicom_walk import walk_header

from ..dicom_data import NICOM_DATA, PYDICOM_DATA

# InstanceNumber, ImagePositionPatient, SOPInstanceUID, Modality, RecommendedDisplayFrameRateInFloat,
# FileMetaInformationGroupLength
_TAGS = {"IS": Tag(0x00200013), "DS": Tag(0x00200032), "UI": Tag(0x00080018), "CS": Tag(0x00080060),
         "FL": Tag(0x00089459), "UL": Tag(0x00020000)}


def _raw(vr: str, value: bytes, *, explicit: bool = True, little: bool = True, tag: int | None = None,
         ) -> RawDataElement:
    return RawDataElement(Tag(tag) if tag is not None else _TAGS[vr], vr if explicit else None, len(value), value, 0,
                          not explicit, little)


def _pydicoms(raw: RawDataElement) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_raw_data_element(raw).value


def _same(vr: str, plain: Any, theirs: Any) -> bool:
    """What the header makes of each value is the same (and the plain one is of a plain type)."""
    if vr == "UI":
        return type(plain) is str and plain == str(theirs)
    if vr == "CS":  # as `_classic_kind` reads Philips' diffusion direction
        return type(plain) is str and str(_text(plain)).strip().upper() == str(_text(theirs)).strip().upper()
    if vr == "FL":
        return type(plain) is float and _float_of(plain, True) == _float_of(theirs, True)
    if vr == "UL":  # as `_check_not_cut` reads the File Meta's group length
        return type(plain) is int and int(plain) == int(theirs)
    if vr == "IS":
        return type(plain) is int and _int(plain) == _int(theirs) and _float(plain) == _float(theirs)
    n = len(plain) if isinstance(plain, tuple) else 1
    return (type(plain) is float or all(type(v) is float for v in plain)) and \
        _floats(plain, n) == _floats(theirs, n) and _float(plain) == _float(theirs)


CASES = [
    ("IS", b"12", True), ("IS", b"12 ", True), ("IS", b" -7", True), ("IS", b"+5", True), ("IS", b"0\0", True),
    ("IS", b"2147483647", True), ("IS", b"-2147483648", True),
    ("IS", b"2147483648", False),  # past int32: pydicom's strict mode refuses it
    ("IS", b"1234567890123", False),  # longer than 12 characters
    ("IS", b"1.0 ", False), ("IS", b"1\\2", False), ("IS", b"1_0", False), ("IS", b" ", False), ("IS", b"x", False),
    ("IS", b"1\n", False),
    ("DS", b"1.5", True), ("DS", b" -12.25 ", True), ("DS", b"1e3", True), ("DS", b".5\\-3.\\+2E-2", True),
    ("DS", b"-120.5\\33.25\\-0.0000001 ", True), ("DS", b"0.5\0", True), ("DS", b"1e999", True),
    ("DS", b"1.23456789012345678", False),  # longer than 16 characters
    ("DS", b"nan", False), ("DS", b"inf", False), ("DS", b"1,5", False), ("DS", b"1.5\\", False),
    ("DS", b"\\1.5", False), ("DS", b"1_5", False), ("DS", b"\x1c1.5", False), ("DS", b"1.5\\ ", False),
    ("UI", b"1.2.840.10008.5.1.4.1.1.4", True), ("UI", b"1.2.3\0", True), ("UI", b"1.2.3 ", True), ("UI", b"0", True),
    ("CS", b"I ", True), ("CS", b"ORIGINAL", True), ("CS", b"I\0", True), ("CS", b" i", True), ("CS", b"\xe9", True),
    ("CS", b"A\\B", False), ("CS", b"A\\", False),
    ("FL", b"\x00\x00\x80\x3f", True), ("FL", b"\x00\x00\xc0\x7f", True), ("FL", b"\x00\x00\x80\x3f" * 2, False),
    ("FL", b"\x00\x00\x80", False),
    ("UL", b"\xd4\x00\x00\x00", True), ("UL", b"\xff\xff\xff\xff", True), ("UL", b"\xd4\x00", False),
    ("UL", b"\xd4\x00\x00\x00" * 2, False),
    ("UI", b"1.02.3", False), ("UI", b"1.2.3\\1.2.4", False), ("UI", b"1.2.\0", False), ("UI", b" 1.2", False),
    ("UI", b"1." + b"2" * 63, False), ("UI", b"\0", False),
]


@pytest.mark.parametrize(("vr", "value", "plain"), CASES, ids=lambda v: repr(v))
@pytest.mark.parametrize(("explicit", "little"), [(True, True), (False, True), (True, False)],
                         ids=["explicit", "implicit", "big-endian"])
def test_plain_values_equal_pydicoms(vr: str, value: bytes, plain: bool, explicit: bool, little: bool) -> None:
    raw = _raw(vr, value, explicit=explicit, little=little)
    got = plain_value(raw, vr)
    assert (got is not PYDICOM) == plain
    if got is not PYDICOM:
        assert _same(vr, got, _pydicoms(raw))


@pytest.mark.parametrize(("vr", "tag", "value"), [("FL", 0x20011003, b"\x00\x00\x80\x3f"), ("CS", 0x20011004, b"I ")])
def test_a_private_element_is_plain_only_with_its_vr_explicit(vr: str, tag: int, value: bytes) -> None:
    """Philips' diffusion b-value and direction: explicit, as pydicom decodes them; implicit, pydicom finds the VR
    by the private creator, which this does not."""
    raw = _raw(vr, value, tag=tag)
    assert _same(vr, plain_value(raw, vr), _pydicoms(raw))
    assert plain_value(_raw(vr, value, tag=tag, explicit=False), vr) is PYDICOM


def test_an_element_of_another_vr_or_empty_is_left_to_pydicom() -> None:
    assert plain_value(RawDataElement(_TAGS["IS"], "UN", 2, b"12", 0, False, True), "IS") is PYDICOM
    assert plain_value(RawDataElement(_TAGS["IS"], "LO", 2, b"12", 0, False, True), "IS") is PYDICOM
    assert plain_value(_raw("IS", b""), "IS") is PYDICOM
    assert plain_value(_raw("IS", b"12"), "US") is PYDICOM


@pytest.mark.parametrize("change", ["use_DS_numpy", "use_IS_numpy", "use_DS_decimal", "data_element_callback",
                                    "raw_element_value", "raw_element_kwargs", "converter"])
def test_pydicom_configured_otherwise_decodes_every_value(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if change == "data_element_callback":
        monkeypatch.setattr(config, "data_element_callback", lambda raw, **kwargs: raw)
    elif change == "raw_element_value":
        monkeypatch.setattr(hooks.hooks, "raw_element_value", hooks.raw_element_value_fix_separator)
    elif change == "raw_element_kwargs":
        monkeypatch.setattr(hooks.hooks, "raw_element_kwargs", {"separator": b":"})
    elif change == "converter":
        monkeypatch.setitem(values.converters, "IS", lambda *args: 0)
        monkeypatch.setitem(values.converters, "DS", lambda *args: 0)
        for vr in ("UI", "CS", "FL", "UL"):
            monkeypatch.setitem(values.converters, vr, lambda *args: "")
    else:
        monkeypatch.setattr(config, change, True)
    for vr, value, _ in CASES:
        if change.startswith("use_") and vr[0] not in change[4]:  # use_DS_* changes DS only, use_IS_* IS only
            continue
        assert plain_value(_raw(vr, value), vr) is PYDICOM, (vr, value)


def _shipped_elements() -> Iterator[tuple[str, RawDataElement]]:
    files = [p for p in sorted(PYDICOM_DATA.rglob("*")) if p.is_file()]
    files += sorted(NICOM_DATA.glob("*.dcm")) + sorted(NICOM_DATA.glob("*.dcm.gz"))
    for path in files:
        data = path.read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        walked = walk_header(data, name=path.name, whole=True)
        if walked is None:
            continue
        for elem in (*walked.dataset.file_meta._dict.values(), *walked.dataset._dict.values()):
            if isinstance(elem, DataElement):
                continue
            vr = elem.VR or (dictionary_VR(elem.tag) if dictionary_has_tag(elem.tag) else None)
            if vr in ("IS", "DS", "UI", "CS", "FL", "UL"):
                yield vr, elem


def test_every_shipped_is_ds_ui_cs_fl_and_ul_value_decodes_as_pydicom_decodes_it() -> None:
    found = taken = 0
    for vr, raw in _shipped_elements():
        found += 1
        got = plain_value(raw, vr)
        if got is not PYDICOM:
            taken += 1
            assert _same(vr, got, _pydicoms(raw)), (raw.tag, raw.value)
    assert found > 1000 and taken > 0.9 * found, (found, taken)  # not vacuous: most values are plain
