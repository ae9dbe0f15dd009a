"""Fenced blocks of the Markdown docs, parsed for tests/test_docs.py: what each block is and what it runs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

SHELL = frozenset({"sh", "bash", "console"})
LANGS = SHELL | {"python", "toml", "text"}
# A block of setup commands the doc test cannot run (they install, or run this very suite): marked so, and
# holding nothing else.
NOT_RUN = "<!-- not run: installs; CI runs it -->"
NOT_RUN_COMMANDS = ("make demo", "make test")
FILE_MARK = re.compile(r"<!-- file: (\S+) -->")
_FENCE = re.compile(r"^```(\S*)\s*$")
_EXIT = re.compile(r"#\s*exit code (\d+)\s*$")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mark: str  # the line just before the fence when it is an HTML comment, else ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One `$ ` command of a console block, its continuation lines joined, with the output it shows."""

    text: str
    expected: tuple[str, ...]
    exit_code: int


def blocks(root: Path, doc: str) -> list[Block]:
    """Every fenced block of `doc`, in order."""
    lines = (root / doc).read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{doc}:{i + 1}: fence never closed"
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = before if before.startswith("<!--") else ""
        out.append(Block(doc, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n", mark))
        i = end + 1
    return out


def console_commands(block: Block) -> list[Command]:
    """A console block as commands (`$ ` lines, `\\` continuations joined) and the lines shown after each."""
    cmds: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    assert lines and lines[0].startswith("$ "), f"{block.where}: a console block starts with a `$ ` command"
    while i < len(lines):
        text = [lines[i][2:]]
        while text[-1].endswith("\\"):
            i += 1
            text.append(lines[i])
        i += 1
        shown: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            if lines[i].strip() and lines[i].strip() != "...":
                shown.append(lines[i])
            i += 1
        m = _EXIT.search(text[-1])
        cmds.append(Command("\n".join(text), tuple(shown), int(m.group(1)) if m else 0))
    return cmds


def shell_lines(block: Block) -> list[str]:
    """The commands of a sh block or console block, comments dropped (for the not-run check)."""
    if block.lang == "console":
        return [c.text for c in console_commands(block)]
    return [line.split("#")[0].strip() for line in block.text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def normalised(line: str) -> str:
    return " ".join(line.split())


def slugs(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown text."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def to_toml(doc: dict[str, object]) -> str:
    """A TOML text for a parsed spec: tables of plain values (what tomllib gives for a delivery.toml)."""
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"no TOML for {v!r}")

    return "".join(f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items()) + "\n"
                   for name, table in doc.items() if isinstance(table, dict))


def merged(base: dict[str, object], fragment: dict[str, object]) -> dict[str, object]:
    """`fragment`'s tables laid over `base`'s, key by key."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for name, table in fragment.items():
        assert isinstance(table, dict), f"[{name}] must be a table"
        out.setdefault(name, {})
        assert isinstance(out[name], dict)
        out[name].update(table)  # type: ignore[union-attr]
    return out
