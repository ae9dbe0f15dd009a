"""Compare two store folders byte for byte: every file, except that `.labzarr/last-run.json` is compared with its
wall times (keys ending in `_s`) dropped, since they time the run, not the data. Prints "same", or "DIFFERENT:"
and the first differing paths.

usage: python bench/compare/same_store.py STORES_A STORES_B
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not k.endswith("_s")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def differing(a: Path, b: Path) -> list[str]:
    """Paths, relative to the two folders, that one lacks or whose contents differ."""
    fa = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    bad = sorted(str(p) for p in fa ^ fb)
    for rel in sorted(fa & fb):
        x: Any = (a / rel).read_bytes()
        y: Any = (b / rel).read_bytes()
        if rel.name == "last-run.json":
            x, y = _untimed(json.loads(x)), _untimed(json.loads(y))
        if x != y:
            bad.append(str(rel))
    return bad


if __name__ == "__main__":
    found = differing(Path(sys.argv[1]), Path(sys.argv[2]))
    print("same" if not found else "DIFFERENT: " + " ".join(found[:10]))
