"""Conversion: the spec, discovery, the label join and validation policy, and one folder per stage.

- `plan/`: the pure plan (what each file becomes, which task writes what); no zarr, dask or fsspec.
- `run/`: the dask driver, supervision and the worker tasks, with the one task boundary they share.
- `write/`: writing the store through the store layer: arrays, stacks, the lock, bookkeeping, outcomes.
- `qc/`: reviewing a converted store: the report page, verify, inspect, diff.

Every name is imported on first use (PEP 562): planning or reading a spec loads no dask or zarr, and the CLI loads
nothing of the readers before it has parsed its arguments.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .check import CheckReport, check_delivery
    from .discover import Candidate, FileEntry, walk
    from .errors import UsageError
    from .ids import normalize_id
    from .manifest import Row, read_manifest
    from .plan.build import Plan, VolumeTask
    from .progress import Progress, ProgressEvent
    from .run.driver import RunResult, convert_delivery, execute
    from .spec import Spec, load_spec

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
    "execute",
    "load_spec",
    "normalize_id",
    "read_manifest",
    "walk",
]

# Every name is imported on first use (PEP 562): the spec's pull in the readers (pydicom, nibabel, openpyxl), the
# run's dask and zarr, check's the store's bookkeeping; `labzarr convert` parses its arguments and starts its
# workers' imports (`run/worker_start.py`) before it pays for any of them.
# `discover` is not among them: it is also the name of its submodule, which the import system binds on this package
# whenever anything imports `labzarr.convert.discover`, so a lazy function of that name would read as the module
# depending on import order (`from labzarr.convert.discover import discover`).
_LAZY = {"Candidate": "discover", "FileEntry": "discover", "walk": "discover",
         "UsageError": "errors", "normalize_id": "ids", "Row": "manifest", "read_manifest": "manifest",
         "Plan": "plan.build", "VolumeTask": "plan.build", "Progress": "progress", "ProgressEvent": "progress",
         "Spec": "spec", "load_spec": "spec",
         "RunResult": "run.driver", "convert_delivery": "run.driver", "execute": "run.driver",
         "CheckReport": "check", "check_delivery": "check"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
