"""What the `labzarr` command reads of a spec before it imports what validating one takes (numpy, among others):
where its relative paths start, and the bounds of a delivery it converts without a cluster (`run/small_run.py`).
`spec.py` takes both from here, so the two readings cannot drift apart. Imports nothing heavy."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["IN_PROCESS_BYTES", "IN_PROCESS_FILES", "project_root", "resolve"]

# `[run] in_process_files` and `in_process_bytes` when a spec sets none (`spec.RunSpec`): a run of a few seconds,
# which its workers forked from the command's child finish sooner than a cluster's would (its start is much of such
# a run), and which is cheap to run again on a cluster where a reader crashes or hangs in it (docs/benchmarks.md,
# "A small delivery in processes forked from the command").
IN_PROCESS_FILES = 5000
IN_PROCESS_BYTES = 256 << 20


def project_root(spec_path: Path) -> Path:
    """The folder a spec's relative paths start from, whatever the working directory: the one holding
    `manifests/` when the spec lies in a manifests/ tree (`manifests/<delivery>/delivery.toml`), else the
    spec's own folder."""
    folder = Path(os.path.abspath(spec_path)).parent  # normalised (no `..`), symlinks kept as the user has them
    for parent in (folder, *folder.parents):
        if parent.name == "manifests":
            return parent.parent
    return folder


def resolve(base: Path, value: str) -> Path:
    """`value` (a path in a spec, `~` expanded) as a path: itself where absolute, else below `base`."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p
