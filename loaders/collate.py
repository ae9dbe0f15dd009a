"""Batching PatchDataset samples: tensors stacked, strings as lists, variable sizes padded with a mask.

Invariant: every sample of a batch has the same keys; a key's batched value
depends only on that key's values (no key is dropped or renamed, a padded
tensor `k` gains one companion `k_mask`). A batch never silently changes what
a model sees: tensors of one key that differ in channel count or dtype are
refused, naming the items, unless the caller opted in to padding or promotion.
In a DataLoader worker, stacked tensors go straight into shared memory (torch's
default_collate), so a batch crosses to the main process as one buffer per key,
not one per sample.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import default_collate

__all__ = ["Collate", "MixedBatchError", "MixedBatchWarning", "collate"]

_SHOWN = 6  # item names listed per group in a MixedBatchError; the rest are counted


class MixedBatchError(ValueError):
    """A batch mixes channel counts or dtypes under one key, and the Collate was not told to pad or promote.

    It takes one message argument, so torch re-raises it by its type (with the text) when a DataLoader
    worker raised it.
    """


class MixedBatchWarning(UserWarning):
    """A PatchDataset read a batch that mixes channel counts or dtypes: torch's default collate fails on it, and
    the message says what to pass instead. With `Collate` told how to mix them, filter it out."""


@dataclass(frozen=True, slots=True)
class Collate:
    """A picklable collate_fn for dict samples.

    `variable`: what to do with tensors of different spatial shapes under one key (patches clipped at a
    border, whole items, 2D images of different sizes): "pad" (to the largest extent on every axis with
    `pad_value`, plus a boolean `<key>_mask` that is True on real values) or "list".
    `channels`: tensors under one key whose channel counts differ (the leading axis of a tensor with two or
    more axes: PatchDataset's ``(C, *patch)``) are refused with a `MixedBatchError` naming the items
    ("refuse", the default: a model with fixed input channels would otherwise fail on some batches only),
    or, with "pad", padded like any other axis (the added channels are False in `<key>_mask`; with
    ``variable="list"``, listed unpadded).
    `dtypes`: tensors under one key of different dtypes are refused ("refuse", the default) or promoted to
    a common one ("promote", `torch.promote_types`: int16 with float32 gives float32).
    Numbers become a tensor, tuples of numbers (`origin`, `valid`) a tensor with one row per sample (these
    small tensors of one dtype are views of one buffer: one shared-memory trip from a worker, not one each),
    strings and anything else a list.
    `ragged`: keys whose tensors hold a varying number of rows (PatchDataset's ``points`` and ``boxes``):
    always padded along their first axis to the batch's most (with `pad_value`), plus a boolean
    `<key>_mask` of shape (batch, most) that is True on real rows, so every batch has the same keys.
    """

    variable: Literal["pad", "list"] = "pad"
    pad_value: float = 0
    channels: Literal["refuse", "pad"] = "refuse"
    ragged: tuple[str, ...] = ("points", "boxes")
    dtypes: Literal["refuse", "promote"] = "refuse"

    def __post_init__(self) -> None:
        for name, value, allowed in (("variable", self.variable, ("pad", "list")),
                                     ("channels", self.channels, ("refuse", "pad")),
                                     ("dtypes", self.dtypes, ("refuse", "promote"))):
            if value not in allowed:
                raise ValueError(f"{name} = {value!r}; expected {' or '.join(map(repr, allowed))}")

    def __call__(self, batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        keys = list(batch[0])
        for n, sample in enumerate(batch):
            if list(sample) != keys:
                raise ValueError(f"sample {n} has keys {sorted(sample)}, sample 0 has {sorted(keys)}")
        out: dict[str, Any] = {}
        small: dict[str, npt.NDArray[Any]] = {}
        for key in keys:
            values = [sample[key] for sample in batch]
            if key in self.ragged and all(isinstance(v, torch.Tensor) for v in values):
                out.update(_rows(key, values, self.pad_value))
            elif all(isinstance(v, torch.Tensor) for v in values):
                self._check_mix(key, values, batch)
                out.update(self._tensors(key, values))
            else:
                out[key] = _other(values)
                if isinstance(out[key], np.ndarray):
                    small[key] = out[key]
        out.update(_one_buffer(small))
        return out

    def _check_mix(self, key: str, values: list[torch.Tensor], batch: Sequence[Mapping[str, Any]]) -> None:
        channeled = all(v.ndim >= 2 for v in values)
        if all(v.dtype == values[0].dtype and (not channeled or v.shape[0] == values[0].shape[0]) for v in values):
            return
        names = _names(batch)
        mixed, opt_in, effects = [], [], []
        if self.channels == "refuse" and channeled:
            counts = _groups(names, [int(v.shape[0]) for v in values])
            if len(counts) > 1:
                mixed.append("channel counts: " + ", ".join(
                    f"{c} channel{'' if c == 1 else 's'} ({who})" for c, who in sorted(counts.items())))
                opt_in.append('channels="pad"')
                effects.append("lists them unpadded" if self.variable == "list"
                               else f"pads the channel axis, the added channels False in '{key}_mask'")
        if self.dtypes == "refuse":
            kinds = _groups(names, [v.dtype for v in values])
            if len(kinds) > 1:
                mixed.append("dtypes: " + ", ".join(f"{_dtype(d)} ({who})" for d, who in kinds.items()))
                opt_in.append('dtypes="promote"')
                effects.append(f"casts all to {_dtype(reduce(torch.promote_types, kinds))}")
        if mixed:
            raise MixedBatchError(
                f"batch mixes, under {key!r}, {'; and '.join(mixed)}. A model with fixed input channels or dtype "
                "would fail on some batches only. Give the loader items of one kind (select them, or convert "
                f"them in the dataset's transform), or pass collate_fn=Collate({', '.join(opt_in)}) to batch "
                f"them anyway ({'; '.join(f'{o} {e}' for o, e in zip(opt_in, effects))})")

    def _tensors(self, key: str, values: list[torch.Tensor]) -> dict[str, Any]:
        dtype = reduce(torch.promote_types, (v.dtype for v in values))
        if any(v.dtype != dtype for v in values):  # only with dtypes="promote": _check_mix refused it otherwise
            values = [v.to(dtype) for v in values]
        if all(v.shape == values[0].shape for v in values):
            rows = _rows_of_one_tensor(values)
            return {key: rows if rows is not None else default_collate(values)}
        if self.variable == "list":
            return {key: values}
        padded, masks = _pad(values, self.pad_value)
        return {key: default_collate(padded), f"{key}_mask": default_collate(masks)}


collate = Collate()
"""The default: pad variable spatial sizes and add a mask; refuse mixed channel counts and dtypes."""


def _rows_of_one_tensor(values: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The tensor whose rows, in order, `values` are (PatchDataset's batch read into one buffer, pinned when
    CUDA is available): handed on as it is, rather than copied by stacking; None when they are not."""
    base = values[0]._base
    if base is None or not base.is_contiguous() or base.shape != (len(values), *values[0].shape):
        return None
    n = values[0].numel()
    if all(v._base is base and v.is_contiguous() and v.storage_offset() == base.storage_offset() + b * n
           for b, v in enumerate(values)):
        return base
    return None


def _names(batch: Sequence[Mapping[str, Any]]) -> list[str]:
    """What to call each sample in an error: its `item_id` (PatchDataset's), else its position."""
    return [str(s["item_id"]) if isinstance(s.get("item_id"), str) else f"sample {n}" for n, s in enumerate(batch)]


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _groups(names: Sequence[str], values: Sequence[Any]) -> dict[Any, str]:
    """Each distinct value, in order of first appearance, with the (distinct) names of the samples holding it."""
    members: dict[Any, list[str]] = {}
    for name, value in zip(names, values):
        group = members.setdefault(value, [])
        if name not in group:  # several patches of one item in a batch name it once
            group.append(name)
    return {value: ", ".join(group[:_SHOWN]) + (f", +{len(group) - _SHOWN} more" if len(group) > _SHOWN else "")
            for value, group in members.items()}


def _other(values: list[Any]) -> Any:
    """Numbers and tuples of numbers as an array (made a tensor by `_one_buffer`), anything else as a list."""
    if all(_is_number(v) for v in values):
        return torch.tensor(values).numpy()  # torch's dtypes: Python floats become float32
    if all(isinstance(v, tuple | list) for v in values):
        arrays = [np.asarray(v) for v in values]
        if all(a.dtype.kind in "biuf" and a.shape == arrays[0].shape for a in arrays):
            return np.stack(arrays)
    return list(values)


def _one_buffer(arrays: Mapping[str, npt.NDArray[Any]]) -> dict[str, torch.Tensor]:
    """`arrays` as tensors, those of one dtype views of one buffer: from a DataLoader worker, each buffer is a
    shared-memory segment whose descriptor torch passes to the main process, and a batch's `origin`, `valid` and
    labels then cost one such trip, not one each."""
    out: dict[str, torch.Tensor] = {}
    for dtype in dict.fromkeys(a.dtype for a in arrays.values()):
        keys = [k for k, a in arrays.items() if a.dtype == dtype]
        flat = torch.from_numpy(np.concatenate([arrays[k].ravel() for k in keys]))
        at = 0
        for k in keys:
            a = arrays[k]
            out[k] = flat[at:at + a.size].view(a.shape)
            at += a.size
    return out


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Number | np.number) and not isinstance(v, complex)


def _rows(key: str, values: Sequence[torch.Tensor], pad_value: float) -> dict[str, torch.Tensor]:
    """Tensors of varying row counts (their other axes alike) stacked as (batch, most, ...) with a row mask."""
    tails = {tuple(v.shape[1:]) for v in values}
    if len(tails) != 1 or any(v.ndim < 1 for v in values):
        raise ValueError(f"cannot pad {key!r} by rows: shapes {sorted({tuple(v.shape) for v in values})} differ "
                         "beyond their first axis")
    most = max(int(v.shape[0]) for v in values)
    out = values[0].new_full((len(values), most, *tails.pop()), pad_value)
    mask = torch.zeros((len(values), most), dtype=torch.bool)
    for n, v in enumerate(values):
        out[n, : v.shape[0]] = v
        mask[n, : v.shape[0]] = True
    return {key: out, f"{key}_mask": mask}


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
