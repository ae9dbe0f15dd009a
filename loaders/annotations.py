"""An item's annotations as a patch sees them: the points and boxes inside it, in patch coordinates.

Invariant: an annotation is in a patch when its centre lies in the patch's voxels
(voxel centres at integers, so [origin - 0.5, origin + size - 0.5) on each axis);
its point and box are shifted by the patch origin, the box clipped to the patch.
Points and boxes come in the index's (workbook) order, one row each, so row n of
`points` and of `boxes` is the same annotation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from labzarr.store import Annotation

from ._regions import Region

__all__ = ["patch_annotations"]


def patch_annotations(annotations: Sequence[Annotation], reg: Region) -> dict[str, torch.Tensor]:
    """`points` (N, 3) and `boxes` (N, 6: x0, y0, z0, x1, y1, z1) float32 of the annotations inside `reg`."""
    origin = np.array(reg.origin, dtype=np.float64)
    size = np.array(reg.size, dtype=np.float64)
    points, boxes = [], []
    for a in annotations:
        p = np.array(a.center) - origin
        if np.all(p >= -0.5) and np.all(p < size - 0.5):
            box = np.array(a.box).reshape(2, 3) - origin
            points.append(p)
            boxes.append(np.clip(box, -0.5, size - 0.5).reshape(6))
    return {"points": torch.from_numpy(np.array(points, dtype=np.float32).reshape(-1, 3)),
            "boxes": torch.from_numpy(np.array(boxes, dtype=np.float32).reshape(-1, 6))}
