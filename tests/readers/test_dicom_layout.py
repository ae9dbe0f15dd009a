"""The pure DICOM series layout: sorting, duplicates, 4D, geometry checks, affine and dtype, on header records."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from labzarr.readers import Reason, Rejected, SeriesRules
from labzarr.readers.dicom import Defect, DicomHeader, Frame, Member, layout_series, output_dtype

STEP = 2.5


def header(k: int, *, z: float | None = None, y: float = 0.0, orientation: tuple[float, ...] = (1, 0, 0, 0, 1, 0),
           spacing: tuple[float, float] = (0.5, 0.7), pixels: str | None = None, sop: str | None = None,
           order: tuple[float, ...] | None = None, slope: float = 1.0, intercept: float = 0.0, **kw: object
           ) -> DicomHeader:
    frame = Frame(0, (10.0, y, STEP * k if z is None else z), orientation, spacing, slope, intercept, None,  # type: ignore[arg-type]
                  order if order is not None else (0.0, 1.0, float(k + 1), 0.0))
    fields: dict[str, object] = dict(
        sop_class="1.2.840.10008.5.1.4.1.1.2", sop_class_name="CT Image Storage", modality="CT", study_uid="1.2",
        series_uid="1.2.3", series_number=3, instance_number=k + 1, sop_instance=sop or f"1.2.3.{k}",
        transfer_syntax="1.2.840.10008.1.2.1", rows=16, columns=16, samples=1, bits_allocated=16, bits_stored=12,
        signed=False, photometric="MONOCHROME2", frames=(frame,), pixel_hash=pixels or f"pixels-{k}")
    fields.update(kw)
    return DicomHeader(**fields)  # type: ignore[arg-type]


def member(k: int, name: str | None = None, **kw: object) -> Member:
    kw.setdefault("sop", f"1.2.3.{name or k}")  # each file its own SOP instance unless a test says otherwise
    return Member(f"/raw/{name or k}.dcm", f"s/{name or f'{k:03d}'}.dcm", header(k, **kw))


def series(n: int = 6, **kw: object) -> list[Member]:
    return [member(k, **kw) for k in range(n)]


def gap() -> list[Member]:
    return [m for m in series(7) if m.header.instance_number != 4]


def uneven() -> list[Member]:
    return [member(k, z=STEP * k + (0.9 if k >= 3 else 0.0)) for k in range(6)]


def drift() -> list[Member]:
    return [*series(5), member(5, orientation=(1, 0, 0.01, 0, 1, 0))]


def tilted() -> list[Member]:
    return [member(k, y=STEP * k * math.tan(math.radians(12))) for k in range(6)]


def short() -> list[Member]:
    return series(3)


def different_duplicate() -> list[Member]:
    return [*series(6), member(2, "extra", pixels="other pixels")]


def volume_missing_slice() -> list[Member]:
    first = series(6)
    second = [member(k, f"t2-{k}", pixels=f"t2-{k}", order=(0.0, 2.0, float(k + 7), 0.0)) for k in range(6)]
    return first + second[:-1]


def flat_and_spatial() -> list[Member]:
    flat = replace(header(9), frames=(Frame(0, None, None, None),))
    return [*series(5), Member("/raw/x.dcm", "s/x.dcm", flat)]


def truncated_member() -> list[Member]:
    bad = replace(header(2), defect=Defect(Reason.TRUNCATED, "pixel data ends after 10 of 512 B"))
    return [m if k != 2 else Member(m.path, m.source, bad) for k, m in enumerate(series(6))]


def spacing_varies() -> list[Member]:
    return [*series(5), member(5, spacing=(0.6, 0.7))]


def format_varies() -> list[Member]:
    return [*series(5), Member("/raw/5.dcm", "s/5.dcm", replace(header(5), rows=32))]


BAD = [
    pytest.param(gap, Reason.SERIES_MISSING_SLICES, r"gap 5 mm .* expected 2\.5 .* 1 slice\(s\) missing", id="gap"),
    pytest.param(uneven, Reason.SERIES_INCONSISTENT_GEOMETRY, r"non-uniform spacing: step 3\.4 mm", id="uneven"),
    pytest.param(drift, Reason.SERIES_INCONSISTENT_GEOMETRY, r"orientation drifts by 0\.01 .* s/005\.dcm", id="drift"),
    pytest.param(tilted, Reason.SERIES_INCONSISTENT_GEOMETRY, r"gantry tilt 12\.00°", id="gantry-tilt"),
    pytest.param(short, Reason.SERIES_TOO_SHORT, r"3 slice position\(s\), fewer than \[dicom\] min_slices = 4",
                 id="too-short"),
    pytest.param(different_duplicate, Reason.MIXED_SERIES, r"holds 2 different images", id="duplicate-other-pixels"),
    pytest.param(volume_missing_slice, Reason.SERIES_MISSING_SLICES, r"has 1 of 2 images", id="4d-slice-missing"),
    pytest.param(flat_and_spatial, Reason.MIXED_SERIES, r"no patient position", id="geometry-and-none"),
    pytest.param(truncated_member, Reason.TRUNCATED, r"member s/002\.dcm: pixel data ends", id="truncated-member"),
    pytest.param(spacing_varies, Reason.SERIES_INCONSISTENT_GEOMETRY, r"PixelSpacing varies", id="pixel-spacing"),
    pytest.param(format_varies, Reason.MIXED_SERIES, r"differ in image format", id="matrix-size"),
]


@pytest.mark.parametrize(("build", "reason", "detail"), BAD)
def test_unsound_series_rejected_with_measured_detail(build: Callable[[], list[Member]], reason: Reason,
                                                      detail: str) -> None:
    with pytest.raises(Rejected) as info:
        layout_series(build(), SeriesRules())
    assert info.value.reason is reason
    assert info.value.detail and __import__("re").search(detail, info.value.detail), info.value.detail


def test_sorted_by_position_not_by_name_or_instance() -> None:
    members = [member(k, name=f"{(7 * k) % 6}") for k in range(6)]  # names and instance numbers shuffled
    members = [replace(m, header=replace(m.header, instance_number=10 - i)) for i, m in enumerate(members)]
    stack = layout_series(list(reversed(members)), SeriesRules())
    depths = [next(m for m in members if m.path == f.path).header.frames[0].position[2] for f in stack.frames]  # type: ignore[index]
    assert depths == sorted(depths)
    assert (stack.n_slices, stack.n_volumes, stack.layout) == (6, 1, "volume")


def test_affine_lps_to_ras_from_orientation_spacing_and_positions() -> None:
    stack = layout_series(series(6), SeriesRules())
    # rows along +x (L in LPS -> -x in RAS) with column spacing 0.7, columns along +y (P -> -y) with row spacing 0.5
    np.testing.assert_allclose(np.array(stack.affine), [[-0.7, 0, 0, -10], [0, -0.5, 0, 0], [0, 0, STEP, 0],
                                                        [0, 0, 0, 1]], atol=1e-9)


def test_identical_duplicate_removed_with_warning() -> None:
    copy = member(2, "copy", pixels="pixels-2", sop="9.9.9")  # a re-sent slice: new UID, same pixels and numbers
    stack = layout_series([*series(6), copy], SeriesRules())
    assert stack.n_slices == 6 and len(stack.frames) == 6
    assert any("duplicate slices with identical pixels removed (1): s/copy.dcm = s/002.dcm" in w
               for w in stack.warnings)


def test_same_sop_instance_twice_keeps_the_intact_copy() -> None:
    cut = replace(header(2), defect=Defect(Reason.TRUNCATED, "cut"))
    members = [*series(6), Member("/raw/a-copy.dcm", "s/002-copy.dcm", cut)]
    stack = layout_series(members, SeriesRules())
    assert "/raw/a-copy.dcm" not in {f.path for f in stack.frames}
    assert any("s/002-copy.dcm = s/002.dcm (truncated)" in w for w in stack.warnings)


def test_four_d_volumes_in_acquisition_order() -> None:
    first = [member(k, f"a{k}", order=(0.0, 2.0, float(k), 0.0)) for k in range(5)]
    second = [member(k, f"b{k}", pixels=f"b{k}", order=(0.0, 1.0, float(k), 0.0)) for k in range(5)]
    stack = layout_series(first + second, SeriesRules())
    assert (stack.n_slices, stack.n_volumes) == (5, 2)
    assert [f.path for f in stack.frames[:5]] == [f"/raw/b{k}.dcm" for k in range(5)]  # acquisition 1 first
    assert [f.path for f in stack.frames[5:]] == [f"/raw/a{k}.dcm" for k in range(5)]


def test_identical_volumes_are_kept_as_time_points() -> None:
    # nibabel's two DWI mosaics hold identical (blank) pixels at every position but are two acquisitions
    first = series(5, pixels="same")
    second = [member(k, f"t{k}", pixels="same", order=(0.0, 2.0, float(k), 0.0)) for k in range(5)]
    assert layout_series(first + second, SeriesRules()).n_volumes == 2


def test_gantry_tilt_shear_policy_keeps_exact_positions() -> None:
    stack = layout_series(tilted(), SeriesRules(gantry_tilt="shear"))
    affine = np.array(stack.affine)
    np.testing.assert_allclose(affine[:3, 2], [0, -STEP * math.tan(math.radians(12)), STEP], atol=1e-9)
    assert any("gantry tilt 12.00°" in w for w in stack.warnings)


def test_rounding_noise_is_not_a_tilt() -> None:
    stack = layout_series([member(k, y=0.001 * (-1) ** k) for k in range(6)], SeriesRules())
    assert not stack.warnings
    np.testing.assert_allclose(np.array(stack.affine)[:3, 2], [0, 0, STEP], atol=1e-12)


def test_tolerances_come_from_the_rules() -> None:
    assert layout_series(short(), SeriesRules(min_slices=3)).n_slices == 3
    with pytest.raises(Rejected):
        layout_series(uneven(), SeriesRules())
    assert layout_series(uneven(), SeriesRules(spacing_tolerance_mm=1.0)).n_slices == 6


def test_missing_slice_is_caught_even_with_loose_tolerances() -> None:
    # tolerance is capped at half a step: one missing slice can never pass as uneven spacing
    with pytest.raises(Rejected) as info:
        layout_series(gap(), SeriesRules(spacing_tolerance_mm=5.0, spacing_tolerance_rel=0.4))
    assert info.value.reason is Reason.SERIES_MISSING_SLICES


def test_image_without_geometry_is_a_2d_item() -> None:
    cr = replace(header(0), modality="CR", frames=(Frame(0, None, None, None, 0.5, 100.0),), spacing_2d=(0.1, 0.2),
                 photometric="MONOCHROME1")
    stack = layout_series([Member("/raw/cr.dcm", "cr.dcm", cr)], SeriesRules())
    assert (stack.layout, stack.spacing, stack.dtype) == ("image", (0.1, 0.2), "float32")
    assert any("MONOCHROME1" in w for w in stack.warnings)


DTYPES = [
    pytest.param({}, [(1.0, 0.0)], "uint16", id="unscaled-unsigned-keeps-stored-type"),
    pytest.param({"signed": True}, [(1.0, 0.0)], "int16", id="unscaled-signed"),
    pytest.param({"bits_allocated": 8, "bits_stored": 8}, [(1.0, 0.0)], "uint8", id="unscaled-8bit"),
    pytest.param({}, [(1.0, -1024.0)], "int16", id="ct-12bit-integer-rescale"),
    pytest.param({"signed": True, "bits_stored": 16}, [(1.0, -1024.0)], "int32", id="ct-16bit-overflows-int16"),
    pytest.param({"bits_stored": 16}, [(2.0, -1024.0)], "int32", id="slope-2-of-uint16-fits-int32"),
    pytest.param({"signed": True, "bits_allocated": 32, "bits_stored": 32}, [(1.0, 1.0)], "float32",
                 id="int32-plus-1-overflows-int32"),
    pytest.param({}, [(1.0, 0.0), (2.0, 0.0)], "int16", id="per-slice-integer-slopes"),
    pytest.param({}, [(0.5, 0.0)], "float32", id="fractional-slope"),
    pytest.param({"float_pixels": True, "bits_allocated": 32}, [(1.0, 0.0)], "float32", id="float-pixel-data"),
]


@pytest.mark.parametrize(("fields", "rescale", "dtype"), DTYPES)
def test_output_dtype_rule(fields: dict[str, object], rescale: list[tuple[float, float]], dtype: str) -> None:
    h = replace(header(0), **fields)  # type: ignore[arg-type]
    frames = [Frame(0, None, None, None, slope, intercept) for slope, intercept in rescale]
    assert output_dtype(h, frames) == dtype
