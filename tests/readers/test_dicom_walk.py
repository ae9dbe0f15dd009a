"""The in-memory header walk against pydicom's `dcmread`, on every DICOM file pydicom and nibabel ship.

For each file the walk takes, its dataset must equal `dcmread(stop_before_pixels=True)`'s element for element
(values decoded, sequences included), with the same File Meta, preamble, encoding and stopping offset; and the
`DicomHeader` read through the walk must equal the one read through `dcmread`. A file the walk leaves (None)
must be read as before; files cut anywhere must give the same header or the same rejection either way.
"""

from __future__ import annotations

import copy
import gzip
import io
import shutil
import warnings
from pathlib import Path

import pydicom
import pytest
from pydicom.datadict import keyword_for_tag
from pydicom.dataelem import DataElement

from labzarr.readers import Rejected, read_head
from labzarr.readers._dicom_header import _get, read_header
from labzarr.readers._dicom_walk import DecodedValues, walk_header

from ..dicom_data import CT5N, NICOM_DATA, PYDICOM_DATA


def _shipped() -> list[Path]:
    files = [p for p in sorted(PYDICOM_DATA.rglob("*")) if p.is_file()]
    files += sorted(NICOM_DATA.glob("*.dcm")) + sorted(NICOM_DATA.glob("*.dcm.gz"))
    return [p for p in files if _bytes(p)[128:132] == b"DICM"]


def _bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


SHIPPED = _shipped()


def _dcmread(buf: bytes) -> tuple[pydicom.FileDataset | None, int]:
    fp = io.BytesIO(buf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ds = pydicom.dcmread(fp, stop_before_pixels=True)
        except Exception:
            return None, -1
    return ds, fp.tell()


def _outcome(path: Path, *, walk: bool, values: DecodedValues | None = None) -> object:
    try:
        return read_header(path, read_head(path), walk=walk, values=values)
    except Rejected as exc:
        return exc.reason, exc.detail
    except Exception as exc:  # the same failure either way is what matters here (another test asks which)
        return type(exc).__name__, str(exc)


def test_the_walk_takes_most_shipped_files() -> None:
    """Not a vacuous pass: the walk must read the common files itself (every CT5N slice among them)."""
    taken = [p for p in SHIPPED if walk_header(_bytes(p), name=p.name, whole=True) is not None]
    assert len(SHIPPED) > 100
    assert len(taken) >= 0.8 * len(SHIPPED), f"walked {len(taken)} of {len(SHIPPED)}"
    assert all(walk_header(p.read_bytes(), name=p.name, whole=True) is not None for p in CT5N)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_walk_equals_dcmread(path: Path) -> None:
    buf = _bytes(path)
    walked = walk_header(buf, name=path.name, whole=True)
    if walked is None:
        return
    ds, stopped = _dcmread(buf)
    assert ds is not None, "the walk took a file dcmread refuses"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(walked.dataset.keys()) == list(ds.keys())
        for tag in ds.keys():
            mine, theirs = walked.dataset[tag], ds[tag]
            assert (mine.VR, mine.value, mine.is_undefined_length) == (theirs.VR, theirs.value,
                                                                      theirs.is_undefined_length), tag
        assert walked.dataset.file_meta == ds.file_meta
    assert walked.dataset.preamble == ds.preamble
    assert walked.dataset.original_encoding == ds.original_encoding
    assert walked.dataset.original_character_set == ds.original_character_set
    assert walked.pixel_at == stopped


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_header_through_the_walk_equals_header_through_dcmread(path: Path, tmp_path: Path) -> None:
    plain = tmp_path / "f.dcm"
    plain.write_bytes(_bytes(path))
    assert _outcome(plain, walk=True) == _outcome(plain, walk=False)


def test_headers_read_with_shared_decoded_values_equal_dcmreads(tmp_path: Path) -> None:
    """Every shipped file read in turn with one `DecodedValues` (as a probe batch does, here across unrelated
    files, character sets and encodings), then all again with it warm: each header equals dcmread's."""
    values = DecodedValues()
    plain = []
    for i, path in enumerate(SHIPPED):
        plain.append(tmp_path / f"{i}.dcm")
        plain[-1].write_bytes(_bytes(path))
    expected = [_outcome(p, walk=False) for p in plain]
    assert [_outcome(p, walk=True, values=values) for p in plain] == expected
    assert [_outcome(p, walk=True, values=values) for p in plain] == expected
    assert len(values._decoded) > 100  # the values were shared, not merely allowed to be


@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.8, 0.999])
@pytest.mark.parametrize("path", [CT5N[0], PYDICOM_DATA / "MR_small.dcm", PYDICOM_DATA / "rtstruct.dcm",
                                  PYDICOM_DATA / "JPEG2000.dcm", NICOM_DATA / "siemens_dwi_0.dcm.gz"],
                         ids=lambda p: p.name)
def test_a_cut_file_reads_the_same_either_way(path: Path, fraction: float, tmp_path: Path) -> None:
    """Cut anywhere (inside the File Meta, a sequence, an element, the pixels): the same header or rejection.
    (nibabel's enhanced Philips MPRAGE is left out: its header is most of the file, so a cut one is never walked,
    and dcmread takes a second over each.)"""
    buf = _bytes(path)
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(buf[: max(133, int(len(buf) * fraction))])
    assert _outcome(cut, walk=True) == _outcome(cut, walk=False)
    whole = tmp_path / "whole.dcm"
    whole.write_bytes(buf)
    values = DecodedValues()
    _outcome(whole, walk=True, values=values)  # the intact file's values, warm: they must not hide the cut
    assert _outcome(cut, walk=True, values=values) == _outcome(cut, walk=False)


@pytest.mark.parametrize("stray", [1, 5, 7, 8, 11])
def test_bytes_short_of_an_element_after_the_header_read_as_dcmread_reads_them(stray: int, tmp_path: Path) -> None:
    """A file of a header only (no pixel data) with a few bytes after its last element: the element after it
    was cut. The walk leaves it to dcmread, whose dataset the header check calls truncated."""
    buf = _bytes(PYDICOM_DATA / "rtplan.dcm")
    path = tmp_path / "f.dcm"
    path.write_bytes(buf + b"\x0a\x30\x00\x00\x10\x00\x00\x00\x00\x00\x00"[:stray])
    values = DecodedValues()
    _outcome(PYDICOM_DATA / "rtplan.dcm", walk=True, values=values)
    assert walk_header(path.read_bytes(), name=path.name, whole=True) is None
    assert _outcome(path, walk=True, values=values) == _outcome(path, walk=False)


def test_a_sequence_cut_by_the_end_of_the_file_is_truncated(tmp_path: Path) -> None:
    """pydicom raises a bare OSError for it, which read as an unreadable file; it is a truncated one."""
    buf = (PYDICOM_DATA / "rtstruct.dcm").read_bytes()
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(buf[: len(buf) // 2])
    with pytest.raises(Rejected) as info:
        read_header(cut, read_head(cut), walk=True)
    assert info.value.reason == "truncated" and "No tag to read at file position" in info.value.detail


@pytest.mark.parametrize("charset", ["ISO_IR 100", "ISO_IR 192", "ISO_IR 144"])
@pytest.mark.parametrize("syntax", ["1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2"],
                         ids=["implicit", "explicit", "big-endian"])
def test_text_inside_undefined_length_sequences_decodes_with_the_files_character_set(
        charset: str, syntax: str, tmp_path: Path) -> None:
    """The walk hands undefined-length sequences to pydicom with the encoding the data set declared so far."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import UID, generate_uid

    name = {"ISO_IR 100": "Müller^Jörg", "ISO_IR 192": "山田^Анна", "ISO_IR 144": "Страхов^Анна"}[charset]
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = UID(syntax)
    ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID = generate_uid()
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    ds.SpecificCharacterSet = charset
    item = Dataset()
    item.PatientName = name
    item.PatientComments = name
    ds.OtherPatientIDsSequence = Sequence([item])
    ds["OtherPatientIDsSequence"].is_undefined_length = True
    ds.PatientName = name
    path = tmp_path / "f.dcm"
    ds.save_as(path, enforce_file_format=True, little_endian=syntax != "1.2.840.10008.1.2.2",
               implicit_vr=syntax == "1.2.840.10008.1.2")
    walked = walk_header(path.read_bytes(), name=path.name, whole=True)
    assert walked is not None
    (got,) = walked.dataset.OtherPatientIDsSequence
    assert walked.dataset["OtherPatientIDsSequence"].is_undefined_length
    assert (str(got.PatientName), got.PatientComments, str(walked.dataset.PatientName)) == (name, name, name)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_header_dataset_equals_dcmread(path: Path, tmp_path: Path) -> None:
    """What an item's metadata is read from: the same dataset, walked or not (a header past 256 KiB is not)."""
    from labzarr.readers._dicom_header import header_dataset

    plain = tmp_path / "f.dcm"
    plain.write_bytes(_bytes(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = pydicom.dcmread(plain, stop_before_pixels=True, force=True)
        except Exception as exc:
            with pytest.raises(type(exc)):
                header_dataset(plain, gzipped=False)
            return
        got = header_dataset(plain, gzipped=False)
        assert list(got.keys()) == list(expected.keys())
        assert all(got[t].value == expected[t].value for t in expected.keys())


@pytest.mark.parametrize("head_bytes", [200, 1024, 4096])
def test_files_larger_than_what_is_walked_read_the_same(head_bytes: int, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Of a file larger than the walk reads (16 MiB by default), only its head is walked and its pixel data is
    streamed from disk; a header running past the head is left to dcmread. Every shipped file, read so."""
    from labzarr.readers import _dicom_header

    monkeypatch.setattr(_dicom_header, "_WALK_BYTES", head_bytes)
    walked_heads = 0
    for i, path in enumerate(SHIPPED):
        buf = _bytes(path)
        plain = tmp_path / f"{i}.dcm"
        plain.write_bytes(buf)
        assert _outcome(plain, walk=True) == _outcome(plain, walk=False), path.name
        walked_heads += len(buf) > head_bytes and walk_header(buf[:head_bytes], name="", whole=False) is not None
    assert walked_heads >= {200: 0, 1024: 5, 4096: 25}[head_bytes]  # the streamed path is taken, not skipped


_ABSENT = ("NumberOfFrames", "ModalityLUTSequence", "DoseGridScaling", "PerFrameFunctionalGroupsSequence")


@pytest.mark.parametrize("path", [p for p in SHIPPED if _dcmread(_bytes(p))[0] is not None], ids=lambda p: p.name)
def test_the_headers_value_lookup_equals_pydicoms_get(path: Path) -> None:
    # Two reads of the file: `_get` meets raw (not yet converted) elements, as on a freshly walked header.
    buf = _bytes(path)
    ours, theirs = _dcmread(buf)[0], _dcmread(buf)[0]
    assert ours is not None and theirs is not None
    keywords = [k for k in map(keyword_for_tag, ours.keys()) if k] + list(_ABSENT)
    rows_raw = 0x00280010 in ours and not isinstance(ours.get_item(0x00280010), DataElement)
    missing = object()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for keyword in keywords:
            assert _get(ours, keyword, missing) == theirs.get(keyword, missing), keyword
    if path.name == "CT_small.dcm":  # the lookup met Rows raw and converted it in place, as pydicom does
        assert rows_raw and isinstance(ours.get_item(0x00280010), DataElement)


def _variants(tmp_path: Path) -> list[Path]:
    """Files of one series as scanners vary them, from pydicom's MR_small and CT_small: values of the same and of
    other lengths (instance numbers past 9 and 99, positions, UIDs), an element more or less, a changed first
    element of the data set, another character set and transfer syntax, a Philips private tag, a sequence, a cut
    file, one with no pixel data, and the other template; each file is read after the one before it."""
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ImplicitVRLittleEndian, generate_uid

    out = []

    def save(ds: pydicom.Dataset, **kwargs: object) -> None:
        out.append(tmp_path / f"{len(out):03d}.dcm")
        ds.save_as(out[-1], enforce_file_format=True, **kwargs)

    mr = pydicom.dcmread(PYDICOM_DATA / "MR_small.dcm")
    for k in (1, 2, 9, 10, 11, 99, 100, 101, 1000):
        ds = copy.deepcopy(mr)
        ds.InstanceNumber = k
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[str(k)])[: 40 + k % 7]
        ds.ImagePositionPatient = [-10.0 * k, 0.5, 12.25 + k / 3]
        ds.SliceLocation = k / 7
        save(ds)
    buf = out[-1].read_bytes()  # lengths other than the template's, cut inside its pixel data element's header
    out.append(tmp_path / "cut-in-pixel-header.dcm")
    out[-1].write_bytes(buf[: _dcmread(buf)[1] + 8])
    ds = copy.deepcopy(mr)
    ds.ImageType = ["DERIVED", "SECONDARY", "TRACEW"]  # the data set's first element, another length
    save(ds)
    ds = copy.deepcopy(mr)
    ds.SeriesDescription = "an element the others lack"
    save(ds)
    ds = copy.deepcopy(mr)
    del ds.SliceLocation
    save(ds)
    ds = copy.deepcopy(mr)
    ds.SpecificCharacterSet, ds.PatientName = "ISO_IR 100", "Müller^Jörg"
    save(ds)
    ds = copy.deepcopy(mr)
    ds.PatientName = "Müller^Jörg"  # the same bytes, read in the character set before
    save(ds)
    ds = copy.deepcopy(mr)
    ds.file_meta.TransferSyntaxUID = ImplicitVRLittleEndian
    save(ds)  # signed, implicit VR: a new template, whose header read caches its PixelRepresentation
    ds = copy.deepcopy(ds)
    ds.PixelRepresentation = 0  # unsigned: its US-or-SS elements (implicit VR) read as US, not as the template's
    ds["SmallestImagePixelValue"].VR = ds["LargestImagePixelValue"].VR = "US"
    ds.SmallestImagePixelValue, ds.LargestImagePixelValue = 40000, 40001
    save(ds)
    out.append(tmp_path / "big-endian.dcm")
    shutil.copyfile(PYDICOM_DATA / "MR_small_bigendian.dcm", out[-1])
    ds = copy.deepcopy(mr)
    ds.Manufacturer = "Philips Medical Systems"
    block = ds.private_block(0x2005, "Philips MR Imaging DD 001", create=True)
    block.add_new(0x0E, "FL", 0.25)
    save(ds)
    ds = copy.deepcopy(mr)
    ds.Manufacturer = "Philips Medical Systems"
    block = ds.private_block(0x2005, "Philips MR Imaging DD 001", create=True)
    block.add_new(0x0E, "FL", 0.5)  # the same length, another value
    save(ds)
    ds = copy.deepcopy(mr)
    item = Dataset()
    item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = "T-A0100", "SRT", "Brain"
    ds.AnatomicRegionSequence = Sequence([item])
    save(ds)
    ds = copy.deepcopy(mr)
    item = Dataset()
    item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = "T-D3000", "SRT", "Chest"
    ds.AnatomicRegionSequence = Sequence([item])  # a sequence's contents differ
    save(ds)
    ds = copy.deepcopy(mr)
    ds.Rows = 32  # the pixel data no longer matches the header
    save(ds)
    save(copy.deepcopy(mr))
    out.append(tmp_path / "cut.dcm")
    out[-1].write_bytes(out[-2].read_bytes()[:-100])  # the template's bytes, cut in the pixel data
    out.append(tmp_path / "cut-header.dcm")
    out[-1].write_bytes(out[-3].read_bytes()[:2000])  # and in the header
    ds = copy.deepcopy(mr)
    del ds.PixelData
    save(ds)
    save(copy.deepcopy(mr))
    save(pydicom.dcmread(PYDICOM_DATA / "CT_small.dcm"))  # another file altogether: a new template
    ct = pydicom.dcmread(PYDICOM_DATA / "CT_small.dcm")
    ct.InstanceNumber = 12345
    save(ct)
    return out


def test_files_walked_against_the_batchs_template_read_as_dcmread_reads_them(tmp_path: Path) -> None:
    """Read one after another with one `DecodedValues`, as a probe batch reads them: most files are walked against
    the template (not vacuous), and every walked dataset and header equals dcmread's."""
    from labzarr.readers import _dicom_walk

    files = _variants(tmp_path)
    expected = [_outcome(p, walk=False) for p in files]
    values = DecodedValues()
    taken = 0
    for path, want in zip(files, expected, strict=True):
        template = values.template
        buf = path.read_bytes()
        like = _dicom_walk._walk_like(buf, path.name, template, values) if template is not None else None
        theirs, stopped = _dcmread(buf)
        taken += like is not None
        if like is not None and theirs is not None:  # (a file cut in its pixel data dcmread refuses: outcomes only)
            assert like.pixel_at == stopped, path.name
            # The clone holds what pydicom's constructors set, as a file walked element by element does, and none
            # of what pydicom cached in the template as its header was read (`_pixel_rep`).
            walked = walk_header(buf, name=path.name, whole=True)
            assert walked is not None
            for mine, plain in ((like.dataset, walked.dataset), (like.dataset.file_meta, walked.dataset.file_meta)):
                assert vars(mine).keys() == vars(plain).keys()
                assert {k: v for k, v in vars(mine).items() if k not in ("_dict", "file_meta")} == \
                       {k: v for k, v in vars(plain).items() if k not in ("_dict", "file_meta")}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert list(like.dataset.keys()) == list(theirs.keys()), path.name
                assert all(like.dataset[t].value == theirs[t].value for t in theirs.keys()), path.name
                assert like.dataset.file_meta == theirs.file_meta
            assert like.dataset.original_encoding == theirs.original_encoding
            assert like.dataset.original_character_set == theirs.original_character_set
        assert _outcome(path, walk=True, values=values) == want, path.name
    assert taken >= 15, f"only {taken} of {len(files)} files were walked against a template"


@pytest.mark.parametrize("path", [p for p in SHIPPED if _dcmread(_bytes(p))[0] is not None], ids=lambda p: p.name)
def test_the_headers_cached_pixel_size_equals_pydicoms(path: Path) -> None:
    """`_expected_bytes` sizes the pixel data once per distinct geometry: the same answer, or the same failure, as
    pydicom's `get_expected_length` on the file's own dataset (twice: cold and cached)."""
    from pydicom.pixels.utils import get_expected_length

    from labzarr.readers._dicom_header import _expected_bytes

    ds = _dcmread(_bytes(path))[0]
    assert ds is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected: object = get_expected_length(ds, unit="bytes")
        except Exception as exc:
            expected = type(exc)
        for _ in range(2):
            try:
                got: object = _expected_bytes(ds)
            except Exception as exc:
                got = type(exc)
            assert got == expected


def test_a_file_walked_against_a_template_keeps_nothing_pydicom_cached_in_it(tmp_path: Path) -> None:
    """Reading a sequence makes pydicom cache the dataset's PixelRepresentation (`_pixel_rep`, which resolves
    US-or-SS elements in its items); a file walked against that template starts without it, as one walked
    element by element does, and resolves its own values (unsigned where the template is signed)."""
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ImplicitVRLittleEndian

    from labzarr.readers import _dicom_walk

    signed = pydicom.dcmread(PYDICOM_DATA / "MR_small.dcm")
    signed.file_meta.TransferSyntaxUID = ImplicitVRLittleEndian
    item = Dataset()
    item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = "T-A0100", "SRT", "Brain"
    signed.AnatomicRegionSequence = Sequence([item])
    signed.save_as(tmp_path / "signed.dcm", enforce_file_format=True)
    unsigned = copy.deepcopy(signed)
    unsigned["SmallestImagePixelValue"].VR = unsigned["LargestImagePixelValue"].VR = "US"
    unsigned.PixelRepresentation = 0
    unsigned.SmallestImagePixelValue, unsigned.LargestImagePixelValue = 40000, 40001
    unsigned.save_as(tmp_path / "unsigned.dcm", enforce_file_format=True)
    values = DecodedValues()
    _outcome(tmp_path / "signed.dcm", walk=True, values=values)
    assert values.template is not None
    buf = (tmp_path / "unsigned.dcm").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert values.template.dataset.AnatomicRegionSequence[0].CodeValue == "T-A0100"
        assert vars(values.template.dataset)["_pixel_rep"] == 1  # what the template now caches
        like = _dicom_walk._walk_like(buf, "unsigned.dcm", values.template, values)
        plain = walk_header(buf, name="unsigned.dcm", whole=True)
        assert like is not None and plain is not None
        assert vars(like.dataset).keys() == vars(plain.dataset).keys()
        assert like.dataset.SmallestImagePixelValue == 40000 == pydicom.dcmread(io.BytesIO(buf)).SmallestImagePixelValue


def test_a_file_walked_against_a_template_with_the_heads_mtime_has_dcmreads_timestamp(tmp_path: Path) -> None:
    """The probe hands the walk the modification time `read_head` saw (no second stat): the dataset's `timestamp`
    is the one `dcmread` records for the file, as it is where the walk reads the time itself."""
    values = DecodedValues()
    files = _variants(tmp_path)[:3]
    for path in files:
        head = read_head(path)
        assert head.mtime == path.stat().st_mtime
        walked = walk_header(path.read_bytes(), name=str(path), whole=True, values=values, mtime=head.mtime)
        assert walked is not None
        assert walked.dataset.timestamp == pydicom.dcmread(path, stop_before_pixels=True).timestamp
        _outcome(path, walk=True, values=values)  # the header read makes the file the next one's template
    assert values.template is not None
