"""`make bench`: one run, one table per section, ratios against each section's named baseline.

Each section module exposes `NAME` and `run(workdir: Path) -> list[Result]`; add a
module to `SECTIONS` to add a section. Timings are not tests: these machines are
noisy, so compare only rows measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import print_table  # noqa: E402

SECTIONS: tuple[str, ...] = ("excel", "convert", "report", "jpeg", "dicom", "reliability", "loaders", "objstore",
                             "index_scale", "scale")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", nargs="*", default=None, help="run only these sections")
    p.add_argument("--workdir", type=Path, default=Path("data/bench"), help="cached generated inputs")
    p.add_argument("--check", action="store_true", help="load every section and print its title; measure nothing")
    p.add_argument("--corpora", type=Path, default=None, metavar="DIR",
                   help="dicom section: where the dcm2niix QA corpora's mirrors are (DIR/neurolabusc+<name>/repo; "
                        "default ../.mirror beside the project)")
    p.add_argument("--corpora-only", action="store_true",
                   help="dicom section: only the real-export corpora, not the generated inputs")
    p.add_argument("--quick", action="store_true",
                   help="scale section: a smoke run at small sizes (200 and 1,000 files)")
    p.add_argument("--scale-sizes", type=int, nargs="+", default=None, metavar="N",
                   help="scale section: delivery sizes in files (default 10000 100000, the issue's), "
                        "e.g. --scale-sizes 2000 20000")
    args = p.parse_args()
    unknown = sorted(set(args.only or ()) - set(SECTIONS))
    if unknown:
        p.error(f"unknown section(s) {', '.join(unknown)}; sections: {' '.join(SECTIONS)}")
    if not args.check:
        args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir.resolve()  # sections write specs naming their inputs, which a spec resolves from itself
    for name in SECTIONS:
        if args.only and name not in args.only:
            continue
        module = importlib.import_module(name)
        if args.check:
            assert isinstance(module.NAME, str) and callable(module.run), f"bench/{name}.py: NAME and run(workdir)"
            print(f"{name}: {module.NAME}")
            continue
        options: dict[str, object] = {}
        if name == "dicom":
            options = {"corpora_dir": args.corpora, "corpora_only": args.corpora_only}
        elif name == "scale":
            options = {"quick": args.quick, "sizes": tuple(args.scale_sizes) if args.scale_sizes else None}
        print_table(module.NAME, module.run(workdir, **options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
