"""Conversion: spec, discovery, planning, the dask run, the zarr store, the manifest and the CLI."""

from .discover import Candidate, FileEntry, discover, walk
from .errors import UsageError
from .ids import normalize_id
from .manifest import Row, read_manifest
from .plan import Plan, Task, plan
from .progress import Progress, ProgressEvent
from .run import RunResult, convert_delivery, dry_run, execute
from .spec import Spec, load_spec

__all__ = [
    "Candidate",
    "FileEntry",
    "Plan",
    "Progress",
    "ProgressEvent",
    "Row",
    "RunResult",
    "Spec",
    "Task",
    "UsageError",
    "convert_delivery",
    "discover",
    "dry_run",
    "execute",
    "load_spec",
    "normalize_id",
    "plan",
    "read_manifest",
    "walk",
]
