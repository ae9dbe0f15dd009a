"""convert/ by stage: the plan is pure, and imports run one way (plan <- run -> write; qc reads the store layer)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONVERT = ROOT / "convert"
STAGES = ("plan", "run", "write", "qc")
# What each stage may import of the others (the top of convert/ -- spec, manifest, errors, ... -- is open to all).
MAY_IMPORT = {"plan": set(), "write": {"plan"}, "run": {"plan", "write"}, "qc": set()}

_BLOCKER = """
import importlib.abc, sys
BLOCKED = ("zarr", "dask", "distributed", "fsspec", "s3fs", "torch")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {name}")
        return None
sys.meta_path.insert(0, Block())
import pkgutil, importlib
import labzarr.convert.plan as plan
names = [m.name for m in pkgutil.iter_modules(plan.__path__, "labzarr.convert.plan.")]
for name in names:
    importlib.import_module(name)
import labzarr.convert, labzarr.convert.spec, labzarr.convert.discover
print(len(names))
"""


def test_the_plan_imports_without_zarr_dask_or_fsspec() -> None:
    out = subprocess.run([sys.executable, "-c", _BLOCKER], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len([p for p in (CONVERT / "plan").glob("*.py") if p.name != "__init__.py"])


def _imports(path: Path) -> set[str]:
    """The absolute `labzarr.convert...` modules a convert module imports (relative imports resolved)."""
    package = ["labzarr", "convert", *path.relative_to(CONVERT).parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                out.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("labzarr.convert")}


@pytest.mark.parametrize("stage", STAGES)
def test_imports_run_one_way(stage: str) -> None:
    wrong = []
    for path in sorted((CONVERT / stage).glob("*.py")):
        for module in _imports(path):
            parts = module.split(".")
            other = parts[2] if len(parts) > 2 and parts[2] in STAGES else None
            if other is not None and other != stage and other not in MAY_IMPORT[stage]:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_top_of_convert_imports_no_stage_but_at_use() -> None:
    """spec, manifest, discover, ... sit below the stages: only the CLI reaches into them, at call time."""
    wrong = []
    for path in sorted(CONVERT.glob("*.py")):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level and n.module
               and n.module.split(".")[0] in STAGES]
        # The package re-exports the plan's records; check plans what a run would do, without one.
        allowed = {"__init__.py": {"plan"}, "check.py": {"plan"}}
        wrong += [f"{path.name} imports .{n.module}" for n in top
                  if n.module.split(".")[0] not in allowed.get(path.name, set())]
    assert not wrong, "\n".join(wrong)


def test_the_store_layer_imports_nothing_of_convert() -> None:
    wrong = [f"{p.relative_to(ROOT)}" for p in sorted((ROOT / "store").glob("*.py"))
             if "labzarr.convert" in p.read_text() or "from ..convert" in p.read_text()]
    assert not wrong
