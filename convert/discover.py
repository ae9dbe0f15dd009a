"""Discovery: which files a delivery holds, and which item each belongs to.

`walk` is the only I/O (a sorted listing); `discover` is a pure function of that
listing and the spec, so it is printed by `--dry-run` and tested without data.
Invariant: every file under `raw` appears in exactly one `Candidate`.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .ids import normalize_id
from .spec import ItemsSpec

__all__ = ["Candidate", "FileEntry", "discover", "glob_match", "walk"]


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file under raw: `rel` is its NFC, '/'-separated path relative to raw."""

    rel: str
    path: Path
    size: int
    outside: str | None = None  # where a symlink escaping raw points; such a file is never read


@dataclass(frozen=True, slots=True)
class Candidate:
    """A discovered file and its fate so far: an ID, or why it has none."""

    entry: FileEntry
    item_id: str | None
    excluded_by: str | None = None  # the include/exclude rule that leaves it out

    @property
    def rel(self) -> str:
        return self.entry.rel


def walk(raw: Path) -> tuple[FileEntry, ...]:
    """List every file under `raw`, sorted by NFC relative path; symlinks are resolved, not followed out."""
    root = raw.resolve()
    entries: list[FileEntry] = []
    for dirpath, dirnames, filenames in os.walk(raw, followlinks=False):
        here = Path(dirpath)
        for name in list(dirnames):
            link = here / name
            if link.is_symlink():
                # A symlinked folder is listed as one entry: inside raw it is walked via its target anyway.
                dirnames.remove(name)
                target = link.resolve()
                if not _inside(target, root):
                    entries.append(FileEntry(_rel(link, raw), link, 0, outside=str(target)))
        for name in filenames:
            path = here / name
            target = path.resolve()
            if path.is_symlink() and not _inside(target, root):
                entries.append(FileEntry(_rel(path, raw), path, 0, outside=str(target)))
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # a dangling symlink inside raw
                entries.append(FileEntry(_rel(path, raw), path, 0, outside=f"{target} (missing)"))
                continue
            entries.append(FileEntry(_rel(path, raw), path, size))
    return tuple(sorted(entries, key=lambda e: e.rel))


def _inside(target: Path, root: Path) -> bool:
    return target == root or root in target.parents


def _rel(path: Path, raw: Path) -> str:
    return unicodedata.normalize("NFC", path.relative_to(raw).as_posix())


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(rel: str, pattern: str) -> bool:
    """Match a relative path against a glob where `**` spans folders and `*` does not."""
    return _glob_regex(pattern).match(rel) is not None


def discover(entries: Iterable[FileEntry], items: ItemsSpec) -> tuple[Candidate, ...]:
    """Give each file its item ID (or the rule that excludes it); pure, order preserved."""
    pattern = re.compile(items.id_pattern)
    return tuple(_candidate(e, items, pattern) for e in entries)


def _candidate(entry: FileEntry, items: ItemsSpec, pattern: re.Pattern[str]) -> Candidate:
    rule = _excluded_by(entry.rel, items.include, items.exclude)
    if rule is not None:
        return Candidate(entry, None, excluded_by=rule)
    m = pattern.search(entry.rel)
    item_id = normalize_id(m.group("id"), items.id_normalize) if m and m.group("id") else None
    return Candidate(entry, item_id or None)


def _excluded_by(rel: str, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    if not any(glob_match(rel, p) for p in include):
        return f"matches no [items] include pattern ({', '.join(include)})"
    hit = next((p for p in exclude if glob_match(rel, p)), None)
    return f"[items] exclude {hit!r}" if hit else None
