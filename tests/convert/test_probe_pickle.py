"""Probes cross from the workers to the driver pickled, and laid-out series back to the workers: `ByFields` records
must come back equal, whatever they hold."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from labzarr.convert.probe import Probe, probe_files
from labzarr.readers import ByFields, Plane
from labzarr.readers._dicom_header import Defect, DicomHeader, Frame
from labzarr.readers._dicom_layout import Member, SeriesStack, StackFrame

from ..dicom_data import NICOM_DATA, PYDICOM_DATA


def _files() -> list[Path]:
    return [p for p in sorted(PYDICOM_DATA.rglob("*")) if p.is_file()] + sorted(NICOM_DATA.glob("*.dcm*"))


def test_probes_of_every_shipped_dicom_file_pickle_back_equal(tmp_path: Path) -> None:
    cut = tmp_path / "cut.dcm"
    cut.write_bytes((PYDICOM_DATA / "CT_small.dcm").read_bytes()[:-1000])  # a defect, a rejection
    files = [*_files(), cut]
    probes = probe_files([(str(p), str(p)) for p in files])
    headers = [p.dicom for p in probes if p.dicom is not None]
    assert len(headers) > 100 and any(h.defect is not None for h in headers)
    assert any(len(h.frames) > 1 for h in headers) and any(p.header_rejected for p in probes)
    back = pickle.loads(pickle.dumps(probes, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == probes
    assert [type(f) for h in back if h.dicom for f in h.dicom.frames] == [Frame for h in headers for _ in h.frames]


@pytest.mark.parametrize("cls", [Probe, Plane, DicomHeader, Frame, Defect, Member, StackFrame, SeriesStack])
def test_records_pickled_by_fields_are_rebuilt_by_their_constructor(cls: type) -> None:
    # __reduce__ hands the field values to the constructor in order: every field must be an init field, and the
    # slots (which __reduce__ reads) must be the fields, in order.
    assert issubclass(cls, ByFields)
    fields = dataclasses.fields(cls)
    assert all(f.init for f in fields)
    assert cls.__slots__ == tuple(f.name for f in fields)


def test_laid_out_series_pickle_back_equal(tmp_path: Path) -> None:
    """What a conversion task carries to its worker: every frame of a laid-out series, rescale and offsets."""
    from labzarr.readers import SeriesRules, read_head
    from labzarr.readers._dicom_header import read_dicom_header
    from labzarr.readers._dicom_layout import layout_series

    from ..dicom_data import CT5N

    members = [Member(str(p), p.name, read_dicom_header(p, read_head(p))) for p in CT5N]
    stack = layout_series(members, SeriesRules())
    assert isinstance(stack, SeriesStack) and len(stack.frames) == len(CT5N)
    back = pickle.loads(pickle.dumps(stack, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == stack and type(back.frames[0]) is StackFrame
