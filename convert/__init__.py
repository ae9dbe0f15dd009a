"""Conversion: the spec, discovery, the label join and validation policy, and one folder per stage.

- `plan/`: the pure plan (what each file becomes, which task writes what); no zarr, dask or fsspec.
- `run/`: the dask driver, supervision and the worker tasks, with the one task boundary they share.
- `write/`: writing the store through the store layer: arrays, stacks, the lock, bookkeeping, outcomes.
- `qc/`: reviewing a converted store: the report page, verify, inspect, diff.

The run's names are imported on first use (PEP 562): planning or reading a spec loads no dask or zarr.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .discover import Candidate, FileEntry, discover, walk
from .errors import UsageError
from .ids import normalize_id
from .manifest import Row, read_manifest
from .plan.build import Plan, VolumeTask
from .progress import Progress, ProgressEvent
from .spec import Spec, load_spec

if TYPE_CHECKING:
    from .check import CheckReport, check_delivery
    from .run.driver import RunResult, convert_delivery, execute

__all__ = [
    "Candidate",
    "CheckReport",
    "FileEntry",
    "Plan",
    "Progress",
    "ProgressEvent",
    "Row",
    "RunResult",
    "Spec",
    "UsageError",
    "VolumeTask",
    "check_delivery",
    "convert_delivery",
    "discover",
    "execute",
    "load_spec",
    "normalize_id",
    "read_manifest",
    "walk",
]

# The run's names load dask and zarr, and check's the store's bookkeeping: imported on first use (PEP 562), so
# that reading a spec or planning does not.
_LAZY = {"RunResult": "run.driver", "convert_delivery": "run.driver", "execute": "run.driver",
         "CheckReport": "check", "check_delivery": "check"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
