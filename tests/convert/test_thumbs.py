from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image

from labzarr.convert.qc.charts import bar_chart, top_values
from labzarr.convert.qc.explain import EXPLAIN
from labzarr.convert.qc.thumbs import image_thumbnail, thumbnail, volume_planes, volume_thumbnail, window
from labzarr.readers import Reason
from labzarr.store import ArrayReader, StoreReader


def _array(tmp_path: Path, data: np.ndarray) -> ArrayReader:
    """`data` stored as a zarr array, opened through the store layer's reader (as the report opens it)."""
    arr = zarr.create_array(tmp_path / "a.zarr", shape=data.shape, dtype=data.dtype,
                            chunks=(1, *(min(16, n) for n in data.shape[1:])))
    arr[...] = data
    reader = StoreReader(tmp_path / "a.zarr", backend="labzarr").array("")
    assert reader.path_used == "labzarr"
    return reader


def test_planes_are_radiological_with_anterior_and_superior_up(tmp_path: Path) -> None:
    vol = np.zeros((1, 20, 30, 40), np.int16)  # RAS: x grows to the patient's right, y anterior, z superior
    vol[0, 15:, :, :] += 1  # patient's right half
    vol[0, :, 20:, :] += 10  # anterior part
    vol[0, :, :, 30:] += 100  # superior part
    axial, coronal, sagittal = volume_planes(_array(tmp_path, vol))
    assert axial.shape == (30, 20) and coronal.shape == (40, 20) and sagittal.shape == (40, 30)
    # top-left of each view: the patient's right (or anterior, sagittal) and anterior (or superior); the
    # mid-slices lie in the inferior (axial), posterior (coronal) and left (sagittal) parts
    assert (axial[0, 0], axial[-1, -1]) == (1 + 10, 0)
    assert (coronal[0, 0], coronal[-1, -1]) == (1 + 100, 0)
    assert (sagittal[0, 0], sagittal[-1, -1]) == (10 + 100, 0)


def test_window_shares_one_range_and_blacks_out_non_finite() -> None:
    a = np.linspace(0, 1000, 100).reshape(10, 10)
    b = np.full((4, 4), np.nan)
    b[0, 0] = 500.0
    wa, wb = window([a, b])
    assert wa.dtype == np.uint8 and wa.min() == 0 and wa.max() == 255
    assert wb[0, 0] == pytest.approx(127, abs=2) and wb[1, 1] == 0
    (flat,) = window([np.full((3, 3), 7.0)])
    assert (flat == 127).all()  # constant image: mid grey, no division by zero


def test_volume_thumbnail_keeps_physical_proportions(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arr = _array(tmp_path, rng.normal(size=(2, 40, 40, 10)).astype(np.float32))  # 40 x 40 x 10 voxels of 1 x 1 x 4 mm
    img = volume_thumbnail(arr, (1.0, 1.0, 4.0), size=160)
    # every extent is 40 mm -> each view is 160 x 160 px, three side by side with 4 px gaps
    assert img.size == (3 * 160 + 2 * 4, 160)
    assert np.asarray(img).std() > 10


def test_image_thumbnails_gray_rgb_and_16_bit(tmp_path: Path) -> None:
    rgb = np.zeros((3, 600, 300), np.uint8)
    rgb[0] = 200
    img = image_thumbnail(rgb, size=256)
    assert img.mode == "RGB" and img.size == (128, 256) and img.getpixel((5, 5)) == (200, 0, 0)
    gray16 = np.arange(50 * 80, dtype=np.uint16).reshape(1, 50, 80) * 10
    img = image_thumbnail(gray16)
    assert img.mode == "L" and img.size == (80, 50)  # never enlarged
    lo, hi = img.getextrema()
    assert lo == 0 and hi == 255
    stack = _array(tmp_path, np.stack([rgb, np.full_like(rgb, 9)]))  # (N, C, H, W): slot 1 is uniform 9
    assert thumbnail(stack, slot=1, spacing=()).getpixel((0, 0)) == (9, 9, 9)


def test_thumbnail_refuses_an_unknown_layout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"expected a \(C, X, Y, Z\) volume"):
        thumbnail(_array(tmp_path, np.zeros((1, 2, 3, 4, 5), np.uint8)), slot=None, spacing=())


def test_bar_chart_is_a_stable_png() -> None:
    counts = {"T": 6, "B": 3, "NK": 3}
    one, two = bar_chart(counts, title="cell_type"), bar_chart(dict(reversed(counts.items())), title="cell_type")
    assert one == two
    with Image.open(io.BytesIO(one)) as img:
        assert img.format == "PNG"
    assert top_values({str(i): i for i in range(1, 31)}, top=3) == {"30": 30, "29": 29, "28": 28,
                                                                     "other (27 values)": sum(range(1, 28))}


def test_every_reason_is_explained() -> None:
    assert set(EXPLAIN) == set(Reason)
    assert all(text and not text.endswith(".") for text in EXPLAIN.values())


def test_mask_classes_are_drawn_where_they_are(tmp_path: Path) -> None:
    from labzarr.convert.qc.thumbs import class_color

    image = _array(tmp_path / "i", np.full((1, 20, 20, 20), 100, np.int16) + np.arange(20, dtype=np.int16))
    labels = np.zeros((1, 20, 20, 20), np.uint8)
    labels[0, 15:, 15:, :] = 2  # the patient's right, anterior: top left of the axial view
    mask = _array(tmp_path / "m", labels)
    img = np.asarray(volume_thumbnail(image, (1.0, 1.0, 1.0), size=40, mask=mask))  # 2 px per voxel
    axial = img[:, :40]
    top_left, bottom_right = axial[2, 2].astype(float), axial[-3, -3].astype(float)
    gray = axial[-3, -3]
    assert gray[0] == gray[1] == gray[2]  # class 0: untouched grey
    want = 0.55 * bottom_right[0] + 0.45 * np.array(class_color(2))
    np.testing.assert_allclose(top_left, want, atol=2)  # class 2 blended over the same grey
    with pytest.raises(ValueError, match="does not match image shape"):
        volume_thumbnail(image, (1.0, 1.0, 1.0), mask=_array(tmp_path / "n", labels[:, :10]))


def test_2d_mask_classes_are_drawn_where_they_are() -> None:
    from labzarr.convert.qc.thumbs import class_color

    pixels = np.full((3, 40, 60), 120, np.uint8)
    labels = np.zeros((1, 40, 60), np.uint8)
    labels[0, :20, :30] = 1  # top left
    img = np.asarray(image_thumbnail(pixels, size=30, mask=labels)).astype(float)  # halved
    assert img.shape == (20, 30, 3)
    np.testing.assert_allclose(img[-3, -3], [120, 120, 120], atol=1)  # class 0: untouched grey
    np.testing.assert_allclose(img[2, 2], 0.55 * 120 + 0.45 * np.array(class_color(1)), atol=2)
    with pytest.raises(ValueError, match="does not match image shape"):
        image_thumbnail(pixels, mask=labels[:, :10])
