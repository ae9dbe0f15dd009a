"""`make bench`: one run, one table per section, ratios against each section's named baseline.

Each section module exposes `NAME` and `run(workdir: Path) -> list[Result]`; add a
module to `SECTIONS` to add a section. Timings are not tests: these machines are
noisy, so compare only rows measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from types import ModuleType
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import print_table  # noqa: E402

SECTIONS: tuple[str, ...] = ("excel", "convert", "report", "jpeg", "dicom", "reliability", "loaders", "objstore")


def _section(name: str) -> ModuleType:
    """Load bench/NAME.py by path: sections named like the repository's folders (`convert`, `loaders`) would
    otherwise import those packages once a section puts the repository root on sys.path for `tests.*`."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).resolve().parent / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", nargs="*", default=None, help="run only these sections")
    p.add_argument("--workdir", type=Path, default=Path("data/bench"), help="cached generated inputs")
    p.add_argument("--check", action="store_true", help="load every section and print its title; measure nothing")
    args = p.parse_args()
    unknown = sorted(set(args.only or ()) - set(SECTIONS))
    if unknown:
        p.error(f"unknown section(s) {', '.join(unknown)}; sections: {' '.join(SECTIONS)}")
    if not args.check:
        args.workdir.mkdir(parents=True, exist_ok=True)
    for name in SECTIONS:
        if args.only and name not in args.only:
            continue
        module = _section(name)
        if args.check:
            assert isinstance(module.NAME, str) and callable(module.run), f"bench/{name}.py: NAME and run(workdir)"
            print(f"{name}: {module.NAME}")
            continue
        print_table(module.NAME, module.run(args.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
