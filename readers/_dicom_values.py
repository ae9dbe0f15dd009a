"""Decoding the few raw IS, DS, UI, CS, FL and UL values a header reads of every file, to the plain numbers and
strings the header makes of pydicom's values, without pydicom's value objects.

Why: the files of a series differ from one another in a few values (SOPInstanceUID, InstanceNumber,
ImagePositionPatient, a Philips diffusion's private b-value and gradient), which the walk (`_dicom_walk.py`)
therefore leaves raw in every file; pydicom decodes each through its hooks into a validated `IS`, `DSfloat` or
`UID` inside a new `DataElement` (a private one after finding its private creator), which cost more than the
rest of building the header record from those values (docs/benchmarks.md).

Invariant: `plain_value` gives what `int`, `float` or `str` gives of the value pydicom decodes from the same
element, or `PYDICOM` when it cannot be sure of that. It decodes IS, DS and UI bytes only where pydicom's own
validation accepts them (its VR regex and length, so pydicom neither warns nor logs nor raises on them, whatever
its validation mode; CS, FL and UL values pydicom does not validate as it reads them), of an element whose VR is the
one the caller names, and only while pydicom decodes raw elements its default way (no element callback, default
hooks and converters, no numpy or Decimal values): anything else is left to pydicom.
tests/readers/test_dicom_values.py compares it with pydicom.
"""

from __future__ import annotations

import functools
import re
import struct
from typing import Final, cast

from pydicom import config, hooks, values
from pydicom.charset import default_encoding
from pydicom.dataelem import RawDataElement

__all__ = ["PYDICOM", "plain_value"]

PYDICOM: Final = object()  # `plain_value`'s answer where pydicom must decode the value

# Stricter than pydicom's VR_REGEXES (ASCII digits only, where `\d` is any Unicode digit), so every value
# matched here is one pydicom validates without a note; lengths as pydicom's MAX_VALUE_LEN.
_IS: Final = re.compile(rb" *[+-]?[0-9]+ *")
_DS: Final = re.compile(rb" *[+-]?([0-9]+|[0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)? *")
_UI: Final = re.compile(rb"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*")
_IS_LEN, _DS_LEN, _UI_LEN = 12, 16, 64
_CONVERTERS: Final[dict[str, object]] = {"IS": values.convert_IS_string, "DS": values.convert_DS_string,
                                         "UI": values.convert_UI, "CS": values.convert_string,
                                         "FL": (values.convert_numbers, "f"), "UL": (values.convert_numbers, "L")}
# One FL or UL value in either byte order, as convert_numbers unpacks it
_NUMBERS: Final = {("FL", True): struct.Struct("<f").unpack, ("FL", False): struct.Struct(">f").unpack,
                   ("UL", True): struct.Struct("<L").unpack, ("UL", False): struct.Struct(">L").unpack}


def plain_value(raw: RawDataElement, vr: str) -> int | float | str | tuple[float, ...] | object:
    """An IS element's int, a DS element's float (a tuple of them where it holds several), a UI or CS element's
    str (one value), an FL element's float or a UL element's int (one value), as pydicom would decode `raw` (whose
    dictionary VR is `vr`), or `PYDICOM`. A private element must be explicitly `vr`: pydicom looks an implicit
    one's VR up by its private creator."""
    value = raw.value
    if (type(value) is not bytes or not value or vr not in _CONVERTERS
            or (raw.VR != vr and (raw.VR is not None or raw.tag >> 16 & 1)) or not _pydicom_default(vr)):
        return PYDICOM
    if vr in ("FL", "UL"):  # convert_numbers: struct.unpack in the element's byte order, one value its number
        return _NUMBERS[vr, bool(raw.is_little_endian)](value)[0] if len(value) == 4 else PYDICOM
    return _decoded(value, vr)


@functools.lru_cache(maxsize=4096)
def _decoded(value: bytes, vr: str) -> int | float | str | tuple[float, ...] | object:
    """`plain_value`'s decoding, once per distinct value: the files of a batch are walked against one template
    (`_dicom_walk.py`) and so share its raw elements, which pydicom would have decoded in place once."""
    if vr == "UI":
        # convert_UI: strip trailing NULs and spaces; one value, as a UID validates it
        text = value.rstrip(b"\0 ")
        return text.decode("ascii") if len(text) <= _UI_LEN and _UI.fullmatch(text) else PYDICOM
    if vr == "CS":
        # convert_string: no validation on reading; strip trailing spaces and NULs; one value
        string = value.decode(default_encoding).rstrip(" \0")
        return string if "\\" not in string else PYDICOM
    if vr == "IS":
        # convert_IS_string: strip trailing spaces and NULs; one value, validated, then int()
        text = value.rstrip(b" \0")
        if len(text) > _IS_LEN or not _IS.fullmatch(text):
            return PYDICOM
        number = int(text)
        # outside int32 pydicom raises in its strict validation mode: left to it
        return number if -(1 << 31) <= number < (1 << 31) else PYDICOM
    # convert_DS_string: strip, strip trailing NULs, split at backslashes; each a DSfloat, float() of the item
    items = value.strip().rstrip(b" \0").split(b"\\")
    if any(len(item) > _DS_LEN or not _DS.fullmatch(item) for item in items):
        return PYDICOM
    return float(items[0]) if len(items) == 1 else tuple(float(item) for item in items)


_DEFAULT: Final = (None, hooks.raw_element_vr, hooks.raw_element_value, False, False, False)


def _pydicom_default(vr: str) -> bool:
    """Whether pydicom decodes a raw element of `vr` its default way (configuration is pydicom's, and global)."""
    h = hooks.hooks
    return ((config.data_element_callback, h.raw_element_vr, h.raw_element_value, config.use_DS_numpy,
             config.use_DS_decimal, config.use_IS_numpy) == _DEFAULT and not h.raw_element_kwargs
            and cast(dict[str, object], values.converters).get(vr) == _CONVERTERS[vr])
