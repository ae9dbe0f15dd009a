"""Pickling of the frozen, slotted dataclasses a run moves by the million (rows, their statistics).

The state is the one `dataclasses` gives such a class (its fields' values in order), so pickles either way load
either way; what differs is the cost. `dataclasses`' own `__getstate__`/`__setstate__` look the fields up
(`dataclasses.fields`) on every call: for a run's rows, sent by the workers and written to disk and read back by
the driver (convert/run/row_spill.py), that lookup was most of the driver's pickling time (docs/benchmarks.md,
"Scale: many tiny files"). Here the names are looked up once per class; tests/store/test_pickling.py checks the
state against `dataclasses`'.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_pickling"]

_C = TypeVar("_C", bound=type)


def fast_pickling(cls: _C) -> _C:
    """Give the slotted dataclass `cls` a `__getstate__`/`__setstate__` with its field names looked up once."""
    names = tuple(f.name for f in dataclasses.fields(cls))
    setter = object.__setattr__

    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=True):
            setter(self, name, value)

    setattr(cls, "__getstate__", __getstate__)  # noqa: B010 - a class's method, set on the class given
    setattr(cls, "__setstate__", __setstate__)  # noqa: B010
    return cls
