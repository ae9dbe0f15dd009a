"""Reading one DICOM file's header into a small frozen record, pixels left on disk.

Invariant: a `DicomHeader` is all that planning ever sees of a DICOM file. It is
read with pydicom's `stop_before_pixels`; the Pixel Data element is then only
walked (never decoded) to check that it is complete and to hash its bytes, so a
duplicated slice can be told from a different one without decoding either.
Every 2D image the file holds becomes one `Frame` with its own geometry: a plain
slice has one, a multi-frame object one per frame, a Siemens mosaic one per tile.
"""

from __future__ import annotations

import functools
import gzip
import io
import math
import struct
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, cast

import pydicom
import pydicom.uid
import xxhash
from pydicom.datadict import dictionary_VR, tag_for_keyword
from pydicom.dataelem import DataElement, RawDataElement
from pydicom.dataset import Dataset
from pydicom.errors import InvalidDicomError
from pydicom.pixels.decoders.base import get_decoder
from pydicom.pixels.utils import get_expected_length
from pydicom.tag import BaseTag
from pydicom.valuerep import IS

from ._dicom_groups import FunctionalGroups, Group, functional_groups
from ._dicom_records import RTSTRUCT_CLASS, SEG_CLASS, Defect, DicomHeader, Frame
from ._dicom_values import PYDICOM, plain_value
from ._dicom_walk import DecodedValues, Unwalkable, tag_key, walk_header
from ._head import Head
from .reasons import Reason, Rejected

__all__ = ["RTSTRUCT_CLASS", "SEG_CLASS", "Defect", "DicomHeader", "Frame", "csa_items", "header_dataset", "open_dicom",
           "read_dicom_header", "transfer_syntax"]

_PIXEL_TAGS = (0x7FE00010, 0x7FE00008, 0x7FE00009)  # Pixel Data, Float Pixel Data, Double Float Pixel Data
_ITEM, _SEQ_END = 0xFFFEE000, 0xFFFEE0DD
_BLOCK = 1 << 20
# A file up to this size is read whole and walked in memory (`_dicom_walk.py`); of a larger one, only the first
# this many bytes are walked and its pixel data is streamed from disk.
_WALK_BYTES = 16 << 20
_METADATA_BYTES = 256 << 10  # what `header_dataset` walks: headers beyond it (enhanced files) go to dcmread
_GRID_FRAME_OFFSET_VECTOR = 0x3004000C
_LONG_VRS = (b"OB", b"OW", b"OF", b"OD", b"OL", b"OV", b"UN")  # explicit VRs with a 4-byte length


@contextmanager
def open_dicom(path: Path, *, gzipped: bool, whole: bytes | None = None) -> Iterator[IO[bytes]]:
    """Open `path` for reading, through gzip when the file is a gzip stream (e.g. nibabel's `.dcm.gz`); `whole`:
    its bytes, already read."""
    with path.open("rb") if whole is None else io.BytesIO(whole) as raw:
        if not gzipped:
            yield raw
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as fp:
            yield cast(IO[bytes], fp)


def header_dataset(path: Path, *, gzipped: bool) -> Dataset:
    """A file's header as `dcmread(stop_before_pixels=True, force=True)` reads it, walked in memory where it can
    be (`_dicom_walk.py`): for reading values again after probing (an item's acquisition metadata)."""
    with open_dicom(path, gzipped=gzipped) as fp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not gzipped:
            size = fp.seek(0, io.SEEK_END)
            fp.seek(0)
            buf = fp.read(min(size, _METADATA_BYTES))
            walked = walk_header(buf, name=str(path), whole=len(buf) == size)
            if walked is not None:
                return walked.dataset
            fp.seek(0)
        return pydicom.dcmread(fp, stop_before_pixels=True, force=True)


def read_dicom_header(path: Path, head: Head, *, values: DecodedValues | None = None) -> DicomHeader:
    """Read the header of a DICOM file sniffed by `DicomReader`; raise `Rejected` when it cannot be parsed.
    `values`: elements decoded in earlier files of the same batch, reused where this file repeats them."""
    return read_header(path, head, walk=True, values=values)


def read_header(path: Path, head: Head, *, walk: bool, values: DecodedValues | None = None) -> DicomHeader:
    """`read_dicom_header`, with the header walked in memory (`_dicom_walk.py`) where it can be, or (`walk` False)
    read by `dcmread` always: the reference the walk is tested against."""
    preamble = head.data[128:132] == b"DICM"
    try:
        with open_dicom(path, gzipped=head.gzipped, whole=head.whole) as fp, warnings.catch_warnings():
            # pydicom warns (and carries on) about every non-conformant value; planning reports what matters.
            warnings.simplefilter("ignore")
            size = fp.seek(0, io.SEEK_END)
            fp.seek(0)
            walked = None
            if walk and preamble and not head.gzipped:
                buf = head.whole if head.whole is not None and size <= _WALK_BYTES else fp.read(min(size, _WALK_BYTES))
                walked = walk_header(buf, name=str(path), whole=len(buf) == size, values=values, mtime=head.mtime)
                if walked is not None and len(buf) == size:
                    fp = io.BytesIO(buf)  # the pixel scan below reads the same bytes again from memory
            if walked is not None:
                ds, pixel_at = walked.dataset, walked.pixel_at
            else:
                fp.seek(0)
                # force: the sniffer already required a DICM preamble or a plausible first few elements.
                ds = pydicom.dcmread(fp, stop_before_pixels=True, force=not preamble)
                pixel_at = fp.tell()
            _check_not_cut(ds, size, preamble)
            ts = transfer_syntax(ds)
            if ts.is_transfer_syntax and ts.is_deflated:
                pixel_at = -1
            header = _header(ds, ts, fp, pixel_at, size, gzipped=head.gzipped)
            if walked is not None and values is not None:
                values.learn(walked)
            return header
    except Rejected:
        raise
    except (EOFError, gzip.BadGzipFile) as exc:
        raise Rejected(Reason.TRUNCATED, f"file ends inside the DICOM header ({type(exc).__name__}: {exc})") from exc
    except OSError as exc:
        if exc.errno is not None:  # the file itself could not be read: the probe's row says so
            raise
        # pydicom's own OSError, "No tag to read at file position ...": a sequence that the end of the file cut
        raise Rejected(Reason.TRUNCATED, f"file ends inside a sequence of the DICOM header ({exc})") from exc
    except (InvalidDicomError, ValueError, KeyError, TypeError, struct.error, NotImplementedError,
            OverflowError, IndexError, AttributeError) as exc:
        raise Rejected(Reason.BAD_HEADER, f"pydicom cannot parse the header: {type(exc).__name__}: {exc}") from exc


def transfer_syntax(ds: Dataset) -> pydicom.uid.UID:
    """The dataset's transfer syntax: from its File Meta, or as pydicom found the encoding when there is none."""
    meta = getattr(ds, "file_meta", None)
    uid = _get(meta, "TransferSyntaxUID") if meta is not None else None
    if uid is None:  # no File Meta: pydicom guessed the encoding from the first element
        return pydicom.uid.ImplicitVRLittleEndian if ds.is_implicit_VR else (
            pydicom.uid.ExplicitVRLittleEndian if ds.is_little_endian else pydicom.uid.ExplicitVRBigEndian)
    return _syntax(str(uid))


@functools.lru_cache(maxsize=64)
def _syntax(uid: str) -> pydicom.uid.UID:
    """One validated UID per distinct transfer syntax, not one per file: a UID is an immutable str."""
    return pydicom.uid.UID(uid)


def _encoding(ds: Dataset) -> tuple[bool, bool]:
    """(implicit VR, little endian) as pydicom read the dataset, whatever syntax the File Meta names."""
    implicit, little = ds.original_encoding
    return bool(implicit), bool(little) if little is not None else True


def _get(ds: Dataset, keyword: str, default: Any = None) -> Any:
    """`ds.get(keyword, default)` for a DICOM keyword, the same value by the same conversion, without pydicom's
    attribute machinery (keyword to tag on every call): a header reads some 50 values of every file, and this
    took about a fifth of reading one (docs/benchmarks.md)."""
    tag = _tag_of(keyword)
    if tag is None:  # not a keyword of one tag (60xx overlays): as `get`
        return default
    # The dataset's own mapping, not `get_item`, which converts the key to a `Tag` again on every call; this
    # reads no deferred values, and neither the walk nor `read_header`'s dcmread defers any.
    elem = ds._dict.get(tag)
    if elem is None:
        return default
    if isinstance(elem, DataElement):
        return elem.value
    return ds[tag].value  # raw: converted (and kept) by pydicom, as `get` would


def _plain(ds: Dataset, keyword: str, default: Any = None) -> Any:
    """`_get`, for a value that only `str`, `int`, `_int`, `_float` or `_floats` read: one pydicom would still
    decode is decoded by `plain_value` where it can be, to what those make of pydicom's value."""
    tag = _tag_of(keyword)
    elem = ds._dict.get(tag) if tag is not None else None
    if isinstance(elem, RawDataElement):
        value = plain_value(elem, _vr_of(keyword))
        if value is not PYDICOM:
            return value
    return _get(ds, keyword, default)  # absent, decoded already, or one pydicom decodes


@functools.cache
def _vr_of(keyword: str) -> str:
    return str(dictionary_VR(keyword))


def _has(ds: Dataset, keyword: str) -> bool:
    """Whether `ds` holds the element, read or not: a sequence is not read to say so."""
    tag = _tag_of(keyword)
    return tag is not None and tag in ds._dict


@functools.cache
def _tag_of(keyword: str) -> BaseTag | None:
    tag = tag_for_keyword(keyword)
    return tag_key(tag) if tag is not None else None


def _check_not_cut(ds: Dataset, size: int, preamble: bool) -> None:
    """pydicom returns whatever it parsed before the end of a cut file; find the cut here."""
    meta = getattr(ds, "file_meta", None)
    group_length = _plain(meta, "FileMetaInformationGroupLength") if meta is not None else None
    if preamble and group_length is not None and size < 132 + 12 + int(group_length):
        raise Rejected(Reason.TRUNCATED, f"{size:,} B file ends inside its File Meta group "
                                         f"({132 + 12 + int(group_length):,} B)")
    if preamble and (meta is None or not len(meta)):
        raise Rejected(Reason.BAD_HEADER, "DICM prefix but no File Meta Information (group 0002) after it")
    if not ds._dict:
        return
    last = ds.get_item(next(reversed(cast(dict[BaseTag, Any], ds._dict))))  # `ds.keys()`' last, none listed
    value = getattr(last, "value", None)
    length = getattr(last, "length", None)
    if isinstance(value, bytes) and isinstance(length, int) and length != 0xFFFFFFFF and len(value) < length:
        raise Rejected(Reason.TRUNCATED, f"element {last.tag} ends after {len(value):,} of its {length:,} B "
                                         f"(file is {size:,} B)")
    value_tell = getattr(last, "value_tell", None)
    if isinstance(value_tell, int) and isinstance(length, int) and length != 0xFFFFFFFF:
        stray = size - (value_tell + length)
        if 0 < stray < 12:  # less than one element header follows the last element: the next one was cut
            raise Rejected(Reason.TRUNCATED, f"file ends {stray} B into the element after {last.tag} "
                                             f"(file is {size:,} B)")


def _header(ds: Dataset, ts: pydicom.uid.UID, fp: IO[bytes], pixel_at: int, size: int, *, gzipped: bool) -> DicomHeader:
    meta = getattr(ds, "file_meta", None)
    sop_class = str(_plain(ds, "SOPClassUID", "")
                    or (_plain(meta, "MediaStorageSOPClassUID", "") if meta is not None else "") or "")
    manufacturer = str(_get(ds, "Manufacturer", "") or "")
    base: dict[str, Any] = dict(
        sop_class=sop_class,
        sop_class_name=_uid_name(sop_class) if sop_class else "no SOP Class UID",
        modality=str(_get(ds, "Modality", "") or ""),
        manufacturer=manufacturer,
        study_uid=str(_plain(ds, "StudyInstanceUID", "") or ""),
        series_uid=str(_plain(ds, "SeriesInstanceUID", "") or ""),
        series_number=_int(_plain(ds, "SeriesNumber")),
        instance_number=_int(_plain(ds, "InstanceNumber")),
        sop_instance=str(_plain(ds, "SOPInstanceUID", "") or ""),
        transfer_syntax=str(ts),
        gzipped=gzipped,
        references=_references(ds, sop_class),
    )
    pixel = _pixel_element(ds, ts, fp, pixel_at)
    if pixel is None:
        return DicomHeader(**base)
    tag, length, value_at = pixel
    for key in ("Rows", "Columns", "BitsAllocated"):
        if _get(ds, key) in (None, "", 0):
            raise Rejected(Reason.BAD_HEADER, f"Pixel Data present but {key} is missing or 0")
    rows, columns, bits = int(_get(ds, "Rows")), int(_get(ds, "Columns")), int(_get(ds, "BitsAllocated"))
    if _has(ds, "ModalityLUTSequence"):
        raise Rejected(Reason.UNSUPPORTED_FORMAT, "a Modality LUT Sequence (non-linear rescale) is not applied by this "
                                                  "converter; expected RescaleSlope/RescaleIntercept")
    n_frames = _int(_get(ds, "NumberOfFrames")) or 1
    photometric = str(_get(ds, "PhotometricInterpretation", "") or "")
    try:
        groups, mosaic, frames = _all_frames(ds, n_frames, manufacturer, raw=True)
    except Unwalkable:  # functional groups laid out in a way the raw reading leaves to pydicom
        groups, mosaic, frames = _all_frames(ds, n_frames, manufacturer, raw=False)
    if _get(ds, "PixelData") is not None and pixel_at < 0:  # deflated: pydicom already holds the inflated value
        digest, defect = xxhash.xxh3_128_hexdigest(ds.PixelData), None
    else:
        digest, defect = _scan_pixels(fp, ds, ts, length, value_at, size, n_frames)
    defect = defect or _decoder_defect(ts)
    spacing_2d = _floats(_plain(ds, "PixelSpacing") or _get(ds, "ImagerPixelSpacing"), 2)
    little = _encoding(ds)[1]
    native = (value_at >= 0 and not gzipped and defect is None and length != 0xFFFFFFFF
              and ts.is_transfer_syntax and not ts.is_encapsulated and bits in (8, 16, 32, 64)
              # big-endian OW words hold 8-bit values byte-swapped in pairs: left to pydicom
              and not (bits == 8 and not little)
              and (photometric in ("MONOCHROME1", "MONOCHROME2")
                   or (photometric == "RGB" and int(_get(ds, "PlanarConfiguration") or 0) == 0)))
    return DicomHeader(
        **base, rows=rows, columns=columns, samples=int(_get(ds, "SamplesPerPixel", 1) or 1),
        bits_allocated=bits, bits_stored=int(_get(ds, "BitsStored") or bits),
        signed=int(_get(ds, "PixelRepresentation", 0) or 0) == 1, float_pixels=tag != _PIXEL_TAGS[0],
        photometric=photometric, frames=frames, mosaic=mosaic,
        spacing_2d=(spacing_2d[0], spacing_2d[1]) if spacing_2d else None,
        thickness=_float(_plain(ds, "SliceThickness")),
        palette_bits=_int(_list(_get(ds, "RedPaletteColorLookupTableDescriptor"))[2:3] or None) or 0,
        pixel_hash=digest, defect=defect, enhanced=groups is not None,
        native_at=value_at if native else -1, big_endian=not little,
    )



def _references(ds: Dataset, sop_class: str) -> tuple[str, ...]:
    """The series a SEG or RTSTRUCT is drawn on (sorted, distinct); () for any other object."""
    if sop_class == SEG_CLASS:
        found = [str(s.get("SeriesInstanceUID", "") or "") for s in _get(ds, "ReferencedSeriesSequence") or ()]
    elif sop_class == RTSTRUCT_CLASS:
        found = [str(se.get("SeriesInstanceUID", "") or "")
                 for fr in _get(ds, "ReferencedFrameOfReferenceSequence") or ()
                 for st in fr.get("RTReferencedStudySequence", None) or ()
                 for se in st.get("RTReferencedSeriesSequence", None) or ()]
    else:
        return ()
    return tuple(sorted({uid for uid in found if uid}))


@functools.lru_cache(maxsize=256)
def _uid_name(uid: str) -> str:
    """pydicom's name of a UID (a SOP class's): one lookup and validation per distinct UID, not per file."""
    return pydicom.uid.UID(uid).name


def _pixel_element(ds: Dataset, ts: pydicom.uid.UID, fp: IO[bytes], at: int) -> tuple[int, int, int] | None:
    """(tag, value length, value offset) of the pixel data element that stopped the header read, or None."""
    if at < 0:  # deflated transfer syntax: no offsets into the inflated stream; re-read it whole
        fp.seek(0)
        full = pydicom.dcmread(fp, force=True)
        tag = next((t for t in _PIXEL_TAGS if t in full), None)
        if tag is None:
            return None
        ds.PixelData = full[tag].value
        return tag, len(full[tag].value), -1
    # The element header is parsed here rather than by pydicom's generator, which would scan an undefined-length
    # value to its end (reading all compressed pixels) and cannot report where a cut stream stops.
    fp.seek(at)
    head = fp.read(12)
    if len(head) < 8:
        return None
    implicit, little = _encoding(ds)
    endian = "<" if little else ">"
    group, elem = struct.unpack(f"{endian}HH", head[:4])
    tag = group << 16 | elem
    if tag not in _PIXEL_TAGS:
        return None
    # Some writers switch to implicit VR despite an explicit transfer syntax (pydicom copes and warns); a VR field
    # that is not two capital letters means the same here.
    if implicit or not (head[4:6].isalpha() and head[4:6].isupper()):
        return tag, struct.unpack(f"{endian}L", head[4:8])[0], at + 8
    if head[4:6] in _LONG_VRS and len(head) == 12:
        return tag, struct.unpack(f"{endian}L", head[8:12])[0], at + 12
    return tag, struct.unpack(f"{endian}H", head[6:8])[0], at + 8


def _scan_pixels(fp: IO[bytes], ds: Dataset, ts: pydicom.uid.UID, length: int, value_at: int, size: int,
                 n_frames: int) -> tuple[str, Defect | None]:
    """Hash the encoded pixel bytes and check that they are all there, without decoding."""
    h = xxhash.xxh3_128()
    fp.seek(value_at)
    if length != 0xFFFFFFFF:
        try:
            expected = _expected_bytes(ds)
        except (AttributeError, ValueError, TypeError) as exc:
            return "", Defect(Reason.BAD_HEADER, f"cannot size the pixel data from the header: {exc}")
        got = _hash_stream(fp, h, length)
        if got < length:
            return h.hexdigest(), Defect(Reason.TRUNCATED, f"pixel data ends after {got:,} of its {length:,} B "
                                                           f"(file is {size:,} B)")
        if length < expected:
            return h.hexdigest(), Defect(Reason.TRUNCATED, f"pixel data holds {length:,} B, the header implies "
                                                           f"{expected:,} B ({n_frames} frame(s) of "
                                                           f"{int(ds.Rows)}x{int(ds.Columns)})")
        return h.hexdigest(), None
    # Encapsulated (compressed): walk the items to the sequence delimiter, hashing fragment bytes.
    endian = "<" if _encoding(ds)[1] else ">"
    items = 0
    while True:
        head = fp.read(8)
        if len(head) < 8:
            return h.hexdigest(), Defect(Reason.TRUNCATED, f"encapsulated pixel data ends after {items} item(s) "
                                                           f"without its sequence delimiter (file is {size:,} B)")
        group, elem, item_len = struct.unpack(f"{endian}HHL", head)
        tag = group << 16 | elem
        if tag == _SEQ_END:
            break
        if tag != _ITEM or item_len == 0xFFFFFFFF:
            return h.hexdigest(), Defect(Reason.CORRUPT_DATA, f"unexpected element ({group:04X},{elem:04X}) "
                                                              f"inside the encapsulated pixel data")
        got = _hash_stream(fp, h, item_len)
        if got < item_len:
            return h.hexdigest(), Defect(Reason.TRUNCATED, f"compressed fragment {items} ends after {got:,} of its "
                                                           f"{item_len:,} B (file is {size:,} B)")
        items += 1
    if items < 2:  # the first item is the Basic Offset Table: no fragment means no image
        return h.hexdigest(), Defect(Reason.TRUNCATED, "encapsulated pixel data holds no compressed fragment")
    return h.hexdigest(), None


_SIZED_BY = ("Rows", "Columns", "SamplesPerPixel", "NumberOfFrames", "BitsAllocated", "PhotometricInterpretation")


def _expected_bytes(ds: Dataset) -> int:
    """pydicom's `get_expected_length(ds, unit="bytes")`, computed once per distinct set of the values it reads
    (the files of a series share them); a dataset that lacks one, or holds one of another type (a number
    that did not parse, several values), is sized by pydicom directly, which decides what that means."""
    *numbers, photometric = (_get(ds, k, _ABSENT) for k in _SIZED_BY)
    frames = numbers.pop(3)
    if (all(type(v) is int for v in numbers) and (frames is _ABSENT or type(frames) is IS)
            and type(photometric) is str):
        return _expected_length(*numbers, None if frames is _ABSENT else int(cast(IS, frames)), photometric)
    return get_expected_length(ds, unit="bytes")  # an odd header: its own answer, or its own error


_ABSENT = object()


@functools.lru_cache(maxsize=256)
def _expected_length(rows: int, columns: int, samples: int, bits: int, frames: int | None, photometric: str) -> int:
    ds = Dataset()
    ds.Rows, ds.Columns, ds.SamplesPerPixel, ds.BitsAllocated = rows, columns, samples, bits
    ds.PhotometricInterpretation = photometric
    if frames is not None:
        ds.NumberOfFrames = frames
    return int(get_expected_length(ds, unit="bytes"))


def _hash_stream(fp: IO[bytes], h: Any, n: int) -> int:
    done = 0
    while done < n:
        block = fp.read(min(_BLOCK, n - done))
        if not block:
            break
        h.update(block)
        done += len(block)
    return done


def _decoder_defect(ts: pydicom.uid.UID) -> Defect | None:
    if not ts.is_transfer_syntax:
        return Defect(Reason.DECODER_MISSING, f"transfer syntax {ts} is not one pydicom knows")
    if not ts.is_compressed or ts.is_deflated:  # native and deflated pixels: pydicom decodes them itself
        return None
    try:
        decoder = get_decoder(ts)
    except NotImplementedError:
        return Defect(Reason.DECODER_MISSING, f"no pixel decoder exists for transfer syntax {ts} ({ts.name})")
    if not decoder.is_available:
        missing = "; ".join(decoder.missing_dependencies) or "none installed"
        return Defect(Reason.DECODER_MISSING, f"no decoder installed for {ts.name} ({ts}): {missing}")
    return None


# ---------------------------------------------------------------------------------------------------------------------
# frames: plain slices, classic multi-frame (RT dose grids, cine loops), enhanced multi-frame, Siemens mosaics


def _all_frames(ds: Dataset, n_frames: int, manufacturer: str, *, raw: bool,
                ) -> tuple[FunctionalGroups | None, int | None, tuple[Frame, ...]]:
    groups = functional_groups(ds, raw=raw)
    philips = "PHILIPS" in manufacturer.upper()  # dcm2niix reads 2005,100E only for Philips
    if groups is not None:
        frames = _enhanced_frames(ds, groups, n_frames)
        return groups, None, _philips_scale(ds, groups, frames) if philips else frames
    mosaic, frames = _classic_frames(ds, n_frames, lambda: _classic_extras(ds, philips))
    return None, mosaic, frames


def _classic_extras(ds: Dataset, philips: bool) -> dict[str, Any]:
    """The fields a classic file's frames take besides their geometry: what they are (`_classic_kind`), then for
    Philips the file's private scale slope, as `_philips_scale` gives an enhanced file's frames theirs. Built into
    each `Frame` at once: a `dataclasses.replace` per frame was a few per cent of reading a header."""
    extras: dict[str, Any] = _classic_kind(ds)
    if philips:
        scale = _private_float(ds, _PHILIPS_SCALE_SLOPE, _encoding(ds)[1])
        if scale:
            extras["scale_slope"] = scale
    return extras


_COMPONENTS = {"M": "MAGNITUDE", "P": "PHASE", "R": "REAL", "I": "IMAGINARY", "MAGNITUDE": "MAGNITUDE",
               "PHASE": "PHASE", "REAL": "REAL", "IMAGINARY": "IMAGINARY"}
_PHILIPS_B = 0x20011003  # Philips "Diffusion B-Factor" (FL)
_PHILIPS_DIRECTION = 0x20011004  # Philips "Diffusion Direction" (CS): "I" for the isotropic trace image
_PHILIPS_GRADIENT = (0x200510B0, 0x200510B1, 0x200510B2)  # Philips "Diffusion Direction RL/AP/FH" (FL)


def _classic_kind(ds: Dataset) -> dict[str, object]:
    """What a classic file's frames are (see `Frame`): ImageType, its complex component (the third value, as
    Siemens and Philips write M/P/R/I), and the diffusion b-value and gradient (public tags, else Philips')."""
    image_type = tuple(str(v).strip().upper() for v in _list(_get(ds, "ImageType")))
    out: dict[str, object] = {}
    if image_type:
        out["image_type"] = image_type
        component = _COMPONENTS.get(image_type[2] if len(image_type) > 2 else "", "")
        if component:
            out["component"] = component
    philips = "PHILIPS" in str(_get(ds, "Manufacturer", "") or "").upper()
    little = _encoding(ds)[1]
    b = _float(_get(ds, "DiffusionBValue"))
    if b is None and philips:
        b = _private_float(ds, _PHILIPS_B, little)
    gradient = _floats(_get(ds, "DiffusionGradientOrientation"), 3)
    if gradient is None and philips:
        parts = [_private_float(ds, t, little) for t in _PHILIPS_GRADIENT]
        gradient = tuple(v for v in parts if v is not None) if all(v is not None for v in parts) else None
    if b is None and "SIEMENS" in str(_get(ds, "Manufacturer", "") or "").upper():
        b, gradient = _siemens_diffusion(ds)
    if b is not None:
        out["bvalue"] = b
        if gradient is not None:
            out["gradient"] = (gradient[0], gradient[1], gradient[2])
    direction = _value_at(ds, _PHILIPS_DIRECTION, "CS") if philips else None
    if direction is not None and str(_text(direction)).strip().upper() == "I":
        out["directionality"] = "ISOTROPIC"
    return out


def _import_nicom() -> None:
    """Import nibabel.nicom under Python's default warning filter, not under the one a header is read under
    (which ignores pydicom's notes on non-conformant values): its warning that its DICOM readers are experimental,
    raised once per process at that import, is then shown (in a run: recorded in the run log, `warnings_log.py`)
    wherever the first CSA header is read, in a worker's probe as in the driver."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        import nibabel.nicom  # noqa: F401


def csa_items(ds: Dataset) -> dict[str, list[Any]]:
    """The items of every tag of a Siemens file's CSA image header, by name (nibabel's reader); {} when it has
    none or it cannot be read, since these values are optional extras (a mosaic's own CSA check is `_mosaic`'s)."""
    _import_nicom()
    from nibabel.nicom import csareader

    try:
        csa = csareader.get_csa_header(ds, "image")
    except (csareader.CSAReadError, KeyError, ValueError, TypeError, struct.error):
        return {}
    return {name: list(tag.get("items") or []) for name, tag in ((csa or {}).get("tags") or {}).items()}


def _siemens_diffusion(ds: Dataset) -> tuple[float | None, tuple[float, ...] | None]:
    """A Siemens file's b-value and gradient (LPS) from its CSA image header (B_value, DiffusionGradientDirection),
    where the public tags are absent, as dcm2niix reads them: a negative b is 0, and a b = 0 image has none."""
    items = csa_items(ds)
    if not items.get("B_value"):
        return None, None
    b = max(0.0, float(items["B_value"][0]))
    g_items = [float(v) for v in items.get("DiffusionGradientDirection", [])]
    return b, (tuple(g_items[:3]) if b > 0 and len(g_items) >= 3 else (0.0, 0.0, 0.0))


def _text(value: object) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


def _classic_frames(ds: Dataset, n_frames: int, extras: Callable[[], dict[str, Any]],
                    ) -> tuple[int | None, tuple[Frame, ...]]:
    """A classic file's frames: their geometry and rescale read first, then `extras()`, the fields every frame
    takes besides (`_classic_extras`)."""
    mosaic = _mosaic(ds, extras) if n_frames == 1 else None
    if mosaic is not None:
        return mosaic
    slope, intercept = _rescale(ds)
    position = _floats(_plain(ds, "ImagePositionPatient"), 3)
    orientation = _floats(_plain(ds, "ImageOrientationPatient"), 6)
    spacing = _floats(_plain(ds, "PixelSpacing"), 2)
    echo = _float(_plain(ds, "EchoNumbers"))
    order = _classic_order(ds)
    if n_frames == 1:
        return None, (_frame(0, position, orientation, spacing, slope, intercept, echo, order, **extras()),)
    offsets = _floats(ds.get(_GRID_FRAME_OFFSET_VECTOR).value if _GRID_FRAME_OFFSET_VECTOR in ds else None, n_frames)
    more = extras()
    if position and orientation and offsets:
        # RT Dose and similar grids: frame k lies offsets[k] - offsets[0] mm along the slice normal from IPP
        # (PS3.3 C.8.8.3.2: relative when offsets[0] is 0, else absolute; the difference is right in both cases).
        normal = _normal(orientation)
        return None, tuple(
            _frame(k, tuple(p + (off - offsets[0]) * n for p, n in zip(position, normal)), orientation, spacing,
                   slope, intercept, echo, order + (float(k),), **more)
            for k, off in enumerate(offsets))
    # A multi-frame object without per-frame positions (cine loop, secondary capture): frames, not slices.
    return None, tuple(_frame(k, None, None, spacing, slope, intercept, echo, order + (float(k),), **more)
                       for k in range(n_frames))


def _frame(index: int, position: Sequence[float] | None, orientation: Sequence[float] | None,
           spacing: Sequence[float] | None, slope: float, intercept: float, echo: float | None,
           order: tuple[float, ...], **extras: Any) -> Frame:
    return Frame(
        index=index,
        position=(position[0], position[1], position[2]) if position else None,
        orientation=(orientation[0], orientation[1], orientation[2], orientation[3], orientation[4], orientation[5])
        if orientation else None,
        spacing=(spacing[0], spacing[1]) if spacing else None,
        slope=slope, intercept=intercept, echo=echo, order=order, **extras,
    )


_PHILIPS_SCALE_SLOPE = 0x2005100E  # "Philips MR Imaging DD 001" Scale Slope (FL), at the fixed tag dcm2niix reads
_PHILIPS_PER_FRAME = 0x2005140F  # Philips' private per-frame sequence in an enhanced file, holding that slope


def _philips_scale(ds: Dataset, groups: FunctionalGroups | None, frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """`frames` with Philips' private scale slope: per frame from an enhanced file's private per-frame items,
    else the file's own."""
    little = _encoding(ds)[1]
    top = _private_float(ds, _PHILIPS_SCALE_SLOPE, little)
    per_frame = groups.per_frame if groups is not None else ()
    out = []
    for f in frames:
        ss = top
        if f.index < len(per_frame):
            private = per_frame[f.index].items(_PHILIPS_PER_FRAME)
            found = (_float_of(i.get(_PHILIPS_SCALE_SLOPE), little) for i in private)
            ss = next((v for v in found if v is not None), ss)
        out.append(replace(f, scale_slope=ss) if ss else f)
    return tuple(out)


def _private_float(ds: Dataset, tag: int, little: bool) -> float | None:
    """A private FL element's value; decoded from its bytes when an implicit-VR file left it unknown (UN)."""
    return _float_of(_value_at(ds, tag, "FL"), little)


def _value_at(ds: Dataset, tag: int, vr: str) -> Any:
    """`ds.get(tag).value`, None where `ds` has no `tag`; a raw value `plain_value` decodes as `vr` (a private
    element's explicit VR) is decoded there, to what `_float_of` or `_text` make of pydicom's."""
    elem = ds._dict.get(tag_key(tag))
    if elem is None:
        return None
    if not isinstance(elem, DataElement):
        value = plain_value(elem, vr)
        if value is not PYDICOM:
            return value
    converted = ds.get(tag)
    return converted.value if converted is not None else None


def _float_of(value: Any, little: bool) -> float | None:
    """A private FL value as pydicom gave it: a float, or its 4 bytes (UN)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        if len(value) != 4:
            return None
        value = struct.unpack("<f" if little else ">f", value)[0]
    return _float(value)


def _classic_order(ds: Dataset) -> tuple[float, ...]:
    # Acquisition order of repeats at one position (fMRI time points, DWI directions), as dcm2niix sorts them:
    # temporal position, then acquisition number, then instance number, then trigger time.
    return tuple(_float(_plain(ds, k)) or 0.0 for k in
                 ("TemporalPositionIdentifier", "AcquisitionNumber", "InstanceNumber", "TriggerTime"))


def _rescale(ds: Dataset) -> tuple[float, float]:
    return _rescale_of(_plain(ds, "RescaleSlope"), _plain(ds, "RescaleIntercept"), _get(ds, "DoseGridScaling"))


def _rescale_of(slope_value: Any, intercept_value: Any, dose_scaling: Any) -> tuple[float, float]:
    slope = _float(slope_value)
    intercept = _float(intercept_value)
    if dose_scaling is not None and slope is None:  # RT Dose: stored value x scaling = dose (Gy)
        slope = _float(dose_scaling)
    return (slope if slope not in (None, 0.0) else 1.0), (intercept or 0.0)


# The functional groups and their elements that an enhanced frame is read from (PS3.3 C.7.6.16.2).
_PLANE_POSITION, _IMAGE_POSITION = 0x00209113, 0x00200032
_PLANE_ORIENTATION, _IMAGE_ORIENTATION = 0x00209116, 0x00200037
_PIXEL_MEASURES, _PIXEL_SPACING = 0x00289110, 0x00280030
_PIXEL_VALUE_TRANSFORMATION = 0x00289145
_RESCALE_SLOPE, _RESCALE_INTERCEPT, _DOSE_GRID_SCALING = 0x00281053, 0x00281052, 0x3004000E
_MR_ECHO, _EFFECTIVE_ECHO_TIME = 0x00189114, 0x00189082
_FRAME_CONTENT, _TEMPORAL_POSITION_INDEX, _DIMENSION_INDEX_VALUES = 0x00209111, 0x00209128, 0x00209157
# MR, CT and PET Image Frame Type Sequences, tried in this order; their FrameType and ComplexImageComponent
_FRAME_TYPE_SEQUENCES = (0x00189226, 0x00189329, 0x00189751)
_FRAME_TYPE, _COMPLEX_IMAGE_COMPONENT = 0x00089007, 0x00089208
_MR_DIFFUSION, _DIFFUSION_B_VALUE, _DIFFUSION_DIRECTIONALITY = 0x00189117, 0x00189087, 0x00189075
_DIFFUSION_GRADIENT_DIRECTION, _DIFFUSION_GRADIENT_ORIENTATION = 0x00189076, 0x00189089
# Every (group, element) a frame is read from, for tests/readers/test_dicom_groups.py to check value by value.
GROUP_ELEMENTS = (
    (_PLANE_POSITION, _IMAGE_POSITION), (_PLANE_ORIENTATION, _IMAGE_ORIENTATION), (_PIXEL_MEASURES, _PIXEL_SPACING),
    *((_PIXEL_VALUE_TRANSFORMATION, t) for t in (_RESCALE_SLOPE, _RESCALE_INTERCEPT, _DOSE_GRID_SCALING)),
    (_MR_ECHO, _EFFECTIVE_ECHO_TIME),
    (_FRAME_CONTENT, _TEMPORAL_POSITION_INDEX), (_FRAME_CONTENT, _DIMENSION_INDEX_VALUES),
    *((s, t) for s in _FRAME_TYPE_SEQUENCES for t in (_FRAME_TYPE, _COMPLEX_IMAGE_COMPONENT)),
    *((_MR_DIFFUSION, t) for t in (_DIFFUSION_B_VALUE, _DIFFUSION_DIRECTIONALITY)),
)


def _enhanced_frames(ds: Dataset, groups: FunctionalGroups, n_frames: int) -> tuple[Frame, ...]:
    per_frame, shared = groups.per_frame, groups.shared
    if len(per_frame) != n_frames:
        raise Rejected(Reason.BAD_HEADER, f"{len(per_frame)} per-frame functional groups for "
                                          f"NumberOfFrames = {n_frames}")
    top_slope, top_intercept = _rescale(ds)
    frames = []
    for k, item in enumerate(per_frame):
        position = _floats(_group(item, shared, _PLANE_POSITION, _IMAGE_POSITION), 3)
        orientation = _floats(_group(item, shared, _PLANE_ORIENTATION, _IMAGE_ORIENTATION), 6)
        spacing = _floats(_group(item, shared, _PIXEL_MEASURES, _PIXEL_SPACING), 2)
        transform = _group_item(item, shared, _PIXEL_VALUE_TRANSFORMATION)
        slope, intercept = (_rescale_of(transform.get(_RESCALE_SLOPE), transform.get(_RESCALE_INTERCEPT),
                                        transform.get(_DOSE_GRID_SCALING))
                            if transform is not None else (top_slope, top_intercept))
        echo = _float(_group(item, shared, _MR_ECHO, _EFFECTIVE_ECHO_TIME))
        content = _group_item(item, shared, _FRAME_CONTENT)
        temporal = _float(content.get(_TEMPORAL_POSITION_INDEX)) if content is not None else None
        dims = tuple(float(v) for v in _list(content.get(_DIMENSION_INDEX_VALUES))) if content is not None else ()
        frame = _frame(k, position, orientation, spacing, slope, intercept, echo, (temporal or 0.0, *dims, float(k)))
        frames.append(replace(frame, **_enhanced_kind(item, shared)))  # type: ignore[arg-type]
    return tuple(frames)


def _enhanced_kind(item: Group, shared: Group | None) -> dict[str, object]:
    """What one enhanced frame is (see `Frame`): its FrameType and complex component, and its diffusion."""
    out: dict[str, object] = {}
    frame_type = next((f for f in (_group_item(item, shared, s) for s in _FRAME_TYPE_SEQUENCES) if f is not None),
                      None)
    if frame_type is not None:
        out["image_type"] = tuple(str(v).strip().upper() for v in _list(frame_type.get(_FRAME_TYPE)))
        component = _COMPONENTS.get(str(frame_type.get(_COMPLEX_IMAGE_COMPONENT) or "").upper(), "")
        if component:
            out["component"] = component
    diffusion = _group_item(item, shared, _MR_DIFFUSION)
    if diffusion is not None:
        b = _float(diffusion.get(_DIFFUSION_B_VALUE))
        if b is not None:
            out["bvalue"] = b
        direction = diffusion.first(_DIFFUSION_GRADIENT_DIRECTION)
        gradient = _floats(direction.get(_DIFFUSION_GRADIENT_ORIENTATION), 3) if direction is not None else None
        if gradient is not None:
            out["gradient"] = (gradient[0], gradient[1], gradient[2])
        directionality = str(diffusion.get(_DIFFUSION_DIRECTIONALITY) or "").upper()
        if directionality:
            out["directionality"] = directionality
    return out


def _group_item(item: Group, shared: Group | None, sequence: int) -> Group | None:
    """The frame's own group `sequence`, else the shared one."""
    found = item.first(sequence)
    if found is None and shared is not None:
        found = shared.first(sequence)
    return found


def _group(item: Group, shared: Group | None, sequence: int, key: int) -> Any:
    found = _group_item(item, shared, sequence)
    return found.get(key) if found is not None else None


def _mosaic(ds: Dataset, extras: Callable[[], dict[str, Any]]) -> tuple[int, tuple[Frame, ...]] | None:
    """A Siemens mosaic: nibabel's CSA reader gives the tile count, slice normal and corrected origin; each tile
    takes `extras()` besides, as `_classic_frames` gives a file's frames."""
    image_type = [str(v).upper() for v in _list(_get(ds, "ImageType"))]
    if "MOSAIC" not in image_type:
        return None
    _import_nicom()
    from nibabel.nicom import csareader, dicomwrappers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nibabel flags its DICOM wrappers as experimental on every use
        try:
            csa = csareader.get_csa_header(ds, "image")
            n_tiles = csareader.get_n_mosaic(csa) if csa else None
        except (csareader.CSAReadError, KeyError, ValueError, struct.error) as exc:
            raise Rejected(Reason.BAD_HEADER, f"Siemens mosaic with an unreadable CSA header: {exc}") from exc
        if not n_tiles:
            raise Rejected(Reason.BAD_HEADER, "ImageType says MOSAIC but the CSA header has no NumberOfImagesInMosaic")
        wrapper = dicomwrappers.MosaicWrapper(ds, csa)
        origin = wrapper.image_position
        normal = csareader.get_slice_normal(csa)
    grid = int(math.ceil(math.sqrt(n_tiles)))
    if int(ds.Rows) % grid or int(ds.Columns) % grid:
        # Real mosaics are whole tiles; dcm2niix reads such a file with a fractional row stride, nibabel fails.
        raise Rejected(Reason.BAD_HEADER, f"mosaic of {n_tiles} tiles: {int(ds.Rows)}x{int(ds.Columns)} pixels is not "
                                          f"a whole number of {grid}x{grid} tiles")
    orientation = _floats(_plain(ds, "ImageOrientationPatient"), 6)
    spacing = _floats(_plain(ds, "PixelSpacing"), 2)
    if origin is None or orientation is None or spacing is None:
        raise Rejected(Reason.BAD_HEADER, "Siemens mosaic without ImagePositionPatient, ImageOrientationPatient "
                                          "or PixelSpacing")
    if normal is None:
        normal = _normal(orientation)
    step = _float(_plain(ds, "SpacingBetweenSlices")) or _float(_plain(ds, "SliceThickness")) or 1.0
    slope, intercept = _rescale(ds)
    echo, order = _float(_plain(ds, "EchoNumbers")), _classic_order(ds)
    more = extras()
    frames = tuple(
        _frame(k, tuple(float(o) + k * step * float(n) for o, n in zip(origin, normal)), orientation, spacing,
               slope, intercept, echo, order + (float(k),), **more)
        for k in range(int(n_tiles)))
    return grid, frames


def _normal(orientation: Sequence[float]) -> tuple[float, float, float]:
    r, c = orientation[:3], orientation[3:6]
    n = (r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2], r[0] * c[1] - r[1] * c[0])
    norm = math.sqrt(sum(v * v for v in n)) or 1.0
    return (n[0] / norm, n[1] / norm, n[2] / norm)


def _list(value: Any) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return list(value)
    return [value]


def _floats(value: Any, n: int) -> tuple[float, ...] | None:
    items = _list(value)
    if len(items) != n:
        return None
    try:
        out = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        return None
    return out if all(math.isfinite(v) for v in out) else None


def _float(value: Any) -> float | None:
    items = _list(value)
    if not items:
        return None
    try:
        out = float(items[0])
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _int(value: Any) -> int | None:
    f = _float(value)
    return int(f) if f is not None and f.is_integer() else None
