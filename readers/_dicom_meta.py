"""Acquisition metadata of a DICOM item: an allow-list modelled on dcm2niix's BIDS sidecar, nothing else.

Invariant: only the tags named here (or named by the user, opt-in, in
`[dicom] metadata`) are ever read into a record; no other value of a DICOM
file reaches the store, the manifest or a report. So patient names, IDs,
birth dates, study and acquisition dates, institutions and people's names
stay in the raw files whatever a scanner puts in them, private tags and
sequences included.

Names and units are the BIDS sidecar's, as dcm2niix writes them: times in
seconds (DICOM's are milliseconds), angles in degrees, lengths in mm.

`DESCRIPTORS` (SeriesDescription, ProtocolName) are free text an operator
types at the scanner, and a patient's name sometimes ends up there: PS3.15's
Basic Application Level Confidentiality Profile removes both unless its Clean
Descriptors option applies. They are read only when the caller keeps them
(`descriptors="keep"`, from `[dicom] descriptors`).
`PhaseEncodingAxis` and the b-vectors refer to the *stored* array's axes,
canonical RAS (`i`, `j`, `k` = x, y, z): dcm2niix's `.bvec` refers to its
own NIfTI's voxel axes instead, in FSL's convention.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from .records import Metadata, MetaValue

if TYPE_CHECKING:
    from pydicom.dataset import Dataset

    from ._dicom_groups import FunctionalGroups, Group

# pydicom and the header reader are imported by the functions that read a file: the spec and the plan use only the
# allow-list, and the conversion driver, which imports them, does not import pydicom (readers/__init__.py).

__all__ = ["ALLOWED", "DESCRIPTORS", "Descriptors", "acquisition_metadata", "diffusion_metadata", "is_known_keyword"]

Descriptors = Literal["keep", "drop"]

# (BIDS name, DICOM keyword, the enhanced functional group holding it, scale to BIDS units)
_TAGS: tuple[tuple[str, str, str, float], ...] = (
    ("Modality", "Modality", "", 1.0),
    ("Manufacturer", "Manufacturer", "", 1.0),
    ("ManufacturersModelName", "ManufacturerModelName", "", 1.0),
    ("MagneticFieldStrength", "MagneticFieldStrength", "", 1.0),
    ("SeriesDescription", "SeriesDescription", "", 1.0),
    ("ProtocolName", "ProtocolName", "", 1.0),
    ("RepetitionTime", "RepetitionTime", "MRTimingAndRelatedParametersSequence", 1e-3),
    ("InversionTime", "InversionTime", "", 1e-3),
    ("FlipAngle", "FlipAngle", "MRTimingAndRelatedParametersSequence", 1.0),
    ("SliceThickness", "SliceThickness", "PixelMeasuresSequence", 1.0),
)
# Every name the allow-list may write: the tags above and what is derived per item.
ALLOWED: frozenset[str] = frozenset({n for n, _, _, _ in _TAGS} | {
    "ImageType", "EchoTime", "PhaseEncodingAxis", "PhaseEncodingDirection", "EffectiveEchoSpacing",
    "TotalReadoutTime", "SliceTiming", "bvals", "bvecs"})
# The allow-list's free-text descriptors, kept only on request (see the module docstring).
DESCRIPTORS: frozenset[str] = frozenset({"SeriesDescription", "ProtocolName"})


def is_known_keyword(name: str) -> bool:
    """True for a DICOM dictionary keyword (`BodyPartExamined`), what `[dicom] metadata` may name."""
    from pydicom.datadict import tag_for_keyword

    return tag_for_keyword(name) is not None


def acquisition_metadata(path: Path, *, gzipped: bool, frame: int, image_type: Sequence[str],
                         echo_time_ms: float | None, extra: Sequence[str] = (),
                         phase_axes: tuple[str, str] | None = None, phase_signs: tuple[float, float] = (1.0, 1.0),
                         image_shape: tuple[int, int] | None = None,
                         slice_tiles: Sequence[int] = (), descriptors: Descriptors = "drop",
                         raw: bool = True) -> Metadata:
    """The allow-listed metadata of the item whose first image is `frame` of `path`, plus the `extra` keywords.

    `image_type` and `echo_time_ms` are the item's own (an enhanced file's parts differ in them);
    `phase_axes` names the stored axes a row and a column run along, for `PhaseEncodingAxis`, and
    `phase_signs` whether each runs the same way (+1) or reversed (-1); `image_shape` is one image's (rows,
    columns) (a mosaic's tile); `slice_tiles` the mosaic tile of each stored slice, in stored order;
    `descriptors` whether `DESCRIPTORS` are read.

    An enhanced file's functional groups are read from the bytes the header walk left raw (`_dicom_groups.py`):
    only the frame's own item and the shared one are read, not a pydicom `Dataset` for every item of every frame
    (most of converting a small enhanced delivery, docs/benchmarks.md). `raw` False reads them through pydicom's
    datasets, the reference the raw reading is tested against; so does an item the raw reading leaves to pydicom.
    """
    from ._dicom_groups import functional_groups
    from ._dicom_header import header_dataset
    from ._dicom_walk import Unwalkable

    ds = header_dataset(path, gzipped=gzipped)

    def read(groups: FunctionalGroups | None) -> Metadata:
        return _metadata(ds, _groups(groups, frame), image_type=image_type, echo_time_ms=echo_time_ms, extra=extra,
                         phase_axes=phase_axes, phase_signs=phase_signs, image_shape=image_shape,
                         slice_tiles=slice_tiles, descriptors=descriptors)

    if raw:
        try:
            return read(functional_groups(ds))
        except Unwalkable:
            pass
    return read(functional_groups(ds, raw=False))


def _metadata(ds: Dataset, groups: Sequence[Group], *, image_type: Sequence[str], echo_time_ms: float | None,
              extra: Sequence[str], phase_axes: tuple[str, str] | None, phase_signs: tuple[float, float],
              image_shape: tuple[int, int] | None, slice_tiles: Sequence[int], descriptors: Descriptors) -> Metadata:
    out: dict[str, MetaValue] = {}
    for name, keyword, group, scale in _TAGS:
        if descriptors == "drop" and name in DESCRIPTORS:
            continue
        value = _value(ds, groups, keyword, group)
        if value is not None:
            out[name] = _scaled(value, scale)
    if image_type:
        out["ImageType"] = tuple(image_type)
    echo = echo_time_ms if echo_time_ms is not None else _number(ds.get("EchoTime"))
    if echo is not None:
        out["EchoTime"] = _round(echo * 1e-3)
    direction = _value(ds, groups, "InPlanePhaseEncodingDirection", "MRFOVGeometrySequence")
    if phase_axes is not None and direction in ("ROW", "COL"):
        along = 0 if direction == "ROW" else 1
        out["PhaseEncodingAxis"] = phase_axes[along]
        out.update(_siemens_timing(ds, phase_axes[along], phase_signs[along], image_shape, along, slice_tiles))
    for keyword in extra:
        value = _value(ds, groups, keyword, "")
        if value is not None:
            out[keyword] = value
    return tuple(sorted(out.items()))


def diffusion_metadata(bvalues: Sequence[float | None], gradients: Sequence[tuple[float, float, float] | None],
                       rotation: npt.NDArray[np.float64]) -> Metadata:
    """`bvals` and `bvecs` per volume, the gradients (LPS, as DICOM gives them) turned into the stored axes:
    `rotation` maps the stored array's unit axes to RAS directions. Empty unless every volume has a b-value
    and the series is a diffusion series (b varies, or some gradient is not zero)."""
    if not bvalues or any(b is None for b in bvalues):
        return ()
    vecs = [(0.0, 0.0, 0.0) if g is None else g for g in gradients]
    if len({b for b in bvalues}) < 2 and not any(any(v) for v in vecs):
        return ()
    ras = np.array(vecs, dtype=np.float64) * np.array([-1.0, -1.0, 1.0])  # LPS -> RAS
    stored = ras @ rotation  # the components along each stored axis: rotation.T @ g, row-wise
    return (("bvals", tuple(_round(float(b)) for b in bvalues if b is not None)),
            ("bvecs", tuple(tuple(_round(float(v)) + 0.0 for v in row) for row in stored)))


def _siemens_timing(ds: Dataset, axis: str, sign: float, image_shape: tuple[int, int] | None, along: int,
                    slice_tiles: Sequence[int]) -> dict[str, MetaValue]:
    """What Siemens' CSA image header says of the phase encoding and slice timing, as dcm2niix reads it:
    `PhaseEncodingDirection` (the polarity PhaseEncodingDirectionPositive gives, along the stored axis),
    `EffectiveEchoSpacing` = 1 / (BandwidthPerPixelPhaseEncode x phase-encoding matrix), `TotalReadoutTime` =
    that x (matrix - 1), and a mosaic's `SliceTiming` (MosaicRefAcqTimes, ms -> s) in stored slice order."""
    # dcm2niix writes neither the phase-encoding polarity nor slice times for a 3D acquisition
    if "SIEMENS" not in str(ds.get("Manufacturer", "") or "").upper() or str(ds.get("MRAcquisitionType", "")) == "3D":
        return {}
    from ._dicom_header import csa_items

    items = csa_items(ds)
    out: dict[str, MetaValue] = {}
    positive = items.get("PhaseEncodingDirectionPositive", [])
    if positive and positive[0] in (0, 1):
        # positive: towards increasing row (COL) or column (ROW) index, whichever way the stored axis runs
        out["PhaseEncodingDirection"] = axis + ("" if (positive[0] == 1) == (sign > 0) else "-")
    bandwidth = items.get("BandwidthPerPixelPhaseEncode", [])
    matrix = image_shape[along] if image_shape else 0
    if bandwidth and float(bandwidth[0]) > 0 and matrix > 1:
        spacing = 1.0 / (float(bandwidth[0]) * matrix)
        out["EffectiveEchoSpacing"] = _round(spacing)
        out["TotalReadoutTime"] = _round(spacing * (matrix - 1))
    times = [float(t) for t in items.get("MosaicRefAcqTimes", [])]
    if slice_tiles and len(times) > 3 and len(times) >= max(slice_tiles) + 1:  # as dcm2niix: more than 3,
        first = min(0.0, min(times))  # negative times shifted to start at 0
        out["SliceTiming"] = tuple(_round((times[t] - first) * 1e-3) for t in slice_tiles)
    return out


def _groups(groups: FunctionalGroups | None, frame: int) -> list[Group]:
    """An enhanced file's functional groups for `frame`: its per-frame item, then the shared one (none for a file
    without them)."""
    if groups is None:
        return []
    out = [groups.per_frame[frame]] if frame < len(groups.per_frame) else []
    return out if groups.shared is None else [*out, groups.shared]


def _value(ds: Dataset, groups: Iterable[Group], keyword: str, group: str) -> MetaValue | None:
    """`keyword`'s value at the top level, else inside `group` of the frame's functional groups."""
    found = _plain(ds.get(keyword))
    if found is None and group:
        from pydicom.datadict import tag_for_keyword

        group_tag, tag = tag_for_keyword(group), tag_for_keyword(keyword)
        if group_tag is None or tag is None:
            raise ValueError(f"{group}, {keyword}: not DICOM dictionary keywords")
        for g in groups:
            item = g.first(group_tag)
            if item is not None:
                found = _plain(item.get(tag))
                if found is not None:
                    break
    return found


def _plain(value: Any) -> MetaValue | None:
    """A DICOM value as JSON writes it: numbers, text, or a tuple of them; None for empty, binary or nested."""
    if value is None or value == "":
        return None
    if type(value).__name__ == "MultiValue" or isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        flat = tuple(v for v in items if isinstance(v, int | float | str))
        return flat or None
    from pydicom.dataset import Dataset

    if isinstance(value, bytes | bytearray) or isinstance(value, Dataset) or type(value).__name__ == "Sequence":
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) or type(value).__name__ in ("DSfloat", "IS", "DSdecimal"):
        f = float(value)
        if not math.isfinite(f):
            return None
        return int(f) if type(value).__name__ == "IS" else _round(f)
    text = str(value).strip()
    return text or None


def _number(value: Any) -> float | None:
    plain = _plain(value)
    return float(plain) if isinstance(plain, int | float) else None


def _scaled(value: MetaValue, scale: float) -> MetaValue:
    if scale == 1.0 or not isinstance(value, int | float):
        return value
    return _round(float(value) * scale)


def _round(v: float) -> float:
    """Ten significant digits: what the header said, without float noise from unit conversion."""
    return float(f"{v:.10g}")
