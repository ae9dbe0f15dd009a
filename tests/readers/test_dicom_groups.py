"""The probe's fast header path against pydicom, element by element: on every DICOM file pydicom ships and on the
dcm2niix QA corpora present.

The fast path is the in-memory walk (`_dicom_walk.py`), which leaves sequences raw, and the functional groups
read from those raw bytes (`_dicom_groups.py`); the reference is `dcmread` and pydicom's own datasets. Every
element an enhanced frame is read from must have pydicom's value, and the whole `DicomHeader` (every top-level
element the probe uses, turned into the record planning sees) must be the same either way, read alone or in a
batch that shares decoded values and walks files against a template, as the probe reads them.

The corpus checks sample each corpus (every file of the enhanced one); `make stress` (-m slow) checks every file.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pydicom
import pydicom.uid
import pytest
from pydicom.dataset import Dataset

from labzarr.readers import DecodedValues, Rejected, read_dicom_header, read_head
from labzarr.readers._dicom_groups import FunctionalGroups, RawGroup, functional_groups
from labzarr.readers._dicom_header import (
    _PHILIPS_PER_FRAME,
    _PHILIPS_SCALE_SLOPE,
    GROUP_ELEMENTS,
    _group_item,
    header_dataset,
    read_header,
)
from labzarr.readers._dicom_meta import acquisition_metadata
from labzarr.readers._dicom_walk import walk_header

from ..dicom_corpora import CORPORA, corpus_repo, extract
from ..dicom_data import PYDICOM_DATA

_GRADIENT = (0x00189117, 0x00189076, 0x00189089)  # MR Diffusion > Gradient Direction > Gradient Orientation
_SAMPLE_EVERY = 40  # of a corpus' files, without -m slow (the enhanced corpus: every file)


def _dicom_files(root: Path) -> list[Path]:
    """Every file under `root` that is DICOM (a DICM preamble), the rest skipped."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with p.open("rb") as f:
                if f.read(132)[128:132] == b"DICM":
                    out.append(p)
    return out


def _enhanced(files: list[Path]) -> list[Path]:
    out = []
    for p in files:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ds = pydicom.dcmread(p, stop_before_pixels=True)
            except Exception:  # a file pydicom cannot read is not one of these
                continue
        if "PerFrameFunctionalGroupsSequence" in ds:
            out.append(p)
    return out


_SHIPPED = _dicom_files(PYDICOM_DATA)
_SHIPPED_ENHANCED = _enhanced(_SHIPPED)


def _groups(path: Path) -> tuple[FunctionalGroups, FunctionalGroups] | None:
    """(fast, reference) functional groups of `path`; None when the walk leaves the file to dcmread."""
    data = path.read_bytes()
    walked = walk_header(data, name=str(path), whole=True)
    if walked is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = functional_groups(pydicom.dcmread(path, stop_before_pixels=True))
    fast = functional_groups(walked.dataset)
    assert fast is not None and reference is not None
    return fast, reference


def _values(groups: FunctionalGroups, k: int) -> list[object]:
    """Every value frame `k` is read from, in `GROUP_ELEMENTS` order, then its gradient and Philips' private
    scale slopes."""
    item, shared = groups.per_frame[k], groups.shared
    out: list[object] = []
    for sequence, tag in GROUP_ELEMENTS:
        found = _group_item(item, shared, sequence)
        out.append(found.get(tag) if found is not None else None)
    diffusion = _group_item(item, shared, _GRADIENT[0])
    direction = diffusion.first(_GRADIENT[1]) if diffusion is not None else None
    out.append(direction.get(_GRADIENT[2]) if direction is not None else None)
    out.append([i.get(_PHILIPS_SCALE_SLOPE) for i in item.items(_PHILIPS_PER_FRAME)])
    return out


def _check_groups(path: Path) -> None:
    pair = _groups(path)
    if pair is None:
        return
    fast, reference = pair
    assert all(isinstance(g, RawGroup) for g in fast.per_frame), "the fast path read these groups through pydicom"
    assert len(fast.per_frame) == len(reference.per_frame)
    for k in range(len(reference.per_frame)):
        got, want = _values(fast, k), _values(reference, k)
        assert got == want, f"frame {k}"
        assert [type(v) for v in got] == [type(v) for v in want], f"frame {k}"


def _check_metadata(path: Path) -> None:
    """An item's acquisition metadata (readers/_dicom_meta.py), its frame's groups read raw, is the one read through
    pydicom's datasets: for the first, a middle and the last frame, with every lookup that reads a group."""
    groups = functional_groups(header_dataset(path, gzipped=False))
    assert groups is not None
    frames = len(groups.per_frame)
    for k in sorted({0, frames // 2, frames - 1}):
        fast, reference = (acquisition_metadata(path, gzipped=False, frame=k, image_type=(), echo_time_ms=None,
                                                phase_axes=("i", "j"), image_shape=(4, 4), descriptors="keep", raw=raw)
                           for raw in (True, False))
        assert fast == reference, f"frame {k}"


def test_pydicom_ships_enhanced_files_the_walk_takes() -> None:
    """The element checks below are not vacuous: pydicom's own files hold enhanced ones the fast path reads."""
    assert sum(_groups(p) is not None for p in _SHIPPED_ENHANCED) >= 2


@pytest.mark.parametrize("path", _SHIPPED_ENHANCED, ids=lambda p: p.name)
def test_every_group_element_has_pydicoms_value(path: Path) -> None:
    _check_groups(path)
    if _groups(path) is not None:
        _check_metadata(path)


def _outcome(path: Path, *, walk: bool, values: DecodedValues | None = None) -> object:
    head = read_head(path, whole_up_to=16 << 20)
    try:
        if walk:
            return read_dicom_header(path, head, values=values)
        return read_header(path, head, walk=False)
    except Rejected as exc:
        return exc.reason, exc.detail


def _check_headers(files: list[Path]) -> None:
    """Each file's header through the fast path, alone and in one batch (as the probe reads them), is dcmread's."""
    batch = DecodedValues()
    for path in files:
        want = _outcome(path, walk=False)
        assert _outcome(path, walk=True) == want, path
        assert _outcome(path, walk=True, values=batch) == want, path


@pytest.mark.parametrize("group", [_SHIPPED[i::4] for i in range(4)], ids=[f"quarter{i}" for i in range(4)])
def test_headers_of_every_shipped_file_are_dcmreads(group: list[Path]) -> None:
    _check_headers(group)


def _corpus_params() -> list[object]:
    params: list[object] = []
    for name in CORPORA:
        params.append(pytest.param(name, _SAMPLE_EVERY if name != "dcm_qa_enh" else 1, id=f"{name}-sample"))
        params.append(pytest.param(name, 1, id=f"{name}-all", marks=pytest.mark.slow))
    return params


@pytest.fixture(scope="session")
def corpus_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpora")


@pytest.mark.parametrize(("name", "every"), _corpus_params())
def test_the_fast_path_gives_pydicoms_values_on_the_corpora(name: str, every: int, corpus_root: Path) -> None:
    if corpus_repo(name) is None:
        pytest.skip(f"corpus {name} is not mirrored on this machine (../.mirror/neurolabusc+{name}/repo)")
    dest = corpus_root / name
    if not dest.is_dir():
        extract(name, dest)
    files = _dicom_files(dest)
    assert files, f"corpus {name} holds no DICOM file"
    sample = files[::every]
    _check_headers(sample)
    for path in _enhanced(sample):
        _check_groups(path)
        _check_metadata(path)


def _reencoded(dest: Path, syntax: pydicom.uid.UID, frames: int) -> Path:
    """pydicom's enhanced liver file with `frames` frames (its per-frame items repeated), each frame also holding
    Philips' private per-frame sequence with a scale slope (its private creators where Philips writes them),
    written in `syntax`: implicit VR makes every VR, private ones included, come from the dictionaries. (pydicom
    writes big endian only from its big-endian copy of the file.)"""
    ds = pydicom.dcmread(PYDICOM_DATA / ("liver_1frame.dcm" if syntax.is_little_endian else "liver_expb_1frame.dcm"))
    items = list(ds.PerFrameFunctionalGroupsSequence)
    per_frame = []
    for k in range(frames):
        item = copy.deepcopy(items[k % len(items)])
        slope = Dataset()
        slope.add_new(0x20050010, "LO", "Philips MR Imaging DD 001")
        slope.add_new(_PHILIPS_SCALE_SLOPE, "FL", 2.5 + k)
        item.add_new(0x20050014, "LO", "Philips MR Imaging DD 005")
        item.add_new(_PHILIPS_PER_FRAME, "SQ", [slope])
        per_frame.append(item)
    ds.PerFrameFunctionalGroupsSequence = per_frame
    ds.NumberOfFrames = frames
    ds.Manufacturer = "Philips Medical Systems"
    frame = ds.Rows * ds.Columns * ds.BitsAllocated // 8
    ds.PixelData = bytes(ds.PixelData[:frame]) * frames
    ds.file_meta.TransferSyntaxUID = syntax
    path = dest / f"liver-{frames}-{syntax}.dcm"
    ds.save_as(path, implicit_vr=syntax.is_implicit_VR, little_endian=syntax.is_little_endian)
    return path


@pytest.mark.parametrize("syntax", [pydicom.uid.ImplicitVRLittleEndian, pydicom.uid.ExplicitVRLittleEndian,
                                    pydicom.uid.ExplicitVRBigEndian], ids=lambda s: s.name)
def test_groups_in_every_native_encoding_private_ones_included(syntax: pydicom.uid.UID, tmp_path: Path) -> None:
    path = _reencoded(tmp_path, syntax, frames=7)
    assert _groups(path) is not None, "the walk leaves this file to dcmread"
    _check_groups(path)
    _check_metadata(path)
    _check_headers([path])
    header = read_dicom_header(path, read_head(path))
    assert header.enhanced and [f.scale_slope for f in header.frames] == [2.5 + k for k in range(7)]
