"""Batching PatchDataset samples: tensors stacked, strings as lists, variable sizes padded with a mask.

Invariant: every sample of a batch has the same keys; a key's batched value
depends only on that key's values (no key is dropped or renamed, a padded
tensor `k` gains one companion `k_mask`). In a DataLoader worker, stacked
tensors go straight into shared memory (torch's default_collate), so a batch
crosses to the main process as one buffer per key, not one per sample.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import default_collate

__all__ = ["Collate", "collate"]


@dataclass(frozen=True, slots=True)
class Collate:
    """A picklable collate_fn for dict samples.

    `variable`: what to do with tensors of different shapes under one key: "pad" (to the largest extent
    on every axis with `pad_value`, plus a boolean `<key>_mask` that is True on real values) or "list".
    Tensors of different dtypes are promoted to a common one (`torch.promote_types`). Numbers become a
    tensor, tuples of numbers (`origin`, `valid`) a tensor with one row per sample, strings and anything
    else a list.
    """

    variable: Literal["pad", "list"] = "pad"
    pad_value: float = 0

    def __post_init__(self) -> None:
        if self.variable not in ("pad", "list"):
            raise ValueError(f"variable = {self.variable!r}; expected 'pad' or 'list'")

    def __call__(self, batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        keys = list(batch[0])
        for n, sample in enumerate(batch):
            if list(sample) != keys:
                raise ValueError(f"sample {n} has keys {sorted(sample)}, sample 0 has {sorted(keys)}")
        out: dict[str, Any] = {}
        for key in keys:
            values = [sample[key] for sample in batch]
            if all(isinstance(v, torch.Tensor) for v in values):
                out.update(self._tensors(key, values))
            else:
                out[key] = _other(values)
        return out

    def _tensors(self, key: str, values: list[torch.Tensor]) -> dict[str, Any]:
        dtype = reduce(torch.promote_types, (v.dtype for v in values))
        if any(v.dtype != dtype for v in values):  # items of a store may differ (int16 CT, float32 MR)
            values = [v.to(dtype) for v in values]
        if all(v.shape == values[0].shape for v in values):
            return {key: default_collate(values)}
        if self.variable == "list":
            return {key: values}
        padded, masks = _pad(values, self.pad_value)
        return {key: default_collate(padded), f"{key}_mask": default_collate(masks)}


collate = Collate()
"""The default: pad variable-size tensors and add a mask."""


def _other(values: list[Any]) -> Any:
    if all(_is_number(v) for v in values):
        return torch.tensor(values)
    if all(isinstance(v, tuple | list) for v in values):
        arrays = [np.asarray(v) for v in values]
        if all(a.dtype.kind in "biuf" and a.shape == arrays[0].shape for a in arrays):
            return torch.from_numpy(np.stack(arrays))
    return list(values)


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Number | np.number) and not isinstance(v, complex)


def _pad(values: Sequence[torch.Tensor], pad_value: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    ndims = {v.ndim for v in values}
    if len(ndims) != 1:
        raise ValueError(f"cannot pad tensors of different ranks {sorted(ndims)} into one batch")
    shape = tuple(max(v.shape[d] for v in values) for d in range(values[0].ndim))
    padded, masks = [], []
    for v in values:
        region = tuple(slice(0, n) for n in v.shape)
        p = v.new_full(shape, pad_value)
        p[region] = v
        m = torch.zeros(shape, dtype=torch.bool)
        m[region] = True
        padded.append(p)
        masks.append(m)
    return padded, masks
