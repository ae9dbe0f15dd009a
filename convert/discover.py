"""Discovery: which files a delivery holds, and which item each belongs to.

`walk` is the only I/O (a sorted listing); `discover` is a pure function of that
listing and the spec, so it is printed by `--dry-run` and tested without data.
Invariant: every file under `raw` appears in exactly one `Candidate`.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .errors import UsageError
from .ids import normalize_id
from .spec import ItemsSpec

__all__ = ["Candidate", "FileEntry", "discover", "glob_match", "walk"]


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file under raw: `rel` is its NFC, '/'-separated path relative to raw.

    Two names that are equal after NFC normalisation (one typed on macOS, one on Linux) are one
    name: the NFC-named file (or the first) keeps it, the other keeps its own on-disk spelling as
    `rel` and names the first in `alias_of`.

    `path` is the file's path as the walk found it (under raw as given), a string: a delivery of a million files
    would otherwise hold a `pathlib.Path` per file until it is planned.
    """

    rel: str
    path: str
    size: int
    outside: str | None = None  # where a symlink escaping raw points; such a file is never read
    special: str | None = None  # not a regular file (FIFO, socket, device, symlink loop, dangling symlink): never read
    unreadable: str | None = None  # the OS error listing this folder or stat-ing this file: nothing of it is read
    alias_of: str | None = None  # the file whose name equals this one's after NFC normalisation


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
    """List every file under `raw`, sorted by NFC relative path; symlinks are resolved, not followed out.

    A folder below raw that cannot be listed is one entry (`unreadable`), so the manifest says what was not
    seen; raw itself unlistable is a `UsageError`.
    """
    root = raw.resolve()
    entries: list[FileEntry] = []

    def unlistable(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else raw
        if where == raw:
            raise UsageError(f"{raw}: cannot list the delivery folder: {exc.strerror}",
                             "check the [delivery] raw path and that this user may read it") from exc
        entries.append(FileEntry(_rel(where, raw) + "/", str(where), 0,
                                 unreadable=f"cannot list the folder: {exc.strerror}"))

    for dirpath, dirnames, filenames in os.walk(raw, followlinks=False, onerror=unlistable):
        here = Path(dirpath)
        for name in list(dirnames):
            link = here / name
            if link.is_symlink():
                # A symlinked folder is listed as one entry: inside raw it is walked via its target anyway.
                dirnames.remove(name)
                target = link.resolve()
                if not _inside(target, root):
                    entries.append(FileEntry(_rel(link, raw), str(link), 0, outside=str(target)))
        # A file's rel is its folder's (made once per folder) and its NFC name: "/" never composes with a neighbour.
        prefix = "" if here == raw else _rel(here, raw) + "/"
        entries += [_entry(os.path.join(dirpath, name), prefix + unicodedata.normalize("NFC", name), root)
                    for name in filenames]
    return _dealias(entries, raw)


def _entry(path: str, rel: str, root: Path) -> FileEntry:
    try:
        st = os.lstat(path)  # one call tells a link and sizes a file
    except OSError as exc:
        return FileEntry(rel, path, 0, unreadable=f"cannot stat the file: {exc.strerror}")
    if stat.S_ISLNK(st.st_mode):
        try:
            target = Path(path).resolve(strict=True)
        except FileNotFoundError:
            return FileEntry(rel, path, 0, special=f"dangling symlink to {os.readlink(path)}")
        except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError for a loop, later ones OSError
            return FileEntry(rel, path, 0, special=f"symlink loop ({os.readlink(path)})")
        if not _inside(target, root):
            return FileEntry(rel, path, 0, outside=str(target))
        try:
            st = os.stat(path)
        except OSError as exc:
            return FileEntry(rel, path, 0, unreadable=f"cannot stat the file: {exc.strerror}")
    if not stat.S_ISREG(st.st_mode):
        return FileEntry(rel, path, 0, special=_KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file"))
    return FileEntry(rel, path, st.st_size)


_KINDS = {stat.S_IFIFO: "FIFO (named pipe)", stat.S_IFSOCK: "socket", stat.S_IFBLK: "block device",
          stat.S_IFCHR: "character device", stat.S_IFDIR: "folder"}


def _dealias(entries: list[FileEntry], raw: Path) -> tuple[FileEntry, ...]:
    """Sort by rel; where NFC-equal names collide, the others keep their on-disk spelling and point to the first."""
    groups: dict[str, list[FileEntry]] = {}
    for e in entries:
        groups.setdefault(e.rel, []).append(e)
    out: list[FileEntry] = []
    for rel, group in groups.items():
        # The file whose on-disk name already is NFC keeps the name, else the first by on-disk bytes.
        if len(group) > 1:
            group.sort(key=lambda e: (Path(e.path).relative_to(raw).as_posix() != rel, os.fsencode(e.path)))
        out.append(group[0])
        out += [replace(e, rel=Path(e.path).relative_to(raw).as_posix(), alias_of=rel) for e in group[1:]]
    return tuple(sorted(out, key=lambda e: e.rel))


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
