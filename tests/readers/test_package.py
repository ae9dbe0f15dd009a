"""`labzarr.readers` imports its names on first use (PEP 562, readers/__init__.py): every public name resolves,
and a name that is not one fails as any missing attribute does."""

from __future__ import annotations

import importlib

import pytest

import labzarr.readers
import labzarr.readers.dicom
import labzarr.readers.registry


@pytest.mark.parametrize("name", labzarr.readers.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(labzarr.readers, name)
    assert value is not None and name in dir(labzarr.readers)
    owner = getattr(value, "__module__", None)
    assert owner is None or owner.startswith("labzarr.readers"), (name, owner)


@pytest.mark.parametrize("module, name", [(labzarr.readers, "Readers"), (labzarr.readers.dicom, "read_header"),
                                          (labzarr.readers.registry, "READER")])
def test_an_unknown_name_is_an_attribute_error(module: object, name: str) -> None:
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(module, name)


def test_the_dicom_module_gives_its_reading_functions_on_first_use() -> None:
    pixels = importlib.import_module("labzarr.readers._dicom_pixels")
    header = importlib.import_module("labzarr.readers._dicom_header")
    assert labzarr.readers.dicom.open_series is pixels.open_series
    assert labzarr.readers.dicom.read_dicom_header is header.read_dicom_header
    assert labzarr.readers.READERS == labzarr.readers.registry.READERS
    assert [r.kind for r in labzarr.readers.READERS] == ["dicom", "nifti", "jpeg", "png", "tiff"]
