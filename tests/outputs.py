"""What a conversion wrote, as bytes by path, for comparing two runs of one delivery file for file.

Every file of the store and of the spec's folder (manifest.csv, summary.json, the spec itself). Two things differ
between runs whatever the code does, and are made comparable: each stack's records folder gets a fresh random name
every run (`convert/write/stacks.stage_stacks`), here named after the stack whose `zarr.json` refers to it; and the
run log (`.labzarr/last-run.json`) times the run, here without its wall times (keys ending in `_s`).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["run_outputs"]


def run_outputs(store: Path, manifests: Path, *, warnings: bool = True) -> dict[str, bytes]:
    """The files under `store` (as `store/...`) and `manifests` (as `manifests/...`); `warnings=False` also leaves
    the run log's `warnings` out (runs whose workers were started to ignore some)."""
    files = {**{f"store/{k}": v for k, v in _files(store, warnings).items()},
             **{f"manifests/{k}": v for k, v in _files(manifests, warnings).items()}}
    return _named_records(files)


def _files(folder: Path, warnings: bool) -> dict[str, bytes]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            rel = p.relative_to(folder).as_posix()
            out[rel] = p.read_bytes() if not rel.endswith("last-run.json") else _untimed(p, warnings)
    return out


def _untimed(path: Path, warnings: bool) -> bytes:
    def drop(v: object) -> object:
        if isinstance(v, dict):
            return {k: drop(x) for k, x in v.items() if not k.endswith("_s") and (warnings or k != "warnings")}
        return [drop(x) for x in v] if isinstance(v, list) else v

    return json.dumps(drop(json.loads(path.read_bytes()))).encode()


def _named_records(files: dict[str, bytes]) -> dict[str, bytes]:
    ids = {k.split("/")[3] for k in files if k.startswith("store/.labzarr/records/")}
    names = {i: next(k for k, v in files.items() if k.endswith("/zarr.json") and i.encode() in v) for i in ids}
    out = {}
    for k, v in files.items():
        for i, name in names.items():
            k, v = k.replace(i, name), v.replace(i.encode(), name.encode())
        out[k] = v
    return out
