"""The run's split step: the committed manifest's assignments and the store's content hashes in, rows out.

The assignment itself is pure (`plan/splits.py`); this reads what it needs: the earlier
`manifest.csv` and `summary.json` beside the spec (an earlier assignment counts only when it was
made under the same `[splits]` settings) and each ok array's `content_sha256`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from labzarr.store import CONTENT_SHA256, Location

from ..manifest import Row, read_manifest
from ..plan.splits import Prior, SplitResult, assign_splits, previous_assignment
from ..spec import Spec
from ..write.arrays import array_nodes

__all__ = ["split_rows"]

log = logging.getLogger(__name__)


def split_rows(spec: Spec, rows: Sequence[Row], store: Location) -> SplitResult:
    """Every row with its split set and the audit (`assign_splits`); the spec must have `[splits]`."""
    assert spec.splits is not None
    contents = {path: str(meta["attributes"][CONTENT_SHA256]) for path, meta in array_nodes(store)
                if CONTENT_SHA256 in meta.get("attributes", {})} if store.is_dir() else {}
    return assign_splits(rows, spec.splits, spec.items, prior=_prior(spec), contents=contents)


def _prior(spec: Spec) -> dict[str, Prior]:
    assert spec.splits is not None
    manifest, summary = spec.manifest_dir / "manifest.csv", spec.manifest_dir / "summary.json"
    try:
        before = json.loads(summary.read_bytes()).get("splits", {}).get("settings")
        rows = read_manifest(manifest)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("%s: cannot read the earlier split assignment (%s); every group is assigned afresh",
                    spec.manifest_dir, exc)
        return {}
    if before is None:
        return {}
    if before != spec.splits.settings():
        log.warning("%s: [splits] settings changed since the last run (%s -> %s); every group is assigned afresh",
                    spec.manifest_dir, before, spec.splits.settings())
        return {}
    return previous_assignment(rows)
