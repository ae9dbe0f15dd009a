"""One conformance test over every reader in READERS: sample sniffed and read, text/empty not claimed, cut rejected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from labzarr.convert.demo import NIBABEL_DATA
from labzarr.readers import READERS, Limits, PlanarReader, Reason, Rejected, read_head, reader_for

from ..dicom_data import PYDICOM_DATA
from ..imaging import mr_slices, pillow_image, turbo_jpeg

# kind -> a real, valid sample file's bytes. A new reader adds its sample here (the first test insists).
SAMPLES: dict[str, Callable[[], bytes]] = {
    "nifti": lambda: (NIBABEL_DATA / "anatomical.nii").read_bytes(),
    "dicom": lambda: (PYDICOM_DATA / "CT_small.dcm").read_bytes(),
    "jpeg": lambda: turbo_jpeg(mr_slices(48, 40)),
    "png": lambda: pillow_image(mr_slices(48, 40), "PNG"),
    "tiff": lambda: pillow_image(mr_slices(48, 40), "TIFF", compression="tiff_deflate"),
}
KINDS = [r.kind for r in READERS]


def test_every_reader_has_a_sample() -> None:
    assert sorted(SAMPLES) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_sample_sniffed_and_read(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "sample.bin"  # a name that says nothing: content decides
    path.write_bytes(SAMPLES[kind]())
    head = read_head(path)
    reader = reader_for(head.data)
    assert reader is not None and reader.kind == kind
    vol = reader.read(path, Limits(), head)
    assert vol.kind == kind and vol.data.size > 0
    if isinstance(reader, PlanarReader):
        plane = reader.plane(path, head)
        assert (plane.shape, plane.dtype) == (vol.data.shape, vol.data.dtype.name)


@pytest.mark.parametrize("content", [b"", b"Delivery notes: case 7 re-exported.\n", b"a,b,c\n1,2,3\n" * 50],
                         ids=["empty", "note", "csv"])
def test_no_reader_claims_text_or_empty(content: bytes) -> None:
    assert reader_for(content) is None


@pytest.mark.parametrize("kind", KINDS)
def test_cut_in_half_is_truncated(tmp_path: Path, kind: str) -> None:
    data = SAMPLES[kind]()
    path = tmp_path / "cut.bin"
    path.write_bytes(data[: len(data) // 2])
    head = read_head(path)
    reader = reader_for(head.data)
    assert reader is not None and reader.kind == kind
    with pytest.raises(Rejected) as info:
        reader.read(path, Limits(), head)
    assert info.value.reason is Reason.TRUNCATED, info.value.detail
