"""Laying out one DICOM series: which frame goes to which voxel, the geometry, and the output dtype.

Pure: a function of frozen headers and rules, no I/O, so planning can call it
on the driver and tests can call it without files. Invariant: a `SeriesStack`
that exists is geometrically sound under its `SeriesRules` (one orientation,
uniform spacing, every position present in every volume); anything else
raises `Rejected` with the measured value and the tolerance in `detail`.

Conventions (as nibabel's DICOM orientation notes and dcm2niix): voxel index i
runs along a row (DICOM columns, direction cosines IOP[0:3], spacing
PixelSpacing[1]), j down a column (IOP[3:6], PixelSpacing[0]), k along the
slice normal in increasing position; the affine maps (i, j, k) to RAS mm.

Output dtype rule: when no frame is rescaled the stored integer type is kept
(uint8/int8/uint16/int16/uint32/int32, float for float pixel data); when every
RescaleSlope/Intercept is an integer, the narrowest of int16 and int32 that
holds the whole rescaled range BitsStored allows; otherwise float32. The range
is the header's, not the pixels': the dtype is planned before any pixel is
decoded, so a 16-bit signed CT with an intercept of -1024 is int32 (as wide as
float32, and exact) even when its values would fit int16.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from ._dicom_meta import Descriptors
from ._dicom_records import DicomHeader, Frame
from .reasons import Reason, Rejected
from .records import ByFields, Metadata

__all__ = ["Member", "SeriesRules", "SeriesStack", "StackFrame", "layout_series", "output_dtype"]

_SAME_POSITION_MM = 0.01  # two frames closer than this along the normal are one slice position


@dataclass(frozen=True, slots=True)
class SeriesRules:
    """Tolerances a series must meet; the spec's `[dicom]` section sets them (defaults and their origin there)."""

    min_slices: int = 4
    spacing_tolerance_mm: float = 0.1
    spacing_tolerance_rel: float = 0.05
    orientation_tolerance: float = 1e-3
    gantry_tilt: Literal["shear", "reject"] = "reject"
    # Philips frames with a private scale slope: "float" (dcm2niix's default, -p y) stores the precise values,
    # (stored x RS + RI) / (RS x SS); "display" (dcm2niix -p n) the public rescale's, stored x RS + RI.
    philips_scaling: Literal["float", "display"] = "float"
    # Trace, ADC and other derived volumes of a series (convert/plan/series.py recognises them, as dcm2niix):
    # "separate" makes them their own item, "drop" leaves them out; a warning says which either way.
    derived: Literal["separate", "drop"] = "separate"
    # DICOM keywords read into an item's metadata besides the allow-list (readers/_dicom_meta.py): opt-in.
    metadata: tuple[str, ...] = ()
    # The allow-list's free-text SeriesDescription and ProtocolName: read into the metadata, or left in the files.
    descriptors: Descriptors = "drop"


@dataclass(frozen=True, slots=True)
class Member(ByFields):
    """One file of a series: where to read it, how to name it in a detail, and its header."""

    path: str
    source: str
    header: DicomHeader


@dataclass(frozen=True, slots=True)
class StackFrame(ByFields):
    """One decoded 2D image's place in the output: file, frame (or mosaic tile) and its rescale."""

    path: str
    source: str
    frame: int
    slope: float
    intercept: float
    gzipped: bool = False
    # Native pixel data read as stored: where the frame's values start in the file (-1: pydicom decodes the file's
    # element), their dtype with byte order, and the unused high bits (BitsAllocated - BitsStored) to clear.
    offset: int = -1  # in a mosaic stack: where the file's whole mosaic starts, this frame a tile of it
    stored: str = ""
    unused_bits: int = 0
    # The frame's SOPInstanceUID and ImagePositionPatient (LPS mm): what a SEG's or RTSTRUCT's references and
    # positions are checked against when it is placed on this series' grid (readers/dicom_seg.py, rtstruct.py).
    instance: str = ""
    position: tuple[float, float, float] | None = None


@dataclass(frozen=True, slots=True)
class SeriesStack(ByFields):
    """How to assemble a series: `frames[c * n_slices + k]` is slice k of volume c.

    `layout` "volume": (i, j, k) voxels with `affine` to RAS mm; "image": one 2D
    frame without patient geometry, stored (C, H, W) with `spacing` (row, column).
    """

    layout: Literal["volume", "image"]
    frames: tuple[StackFrame, ...]
    n_slices: int
    n_volumes: int
    rows: int
    columns: int
    samples: int
    photometric: str
    dtype: str
    affine: tuple[tuple[float, ...], ...]
    spacing: tuple[float, ...]
    mosaic: int | None = None
    warnings: tuple[str, ...] = ()
    # What the stored values mean, for the array's attributes, under dcm2niix's sidecar names
    # (`UsePhilipsFloatNotDisplayScaling`, `PhilipsRescaleSlope`, ...): sorted (key, value) pairs.
    metadata: Metadata = ()
    # What the acquisition metadata is read from (readers/_dicom_meta.py, when decoding): the item's image
    # type and echo time (ms; an enhanced part's own), per volume its b-value and gradient (LPS), and the
    # user's opt-in keywords.
    image_type: tuple[str, ...] = ()
    echo_time_ms: float | None = None
    bvalues: tuple[float | None, ...] = ()
    gradients: tuple[tuple[float, float, float] | None, ...] = ()
    extra_metadata: tuple[str, ...] = ()
    descriptors: Descriptors = "drop"

    @property
    def nbytes(self) -> int:
        """Decoded size in bytes."""
        return self.rows * self.columns * self.samples * len(self.frames) * np.dtype(self.dtype).itemsize


def layout_series(members: Sequence[Member], rules: SeriesRules) -> SeriesStack:
    """Sort, check and lay out the frames of `members` (one series part); raise `Rejected` when unsound."""
    if not members:
        raise ValueError("a series needs at least one member")
    scale, scaling = _scaling(members, rules)
    members, copies = _drop_copies(members)
    _check_uniform(members)
    for m in sorted(members, key=lambda m: m.source):
        if m.header.defect is not None:
            others = sum(1 for o in members if o.header.defect is not None) - 1
            more = f" (and {others} other member(s))" if others else ""
            raise Rejected(m.header.defect.reason, f"member {m.source}: {m.header.defect.detail}{more}")
    spatial = [m.header.spatial for m in members]
    if any(spatial) and not all(spatial):
        flat = sorted(m.source for m in members if not m.header.spatial)
        raise Rejected(Reason.MIXED_SERIES, f"{len(flat)} of {len(members)} members have no patient position/"
                                            f"orientation (e.g. {flat[0]}); cannot stack them with the others")
    stack = _flat(members, scale) if not all(spatial) else _volume(members, rules, scale)
    ref = min(members, key=lambda m: m.source)
    first = ref.header.frames[0]
    return replace(stack, warnings=copies + stack.warnings, metadata=scaling, image_type=first.image_type,
                   echo_time_ms=first.echo if ref.header.enhanced else None, extra_metadata=rules.metadata,
                   descriptors=rules.descriptors)


_Scale = Callable[[Frame], tuple[float, float]]  # a frame's (slope, intercept) as its voxels are stored


def _scaling(members: Sequence[Member], rules: SeriesRules) -> tuple[_Scale, Metadata]:
    """The rescale of each frame that `rules.philips_scaling` asks for, and what it was.

    Precise values are (stored x RS + RI) / (RS x SS), with the slope and intercept dcm2niix writes for them
    (`_precise_scale`), frame by frame. dcm2niix itself falls back to display values when the scale varies
    between the frames of an enhanced file; here every frame keeps its own precise scale. Applied where a frame
    becomes a `StackFrame`, rather than to copies of the members' headers: three `dataclasses.replace` a file were
    a quarter of planning a Philips series.
    """
    first = next((f for m in members for f in m.header.frames if f.scale_slope), None)
    if first is None:
        return _stored, ()
    assert first.scale_slope is not None
    use_float = rules.philips_scaling == "float"
    info: Metadata = (
        ("PhilipsRescaleIntercept", first.intercept), ("PhilipsRescaleSlope", first.slope),
        ("PhilipsScaleSlope", first.scale_slope), ("UsePhilipsFloatNotDisplayScaling", int(use_float)))
    return (_precise if use_float else _stored), info


def _stored(frame: Frame) -> tuple[float, float]:
    return frame.slope, frame.intercept


def _precise(frame: Frame) -> tuple[float, float]:
    if not frame.scale_slope:
        return frame.slope, frame.intercept
    return _precise_scale(frame.slope, frame.intercept, frame.scale_slope)


def _precise_scale(rs: float, ri: float, ss: float) -> tuple[float, float]:
    """The slope and intercept of Philips' precise values, as dcm2niix's PhilipsPrecise computes them.

    dcm2niix evaluates the precise value P(v) = (v x RS + RI) / (RS x SS) at v = 0 and v = 1 in single
    precision and writes scl_inter = P(0), scl_slope = P(1) - P(0). When RI / (RS x SS) is large, that
    difference keeps only the bits float32 has left near P(0): a fieldmap in Hz with RS = 0.2442, RI = -500
    gets a slope 5.8e-6 (relative) off 1 / SS, and every voxel then differs from the exact precise value by up
    to stored x that error. labzarr writes dcm2niix's values, so a store equals dcm2niix's NIfTI; when the two
    conventions agree to float32 epsilon, or P(0) = P(1), dcm2niix keeps the display scale and so does this.
    """
    f32 = np.float32
    rs32, ri32, ss32 = f32(rs), f32(ri), f32(ss)
    denominator = rs32 * ss32
    if denominator == 0:
        return rs, ri
    p0 = ri32 / denominator
    p1 = (rs32 + ri32) / denominator
    if p0 == p1:
        return rs, ri
    slope, intercept = p1 - p0, p0
    epsilon = np.finfo(np.float32).eps
    if abs(f32(ri) - intercept) <= epsilon and abs(f32(rs) - slope) <= epsilon:
        return rs, ri
    return float(slope), float(intercept)


def _drop_copies(members: Sequence[Member]) -> tuple[list[Member], tuple[str, ...]]:
    """Files holding the same SOP instance are one image sent twice: keep the first intact copy (by name)."""
    by_uid: dict[str, list[Member]] = {}
    kept: list[Member] = []
    for m in sorted(members, key=lambda m: m.source):
        if m.header.sop_instance:
            by_uid.setdefault(m.header.sop_instance, []).append(m)
        else:
            kept.append(m)
    dropped = []
    for copies in by_uid.values():
        keep = next((m for m in copies if m.header.defect is None), copies[0])
        kept.append(keep)
        dropped += [f"{m.source} = {keep.source}" + (f" ({m.header.defect.reason.value})" if m.header.defect else "")
                    for m in copies if m is not keep]
    if not dropped:
        return list(members), ()
    return sorted(kept, key=lambda m: m.source), (
        f"{len(dropped)} file(s) repeating a SOP instance dropped: " + ", ".join(dropped[:5])
        + (", ..." if len(dropped) > 5 else ""),)


def _check_uniform(members: Sequence[Member]) -> None:
    keys = Counter((m.header.rows, m.header.columns, m.header.samples, m.header.bits_allocated,
                    m.header.photometric, m.header.mosaic) for m in members)
    if len(keys) > 1:
        (common, n), (other, k) = keys.most_common(2)
        raise Rejected(Reason.MIXED_SERIES, f"members differ in image format: {n} are {_fmt_key(common)}, {k} are "
                                            f"{_fmt_key(other)}")


def _fmt_key(key: tuple[object, ...]) -> str:
    rows, cols, samples, bits, photometric, mosaic = key
    return f"{rows}x{cols}x{samples} {bits}-bit {photometric}" + (f" mosaic {mosaic}x{mosaic}" if mosaic else "")


def _flat(members: Sequence[Member], scale: _Scale) -> SeriesStack:
    """Images without patient geometry: one 2D image, or one file's frames stacked as dcm2niix does."""
    if len(members) > 1:
        raise Rejected(Reason.MIXED_SERIES, f"{len(members)} files without patient geometry cannot be ordered "
                                            f"into one volume")
    m = members[0]
    h = m.header
    frames = tuple(StackFrame(m.path, m.source, f.index, slope, intercept, h.gzipped, *_native(h, f.index))
                   for f in h.frames for slope, intercept in (scale(f),))
    dtype = output_dtype(h, frames)
    row_mm, col_mm = h.spacing_2d or (1.0, 1.0)
    rows, columns, samples = _image_shape(h)
    if len(frames) == 1:
        return SeriesStack("image", frames, 1, 1, rows, columns, samples, h.photometric, dtype,
                           affine=((row_mm, 0.0, 0.0), (0.0, col_mm, 0.0), (0.0, 0.0, 1.0)),
                           spacing=(row_mm, col_mm), warnings=_photometric_warnings(h))
    # Frames of a cine loop or a multi-frame secondary capture: stacked along k with unit spacing and an identity
    # (LPS) orientation, which is what dcm2niix writes for them.
    affine = _lps_to_ras(np.array([[col_mm, 0, 0, 0], [0, row_mm, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1]]))
    return SeriesStack("volume", frames, len(frames), 1, rows, columns, samples, h.photometric, dtype,
                       affine=_tuple(affine), spacing=(col_mm, row_mm, 1.0),
                       warnings=("no patient geometry: frames stacked along z at 1 mm, identity orientation "
                                 "(as dcm2niix)", *_photometric_warnings(h)))


def _native(h: DicomHeader, frame: int) -> tuple[int, str, int]:
    """(offset, stored dtype, unused bits) of frame `frame` of `h`'s file when its values can be read as stored
    (a mosaic's tiles: its one stored frame's, which each is cut from); offset -1 when pydicom must decode them."""
    if h.native_at < 0:
        return -1, "", 0
    unused = 0 if h.float_pixels else max(0, h.bits_allocated - (h.bits_stored or h.bits_allocated))
    return h.native_at + (0 if h.mosaic else frame) * h.frame_nbytes, h.stored_dtype, unused


def _image_shape(h: DicomHeader) -> tuple[int, int, int]:
    """(rows, columns, samples) of one decoded frame: a mosaic's tile, a palette image's RGB."""
    rows, columns = (h.rows // h.mosaic, h.columns // h.mosaic) if h.mosaic else (h.rows, h.columns)
    return rows, columns, 3 if h.photometric == "PALETTE COLOR" else h.samples


def _photometric_warnings(h: DicomHeader) -> tuple[str, ...]:
    if h.photometric == "MONOCHROME1":
        return ("MONOCHROME1: higher values are darker; values kept as stored, not inverted (as dcm2niix)",)
    return ()


@dataclass(frozen=True, slots=True)
class _Slot:
    member: Member
    frame: Frame
    depth: float  # position projected on the slice normal
    slope: float  # the frame's rescale, as stored (`_scaling`)
    intercept: float


def _volume(members: Sequence[Member], rules: SeriesRules, scale: _Scale) -> SeriesStack:
    first = min(members, key=lambda m: m.source)
    ref = first.header.frames[0]
    assert ref.orientation is not None and ref.position is not None
    _check_orientation(members, ref.orientation, rules)
    spacing_rc = _check_pixel_spacing(members)
    row_dir = np.array(ref.orientation[:3], dtype=np.float64)
    col_dir = np.array(ref.orientation[3:], dtype=np.float64)
    normal = np.cross(row_dir, col_dir)
    normal /= np.linalg.norm(normal)
    placed = [(m, f) for m in members for f in m.header.frames]
    depths_of = np.array([f.position for _, f in placed], dtype=np.float64) @ normal  # one product, not one a frame
    slots = [_Slot(m, f, float(d), *scale(f)) for (m, f), d in zip(placed, depths_of, strict=True)]
    positions, warnings = _group_positions(slots)
    n_volumes = _count_volumes(positions)
    n = len(positions)
    if n < rules.min_slices:
        raise Rejected(Reason.SERIES_TOO_SHORT, f"{n} slice position(s), fewer than [dicom] min_slices = "
                                                f"{rules.min_slices}"
                                                + (f" ({n_volumes} volumes)" if n_volumes > 1 else ""))
    depths = np.array([p[0].depth for p in positions])
    step_mm = _check_spacing(depths, rules) if n > 1 else 0.0
    origin = np.array(positions[0][0].frame.position, dtype=np.float64)
    if n > 1:
        span = np.array(positions[-1][0].frame.position, dtype=np.float64) - origin
        step, tilt_warnings = _slice_step(span, normal, n, rules)
        warnings += tilt_warnings
    else:
        step = normal * (first.header.thickness or 1.0)  # one slice: its thickness, as dcm2niix and dicom2nifti
    row_mm, col_mm = spacing_rc
    lps = np.eye(4)
    lps[:3, 0] = row_dir * col_mm
    lps[:3, 1] = col_dir * row_mm
    lps[:3, 2] = step
    lps[:3, 3] = origin
    affine = _lps_to_ras(lps)
    frames = tuple(StackFrame(s.member.path, s.member.source, s.frame.index, s.slope, s.intercept,
                              s.member.header.gzipped, *_native(s.member.header, s.frame.index),
                              instance=s.member.header.sop_instance, position=s.frame.position)
                   for c in range(n_volumes) for s in (pos[c] for pos in positions))
    all_slots = [s for pos in positions for s in pos]
    h = first.header
    spacing = (col_mm, row_mm, float(np.linalg.norm(step)) if n > 1 else step_mm or 1.0)
    rows, columns, samples = _image_shape(h)
    firsts = [positions[0][c].frame for c in range(n_volumes)]  # each volume's first slice: its diffusion
    return SeriesStack("volume", frames, n, n_volumes, rows, columns, samples, h.photometric,
                       output_dtype(h, all_slots), affine=_tuple(affine), spacing=spacing, mosaic=h.mosaic,
                       warnings=tuple(warnings) + _photometric_warnings(h),
                       bvalues=tuple(f.bvalue for f in firsts), gradients=tuple(f.gradient for f in firsts))


def _check_orientation(members: Sequence[Member], ref: Sequence[float], rules: SeriesRules) -> None:
    worst, where = 0.0, ""
    for m in members:
        for f in m.header.frames:
            assert f.orientation is not None
            d = max(abs(a - b) for a, b in zip(f.orientation, ref))
            if d > worst:
                worst, where = d, f"{m.source}" + (f" frame {f.index}" if len(m.header.frames) > 1 else "")
    if worst > rules.orientation_tolerance:
        raise Rejected(Reason.SERIES_INCONSISTENT_GEOMETRY,
                       f"orientation drifts by {worst:.4g} (direction cosine) at {where}, tolerance "
                       f"{rules.orientation_tolerance:g} ([dicom] orientation_tolerance)")


def _check_pixel_spacing(members: Sequence[Member]) -> tuple[float, float]:
    seen = Counter(f.spacing for m in members for f in m.header.frames)
    if None in seen:
        src = next(m.source for m in members if any(f.spacing is None for f in m.header.frames))
        raise Rejected(Reason.BAD_HEADER, f"{src}: PixelSpacing missing on a slice with patient geometry")
    if len(seen) > 1:
        (a, n), (b, k) = seen.most_common(2)
        assert a is not None and b is not None
        if max(abs(x - y) for x, y in zip(a, b)) > 1e-3:
            raise Rejected(Reason.SERIES_INCONSISTENT_GEOMETRY, f"PixelSpacing varies: {n} slices {a[0]:g}x{a[1]:g} "
                                                                f"mm, {k} slices {b[0]:g}x{b[1]:g} mm")
    spacing = next(iter(seen))
    assert spacing is not None
    return spacing


def _group_positions(slots: list[_Slot]) -> tuple[list[list[_Slot]], list[str]]:
    """Slots grouped by slice position (sorted along the normal), each group in acquisition order.

    A duplicate is an image with the same pixels at the same position as another, and either the same
    acquisition keys too (a re-sent file) or at a position holding more images than the series' usual
    count (an extra copy of one slice). Identical pixels at every position with different acquisition
    keys are kept: a 4D series may repeat a volume (or hold blank ones, like nibabel's DWI test files).
    """
    slots = sorted(slots, key=lambda s: (s.depth, s.frame.order, s.member.source, s.frame.index))
    groups: list[list[_Slot]] = []
    for s in slots:
        if groups and abs(s.depth - groups[-1][0].depth) <= _SAME_POSITION_MM:
            groups[-1].append(s)
        else:
            groups.append([s])
    dropped: list[str] = []

    def dedupe(group: list[_Slot], with_order: bool) -> list[_Slot]:
        kept: dict[tuple[object, ...], _Slot] = {}
        for s in group:
            key: tuple[object, ...] = (s.member.header.pixel_hash, s.frame.index)
            if with_order:
                key += (s.frame.order,)
            if key in kept:
                dropped.append(f"{s.member.source} = {kept[key].member.source}")
            else:
                kept[key] = s
        return list(kept.values())

    groups = [dedupe(g, with_order=True) for g in groups]
    usual = _usual_count(groups)
    groups = [dedupe(g, with_order=False) if len(g) > usual else g for g in groups]
    warnings = []
    if dropped:
        warnings.append(f"duplicate slices with identical pixels removed ({len(dropped)}): "
                        + ", ".join(dropped[:5]) + (", ..." if len(dropped) > 5 else ""))
    return groups, warnings


def _usual_count(groups: list[list[_Slot]]) -> int:
    """The number of images most positions hold (ties go to the larger): the series' volume count."""
    counts = Counter(len(g) for g in groups)
    return max(counts, key=lambda c: (counts[c], c))


def _count_volumes(positions: list[list[_Slot]]) -> int:
    """The number of time points / directions; every position must hold exactly that many distinct images."""
    expected = _usual_count(positions)
    for i, p in enumerate(positions):
        if len(p) > expected:
            names = ", ".join(s.member.source for s in p[:4])
            raise Rejected(Reason.MIXED_SERIES,
                           f"slice position {i} ({p[0].depth:.2f} mm along the normal) holds {len(p)} different "
                           f"images ({names}), the others {expected}; duplicates with different pixels")
    short = [(i, p) for i, p in enumerate(positions) if len(p) < expected]
    if short:
        i, p = short[0]
        raise Rejected(Reason.SERIES_MISSING_SLICES,
                       f"slice position {i} ({p[0].depth:.2f} mm along the normal) has {len(p)} of {expected} "
                       f"images (volumes); {len(short)} position(s) incomplete")
    for p in positions:
        orders = [s.frame.order for s in p]
        if len(set(orders)) < len(orders):
            names = ", ".join(s.member.source for s in p[:4])
            raise Rejected(Reason.MIXED_SERIES, f"images at {p[0].depth:.2f} mm ({names}) differ in pixels but not "
                                                f"in time/acquisition/instance number; cannot order them")
    return expected


def _check_spacing(depths: npt.NDArray[np.float64], rules: SeriesRules) -> float:
    steps = np.diff(depths)
    expected = float(np.median(steps))
    # dicom2nifti's allclose(atol, rtol), capped at half a step so that one missing slice is always caught.
    tol = min(rules.spacing_tolerance_mm + rules.spacing_tolerance_rel * expected, expected / 2)
    for k, step in enumerate(steps):
        if abs(step - expected) <= tol:
            continue
        ratio = step / expected
        where = f"between slice {k} and {k + 1} ({depths[k]:.2f} -> {depths[k + 1]:.2f} mm along the normal)"
        if round(ratio) >= 2 and abs(step - round(ratio) * expected) <= tol * round(ratio):
            raise Rejected(Reason.SERIES_MISSING_SLICES,
                           f"gap {step:.3g} mm {where}, expected {expected:.3g} ± {tol:.2g} mm: "
                           f"{round(ratio) - 1} slice(s) missing")
        raise Rejected(Reason.SERIES_INCONSISTENT_GEOMETRY,
                       f"non-uniform spacing: step {step:.3g} mm {where}, expected {expected:.3g} ± {tol:.2g} mm")
    return expected


def _slice_step(span: npt.NDArray[np.float64], normal: npt.NDArray[np.float64], n: int, rules: SeriesRules
                ) -> tuple[npt.NDArray[np.float64], list[str]]:
    """The slice-to-slice vector. Along the normal, unless the slices shift sideways (a tilted CT gantry)."""
    along = float(np.dot(span, normal))
    sideways = float(np.linalg.norm(span - along * normal))
    # Sideways drift from rounded positions does not add up over the stack; a tilt does. Below the spacing
    # tolerance over the whole stack the slices are taken as stacked along their normal (as dcm2niix does).
    if sideways <= rules.spacing_tolerance_mm:
        return normal * along / (n - 1), []
    tilt = math.degrees(math.atan2(sideways, abs(along)))
    what = f"gantry tilt {tilt:.2f}°: slices shift {sideways:.3g} mm sideways over {abs(along):.4g} mm of stack"
    if rules.gantry_tilt == "reject":
        raise Rejected(Reason.SERIES_INCONSISTENT_GEOMETRY,
                       f"{what}, more than {rules.spacing_tolerance_mm:g} mm ([dicom] gantry_tilt = \"reject\"; "
                       f"\"shear\" keeps it with a sheared affine)")
    return span / (n - 1), [f"{what}; the affine is sheared to the true slice positions (dcm2niix instead writes "
                            f"an orthogonal sform and a resampled _Tilt copy); resample before tools that need "
                            f"orthogonal axes"]


class Rescaled(Protocol):
    """What `output_dtype` reads of each frame: its rescale (a `Frame`'s, a `StackFrame`'s)."""

    @property
    def slope(self) -> float: ...

    @property
    def intercept(self) -> float: ...


def output_dtype(h: DicomHeader, frames: Sequence[Rescaled]) -> str:
    """The stored dtype under the module's rule (see the module docstring), for frames rescaled as `frames` are."""
    if h.float_pixels:
        return "float64" if h.bits_allocated == 64 else "float32"
    if h.photometric == "PALETTE COLOR":  # pydicom's apply_color_lut: RGB at the lookup table's depth
        return "uint8" if h.palette_bits == 8 else "uint16"
    rescaled = any(f.slope != 1.0 or f.intercept != 0.0 for f in frames)
    bits = h.bits_allocated if h.bits_allocated in (8, 16, 32) else (8 if h.bits_allocated == 1 else 16)
    if not rescaled:
        return f"{'' if h.signed else 'u'}int{bits}"
    if all(float(f.slope).is_integer() and float(f.intercept).is_integer() for f in frames):
        stored = min(h.bits_stored, h.bits_allocated) or h.bits_allocated
        lo, hi = (-(1 << (stored - 1)), (1 << (stored - 1)) - 1) if h.signed else (0, (1 << stored) - 1)
        ends = [v * f.slope + f.intercept for f in frames for v in (lo, hi)]
        for dtype in ("int16", "int32"):
            if np.iinfo(dtype).min <= min(ends) and max(ends) <= np.iinfo(dtype).max:
                return dtype
    return "float32"


def _lps_to_ras(lps: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps


def _tuple(a: npt.NDArray[np.float64]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in a)
