"""Every fenced block of README.md and docs/*.md is run or checked, so the docs stay true.

- sh, bash and console blocks run as written, in document order, in one scratch project per test module:
  a copy of the Makefile with a `.venv` link to this environment, manifests/demo/ and data/raw/demo, and a
  git repository. The README's walkthrough converts `lab-2026-11` there; the docs after it use that delivery.
  `make` runs with `-o .venv/.stamp-install`, so nothing is installed. A console block's `$ ` commands must
  exit 0 (or the code a trailing `# exit code N` names) and print every line it shows (whitespace aside;
  `...` skips). Only a block marked `<!-- not run: installs; CI runs it -->` is not run, and it may hold only
  `make demo` and `make test`.
- python blocks run with the project's `.venv/bin/python` at the same point of the sequence.
- toml blocks: a complete spec (a [delivery] with name, raw and store) is loaded with `load_spec` in the
  project; a fragment is laid over the demo's spec and loaded, so every key it uses exists and its values are
  allowed. A block after `<!-- file: PATH -->` equals that file of the repository.
- docs/spec.md's key tables name every key the spec accepts, and each default they give is what leaving the
  key out means (the spec loads the same either way); a "required" key is refused when missing.
- Links between the docs point at files and headings that exist; the README stays a guide (at most 250 lines)
  whose first block is `make demo` and `make test`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from labzarr.convert.demo import write_demo
from labzarr.convert.errors import UsageError
from labzarr.convert.spec import load_spec

from .docs_blocks import (
    FILE_MARK,
    LANGS,
    NOT_RUN,
    NOT_RUN_COMMANDS,
    SHELL,
    Block,
    blocks,
    console_commands,
    merged,
    normalised,
    shell_lines,
    slugs,
    to_toml,
)

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
# In the order they run: the docs after the README use the delivery its walkthrough converts.
DOCS = ("README.md", "docs/spec.md", "docs/outputs.md", "docs/training.md", "docs/design.md", "docs/benchmarks.md")
PREAMBLE = f"""set -uo pipefail
make() {{ command make -o .venv/.stamp-install BIN={VENV / 'bin'} "$@"; }}
"""


def _all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(ROOT, doc)]


def test_every_doc_is_covered_and_every_block_has_a_known_language() -> None:
    assert sorted(DOCS) == sorted(["README.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))])
    for b in _all_blocks():
        assert b.lang in LANGS, f"{b.where}: fence language {b.lang!r}; use one of {sorted(LANGS)}"


def test_not_run_blocks_hold_only_the_setup_commands() -> None:
    marked = [b for b in _all_blocks() if b.mark == NOT_RUN]
    assert marked, "the README's setup block is marked as not run"
    for b in marked:
        assert b.lang in SHELL, b.where
        assert set(shell_lines(b)) <= set(NOT_RUN_COMMANDS), f"{b.where}: {shell_lines(b)}"
    for b in _all_blocks():
        assert not b.mark.startswith("<!-- not run") or b.mark == NOT_RUN, f"{b.where}: write {NOT_RUN}"


def test_the_readme_is_a_guide_that_starts_with_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first = blocks(ROOT, "README.md")[0]
    assert first.mark == NOT_RUN and shell_lines(first) == list(NOT_RUN_COMMANDS)
    assert first.line <= 5, "the setup commands come first"
    assert "](docs/report.png)" in text
    for doc in DOCS[1:]:
        assert f"]({doc})" in text, f"the README's 'Where to go next' links {doc}"


def test_links_point_at_files_and_headings_that_exist() -> None:
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / doc).parent / path if path else ROOT / doc
            assert file.exists(), f"{doc}: link to {target}: no such file"
            if anchor:
                assert anchor in slugs(file.read_text()), f"{doc}: link to {target}: no such heading"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch project: the Makefile, a .venv link, the demo's spec and raw folder, a git repository."""
    project = tmp_path_factory.mktemp("docs") / "project"
    (project / "manifests" / "demo").mkdir(parents=True)
    for name in ("Makefile", ".gitignore", "manifests/demo/delivery.toml"):
        shutil.copy(ROOT / name, project / name)
    (project / ".venv").symlink_to(VENV)
    (project / "bench").symlink_to(ROOT / "bench")  # docs/benchmarks.md lists its sections
    write_demo(project / "data" / "raw" / "demo")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project"]):
        subprocess.run(["git", *cmd], cwd=project, check=True, capture_output=True, env=_env())
    return project


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")}
    who = {"GIT_AUTHOR_NAME": "docs", "GIT_AUTHOR_EMAIL": "docs@example.org", "GIT_COMMITTER_NAME": "docs",
           "GIT_COMMITTER_EMAIL": "docs@example.org", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return {**env, **who, "PYTHONWARNINGS": "ignore", "TERM": "dumb"}


@dataclasses.dataclass(frozen=True)
class _Step:
    block: Block
    what: str  # the command, or "python block"
    log: Path
    exit_code: int
    expected: tuple[str, ...]


def _script(doc: str, out: Path) -> tuple[str, list[_Step]]:
    """One bash script running `doc`'s blocks in order, each step's output in its own log; it stops at the
    first step that fails, leaving that step's `.rc` missing or wrong. Consecutive python blocks share one
    interpreter (tests/docs_pyrun.py), each still a step of its own."""
    parts, steps = [PREAMBLE], []
    python: list[str] = []  # SOURCE LOG pairs of the python blocks not yet run

    def step(block: Block, what: str, body: str, exit_code: int = 0, expected: tuple[str, ...] = ()) -> None:
        flush()
        log = out / f"{len(steps):03d}.log"
        steps.append(_Step(block, what, log, exit_code, expected))
        parts.append(f"t0=$EPOCHREALTIME\n{{\n{body}\n}} > {log} 2>&1\nrc=$?\necho $rc > {log}.rc\n"
                     f"echo \"$t0 $EPOCHREALTIME\" > {log}.time\n[ $rc -eq {exit_code} ] || exit 97\n")

    def flush() -> None:
        if python:
            parts.append(f".venv/bin/python {Path(__file__).parent / 'docs_pyrun.py'} {' '.join(python)} || exit 97\n")
            python.clear()

    for b in blocks(ROOT, doc):
        if b.mark == NOT_RUN or b.lang not in SHELL | {"python"}:
            continue
        if b.lang == "python":
            log = out / f"{len(steps):03d}.log"
            source = log.with_suffix(".py")
            source.write_text(b.text)
            steps.append(_Step(b, "python block", log, 0, ()))
            python += [str(source), str(log)]
        elif b.lang == "console":
            for c in console_commands(b):
                step(b, c.text, c.text, c.exit_code, c.expected)
        else:  # a sh block runs whole, stopping at its first failing line
            step(b, "sh block", f"( set -e\n{b.text})")
    flush()
    return "".join(parts), steps


def _failures(steps: list[_Step]) -> list[str]:
    for s in steps:
        shown = s.log.read_text(errors="replace") if s.log.exists() else "(not run)"
        rc = s.log.with_suffix(".log.rc")
        code = int(rc.read_text()) if rc.exists() else None
        if code != s.exit_code:
            return [f"{s.block.where}: `{s.what}` exited {code}, expected {s.exit_code}:\n{shown[-3000:]}"]
        lines = {normalised(line) for line in shown.splitlines()}
        missing = [e for e in s.expected if normalised(e) not in lines]
        if missing:
            return [f"{s.block.where}: `{s.what}` did not print {missing}; it printed:\n{shown[-3000:]}"]
    return []


@pytest.fixture(scope="module")
def ran(project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every doc's shell and python blocks run in order in the project: what failed, by doc."""
    results: dict[str, list[str]] = {}
    for i, doc in enumerate(DOCS):
        out = tmp_path_factory.mktemp(f"doc{i}")
        script, steps = _script(doc, out)
        subprocess.run(["bash", "-c", script], cwd=project, env=_env(), timeout=240, stdin=subprocess.DEVNULL)
        results[doc] = _failures(steps)
    return results


@pytest.mark.parametrize("doc", DOCS)
def test_shell_and_python_blocks_run_as_written(ran: dict[str, list[str]], doc: str) -> None:
    assert not ran[doc], "\n".join(ran[doc])


def _load(project: Path, name: str, text: str) -> None:
    spec = project / "manifests" / name / "delivery.toml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(text)
    try:
        load_spec(spec)
    finally:
        shutil.rmtree(spec.parent)


def test_toml_blocks_are_specs_or_parts_of_one(ran: dict[str, list[str]], project: Path) -> None:
    base = tomllib.loads((project / "manifests" / "demo" / "delivery.toml").read_text())
    tomls = [b for b in _all_blocks() if b.lang == "toml"]
    assert tomls
    for b in tomls:
        if m := FILE_MARK.fullmatch(b.mark):
            assert b.text == (ROOT / m.group(1)).read_text(), f"{b.where}: differs from {m.group(1)}"
        doc = tomllib.loads(b.text)
        delivery = doc.get("delivery", {})
        complete = isinstance(delivery, dict) and {"name", "raw", "store"} <= set(delivery)
        try:
            _load(project, "_doc", b.text if complete else to_toml(merged(base, doc)))
        except UsageError as exc:
            pytest.fail(f"{b.where}: {exc}\n  hint: {exc.hint}")


# ---- docs/spec.md's key tables against the spec loader


def _hint_keys(exc: UsageError) -> list[str]:
    return [k.strip() for k in exc.hint.split("keys: " if "keys: " in exc.hint else "sections: ")[1].split(",")]


def _spec_tables() -> dict[str, dict[str, str]]:
    """{section: {key: default cell}} from docs/spec.md's `### [section]` tables."""
    tables: dict[str, dict[str, str]] = {}
    section = None
    for line in (ROOT / "docs" / "spec.md").read_text().splitlines():
        if m := re.fullmatch(r"### \[(\w+)\]", line):
            section = m.group(1)
            tables[section] = {}
        elif line.startswith("## "):
            section = None
        elif section and (m := re.match(r"\| `(\w+)` \| (.*?) \|", line)):
            tables[section][m.group(1)] = m.group(2)
    return tables


class _Minimal:
    """The smallest spec that lets a section's keys be tried, in a folder of its own."""

    def __init__(self, folder: Path, section: str) -> None:
        (folder / "raw").mkdir(parents=True, exist_ok=True)
        (folder / "raw" / "labels.xlsx").touch()  # the spec checks only that the workbook is a file inside raw
        self.path = folder / "delivery.toml"
        self.tables: dict[str, list[str]] = {"delivery": ['name = "d"', 'raw = "raw"', 'store = "s.zarr"']}
        if section == "labels":
            self.tables["labels"] = ['workbook = "labels.xlsx"']
        if section == "masks":
            self.tables["items"] = ['roles = { image = "*_img*", mask = "*_seg*" }']
        if section == "splits":
            self.tables["splits"] = ["train = 1"]  # a [splits] needs its fractions or folds

    def load(self, section: str = "", line: str = "", *, drop: str = "") -> object:
        tables = {name: [entry for entry in lines if not (name == section and entry.startswith(f"{drop} ="))]
                  for name, lines in self.tables.items()}
        if line:
            tables.setdefault(section, []).append(line)
        self.path.write_text("".join(f"[{n}]\n" + "".join(f"{e}\n" for e in es) for n, es in tables.items()))
        return dataclasses.replace(load_spec(self.path), sha256="")


# "every role in `roles`", and a split's fraction (absent: no such split): no TOML value says them
_NOT_A_LITERAL = {("items", "required_roles"), ("splits", "train"), ("splits", "val"), ("splits", "test")}


def test_spec_md_names_every_key_and_its_default(tmp_path: Path) -> None:
    tables = _spec_tables()
    minimal = _Minimal(tmp_path / "sections", "")
    with pytest.raises(UsageError) as unknown:
        minimal.path.write_text("[delivery]\n[zzz_not_a_section]\n")
        load_spec(minimal.path)
    assert sorted(tables) == sorted(_hint_keys(unknown.value)), "a `### [section]` table per section"
    for section, rows in tables.items():
        spec = _Minimal(tmp_path / section, section)
        with pytest.raises(UsageError) as exc:
            spec.load(section, "zzz_not_a_key = 1")
        assert sorted(rows) == sorted(_hint_keys(exc.value)), f"docs/spec.md [{section}]: every key, no other"
        plain = spec.load()
        for key, cell in rows.items():
            if cell == "required":
                with pytest.raises(UsageError, match=rf"\[{section}\] {key} is missing"):
                    spec.load(section, drop=key)
            elif m := re.match(r"`([^`]+)`", cell):
                assert spec.load(section, f"{key} = {m.group(1)}") == plain, (
                    f"docs/spec.md [{section}] {key}: the default {m.group(1)} is not what leaving it out gives")
            else:
                assert (section, key) in _NOT_A_LITERAL, f"docs/spec.md [{section}] {key}: give the default as `toml`"
