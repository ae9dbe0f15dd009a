"""OME-Zarr (NGFF 0.5) metadata of the store's images: where an item's levels and labels lie, and what the
`ome` attributes of their groups say.

Invariant: every volume item is an NGFF image group `volumes/<item>/`, its full-resolution array at `0` (what
the index's `array` names) and any downsampled levels at `1`, `2`, ...; a sample's mask is the label image
`labels/mask/` below its image group. The `ome` attributes are built here only, from the canonical grid the
converter wrote (spacing and the affine's origin), so napari, ome-zarr-py and ngff-zarr place every level where
labzarr's own affine does. NGFF has no oblique transform: the full affine stays in labzarr's attributes on level
0, and `scale`/`translation` are its diagonal and origin (exact for the axis-aligned grids most deliveries hold).

Pure: no zarr, no I/O, so the planner and the readers of a store may use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["IMAGE", "LABELS", "LEVEL0", "MASK", "NGFF_VERSION", "ROLES", "Pyramid", "class_color", "image_attrs",
           "image_of", "label_attrs", "labels_attrs", "level_factors", "level_shape", "level_transforms", "multiscales",
           "role_path"]

NGFF_VERSION = "0.5"
LEVEL0 = "0"  # the full-resolution level of every image: the array the index names
LABELS = "labels"  # NGFF's folder of label images, below the image group
ROLES = "roles"  # a sample's further image roles (not the image, not the mask), each an image group below it
MASK = "mask"  # the role stored as a label image (convert.spec.MASK_ROLE; the store layer cannot import convert)
IMAGE = "image"  # the reference role: the sample group's own image

# matplotlib's "tab10": ten colours told apart by most colour-blind readers too; the QC page draws classes in them.
_PALETTE = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
            (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207))


def class_color(k: int) -> tuple[int, int, int]:
    """The colour of mask class `k` (k >= 1; class 0 is background): on the QC page and in the label image."""
    return _PALETTE[(k - 1) % len(_PALETTE)]


@dataclass(frozen=True, slots=True)
class Pyramid:
    """The downsampled levels written below level 0 of one image: `levels` of them, each half the previous one
    along every spatial axis longer than one voxel; an image by the mean of each 2x2(x2) block, a label image by
    its most frequent value (the smallest on a tie), so no level holds a class the mask does not."""

    levels: int = 0
    method: Literal["mean", "mode"] = "mean"


def image_of(level0: str) -> str:
    """The image group of a level-0 array path (`volumes/case1/0` -> `volumes/case1`)."""
    group, _, level = level0.rpartition("/")
    if level != LEVEL0 or not group:
        raise ValueError(f"{level0!r} is no level-0 array path (expected '<image group>/{LEVEL0}')")
    return group


def role_path(group: str, role: str) -> str:
    """A sample role's level-0 array below its sample group: the image at `0`, the mask at `labels/mask/0`, any
    other role at `roles/<role>/0` (role names are identifiers, so they never clash with these folders)."""
    if role == IMAGE:
        return f"{group}/{LEVEL0}"
    if role == MASK:
        return f"{group}/{LABELS}/{MASK}/{LEVEL0}"
    return f"{group}/{ROLES}/{role}/{LEVEL0}"


def level_shape(shape: Sequence[int], level: int) -> tuple[int, ...]:
    """The shape of `level` of an image of level-0 `shape` (channels first): each spatial axis halved `level`
    times, rounding up, so an odd edge keeps a last, partial block."""
    out = list(shape)
    for _ in range(level):
        out = [out[0], *(-(-n // 2) for n in out[1:])]
    return tuple(out)


def level_factors(shape: Sequence[int], level: int) -> tuple[int, ...]:
    """How many level-0 voxels one voxel of `level` spans per spatial axis (an axis of one voxel stays 1)."""
    factors = [1] * (len(shape) - 1)
    cur = list(shape[1:])
    for _ in range(level):
        factors = [f * (2 if n > 1 else 1) for f, n in zip(factors, cur)]
        cur = [-(-n // 2) for n in cur]
    return tuple(factors)


def level_transforms(shape: Sequence[int], spacing: Sequence[float], origin: Sequence[float],
                     level: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(scale, translation) of `level`, channel axis first: the voxel size grows by each axis's factor, and the
    first voxel's centre moves to the centre of the level-0 block it covers: half the new voxel minus half the
    old one past the origin."""
    factors = level_factors(shape, level)
    scale = tuple(s * f for s, f in zip(spacing, factors))
    translation = tuple(o + (s * f - s) / 2 for o, s, f in zip(origin, spacing, factors))
    return (1.0, *scale), (0.0, *translation)


def _axes(names: Sequence[str], physical: bool) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for name in names:
        if name == "c":
            out.append({"name": "c", "type": "channel"})
        else:  # a 2D image from PNG/JPEG/TIFF has no physical frame: its space axes carry no unit
            out.append({"name": name, "type": "space", **({"unit": "millimeter"} if physical else {})})
    return out


def multiscales(*, name: str, axes: Sequence[str], shape: Sequence[int], spacing: Sequence[float],
                affine: Sequence[Sequence[float]] | None, pyramid: Pyramid) -> list[dict[str, Any]]:
    """The `multiscales` list of one image: axes (c, then x, y, z in canonical RAS order, or y, x), and per level
    its path, scale and translation. `spacing` empty means no physical frame (scale 1, origin 0, no unit)."""
    spatial = len(shape) - 1
    physical = len(spacing) == spatial
    sizes = tuple(float(s) for s in spacing) if physical else (1.0,) * spatial
    origin = tuple(float(affine[i][3]) for i in range(spatial)) if physical and affine else (0.0,) * spatial
    datasets = []
    for level in range(pyramid.levels + 1):
        scale, translation = level_transforms(shape, sizes, origin, level)
        datasets.append({"path": str(level), "coordinateTransformations": [
            {"type": "scale", "scale": list(scale)}, {"type": "translation", "translation": list(translation)}]})
    how = ("the mean of each 2x2x2 block, integers rounded half to even" if pyramid.method == "mean"
           else "the most frequent value of each 2x2x2 block, the smallest on a tie")
    return [{"name": name, "axes": _axes(axes, physical), "datasets": datasets, "type": pyramid.method,
             "metadata": {"description": f"each level halves every spatial axis longer than 1 voxel: {how}",
                          "method": f"labzarr {pyramid.method} downsampling"}}]


def image_attrs(ms: list[dict[str, Any]]) -> dict[str, Any]:
    """The `ome` attribute of an image group."""
    return {"ome": {"version": NGFF_VERSION, "multiscales": ms}}


def labels_attrs(names: Sequence[str]) -> dict[str, Any]:
    """The `ome` attribute of an image's `labels/` group, naming its label images."""
    return {"ome": {"version": NGFF_VERSION, "labels": list(names)}}


def label_attrs(ms: list[dict[str, Any]], classes: Sequence[int],
                names: Mapping[int, tuple[str, tuple[int, int, int] | None]] | None = None) -> dict[str, Any]:
    """The `ome` attribute of a label image: its levels, and one colour per class (background clear), each with
    its value; `source` points back at the image two groups up. `names`: a class's name and its own colour (a
    DICOM SEG segment's label and display colour, an RTSTRUCT class), given as NGFF `properties`."""
    names = names or {}
    colors = [{"label-value": 0, "rgba": [0, 0, 0, 0]}]
    colors += [{"label-value": int(k), "rgba": [*(names.get(int(k), ("", None))[1] or class_color(int(k))), 255]}
               for k in sorted(set(classes) | set(names)) if k != 0]
    label: dict[str, Any] = {"colors": colors, "source": {"image": "../../"}}
    if names:
        label["properties"] = [{"label-value": int(k), "name": name} for k, (name, _) in sorted(names.items())]
    return {"ome": {"version": NGFF_VERSION, "multiscales": ms, "image-label": label}}
