"""The store format of an item's annotations (points, spheres, boxes from the label workbook).

Invariant: an annotation is stored in the item's canonical voxel grid (the array's
(x, y, z) axes, voxel centres at integers), so a reader needs no affine to place it:
`center` is the lesion's centre and `size` the full extent of its axis-aligned box
along each axis, in voxels (0 for a point). The same JSON is written in the store's
index entry and in the array's `annotations` attribute; this module is its only
encoder and decoder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ANNOTATIONS", "Annotation", "decode_annotations", "encode_annotations"]

# The array attr (and index entry key) holding an item's annotations; absent for an item without any.
ANNOTATIONS = "annotations"


@dataclass(frozen=True, slots=True)
class Annotation:
    """One annotation in canonical voxel coordinates; `source` is the workbook cell of its centre."""

    center: tuple[float, float, float]
    size: tuple[float, float, float]
    source: str

    @property
    def box(self) -> tuple[float, float, float, float, float, float]:
        """(x0, y0, z0, x1, y1, z1): the centre minus and plus half the size."""
        lo = tuple(c - s / 2 for c, s in zip(self.center, self.size))
        hi = tuple(c + s / 2 for c, s in zip(self.center, self.size))
        return (lo[0], lo[1], lo[2], hi[0], hi[1], hi[2])

    def encode(self) -> dict[str, Any]:
        """The annotation as JSON."""
        return {"center": list(self.center), "size": list(self.size), "source": self.source}

    @classmethod
    def decode(cls, d: Mapping[str, Any]) -> Annotation:
        """The annotation of one JSON entry; raises KeyError/TypeError/ValueError on a malformed one."""
        c, s = [float(v) for v in d["center"]], [float(v) for v in d["size"]]
        if len(c) != 3 or len(s) != 3:
            raise ValueError(f"annotation center {c} and size {s} need 3 values each")
        return cls(center=(c[0], c[1], c[2]), size=(s[0], s[1], s[2]), source=str(d.get("source", "")))


def encode_annotations(annotations: Sequence[Annotation]) -> list[dict[str, Any]]:
    """A list of annotations as JSON, in the given (workbook) order."""
    return [a.encode() for a in annotations]


def decode_annotations(value: object) -> tuple[Annotation, ...]:
    """The annotations `encode_annotations` wrote (None or absent: none); raises TypeError/ValueError/KeyError."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TypeError(f"annotations: expected a list, got {type(value).__name__}")
    return tuple(Annotation.decode(d) for d in value)
