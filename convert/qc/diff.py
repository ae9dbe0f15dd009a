"""`labzarr diff`: what changed between two manifests, short enough for a commit message.

Rows are matched by `source` (the file or series folder relative to raw): an
item's ID, status, labels and content hash can all change between deliveries,
its path is what a person recognises. Each changed item is listed once, in the
first section that applies (status or reason, then label, then split, then
content), with its other changes named on the same line.
"""

from __future__ import annotations

import csv
import io
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import UsageError

__all__ = ["Change", "ManifestDiff", "committed", "diff_manifests", "load_manifest_rows"]

_REQUIRED = ("item_id", "status", "reason", "detail", "source", "sha256")
_STATUSES = ("ok", "rejected", "ignored")


@dataclass(frozen=True, slots=True)
class Change:
    """One item's change: `old`/`new` are display strings; `also` names its other changes."""

    source: str
    item_id: str
    old: str
    new: str
    also: tuple[str, ...] = ()
    detail: str = ""  # the new row's detail, for a newly rejected item


@dataclass(frozen=True, slots=True)
class ManifestDiff:
    """The differences between two manifests, each section sorted by source."""

    old_name: str
    new_name: str
    old_counts: Mapping[str, int]
    new_counts: Mapping[str, int]
    added: tuple[Change, ...]
    removed: tuple[Change, ...]
    status: tuple[Change, ...]
    labels: tuple[Change, ...]
    content: tuple[Change, ...]
    # Rows in none of the sections above whose other cells changed (a reworded detail, a new item_id):
    # (column, rows) pairs, and how many rows in all.
    other: tuple[tuple[str, int], ...] = ()
    other_rows: int = 0
    splits: tuple[Change, ...] = ()  # a [splits] split or fold reassigned

    @property
    def empty(self) -> bool:
        """True when the two manifests hold the same rows (up to `index`)."""
        return not (self.added or self.removed or self.status or self.labels or self.splits or self.content
                    or self.other_rows)

    def describe(self, *, limit: int = 50) -> str:
        """The readable report; each section shows at most `limit` items (0: all)."""
        o, n = self.old_counts, self.new_counts
        lines = [subject(self.old_name, self.new_name),
                 f"items {sum(o.values()):,} -> {sum(n.values()):,}: "
                 + ", ".join(f"{s} {o.get(s, 0):,} -> {n.get(s, 0):,}" for s in _STATUSES)]
        if self.empty:
            return "\n".join([*lines, "", "no differences"])
        other = (f"other cells changed in {self.other_rows:,} rows: "
                 + ", ".join(f"{col} ({n:,})" for col, n in self.other) if self.other_rows else "")
        if not (self.added or self.removed or self.status or self.labels or self.splits or self.content):
            return "\n".join([*lines, "", "no item added, removed, or changed in status, reason, labels, split or "
                              "content",
                              other])
        sections = [("added", "+", self.added), ("removed", "-", self.removed),
                    ("status or reason changed", "~", self.status), ("label changed", "~", self.labels),
                    ("split changed", "~", self.splits), ("content changed", "~", self.content)]
        for title, mark, changes in sections:
            if not changes:
                continue
            lines += ["", f"{title} ({len(changes):,})"]
            shown = changes if limit == 0 else changes[:limit]
            for ch in shown:
                what = ch.new if mark == "+" else ch.old if mark == "-" else f"{ch.old} -> {ch.new}"
                also = f"; {', '.join(ch.also)}" if ch.also else ""
                lines.append(f"  {mark} {ch.source} [{ch.item_id or '-'}]: {what}{also}")
                if ch.detail:
                    lines.append(f"      {ch.detail}")
            if len(shown) < len(changes):
                lines.append(f"  ... and {len(changes) - len(shown):,} more (--limit 0 shows all)")
        if other:
            lines += ["", other]
        return "\n".join(lines)


def subject(old_name: str, new_name: str) -> str:
    """The report's first line, led by the delivery's name (the folder of a `manifests/<delivery>/manifest.csv`):
    the subject of a commit message written from `make -s diff`."""
    path = PurePosixPath(new_name.rsplit(":", 1)[-1])
    lead = f"{path.parent.name}: " if path.name == "manifest.csv" and path.parent.name else ""
    return f"{lead}manifest diff: {old_name} -> {new_name}"


def _state(row: Mapping[str, str]) -> str:
    return f"{row['status']} {row['reason']}".strip()


def _hash_changes(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The content hash columns that differ: `sha256`, and each role's `role.<name>.sha256` in a sample."""
    cols = [c for c in sorted(old.keys() | new.keys()) if c == "sha256" or c.endswith(".sha256")]
    return [c for c in cols if old.get(c, "") != new.get(c, "")]


def _split(row: Mapping[str, str]) -> str:
    """The row's split as a person reads it: `train`, `fold 2`, `test`; "" without [splits]."""
    return f"fold {row['fold']}" if row.get("fold") else row.get("split", "")


def _labels(row: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in row.items() if k.startswith("label.") and v}


def _label_changes(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[str, str]:
    a, b = _labels(old), _labels(new)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return (", ".join(f"{k}={a.get(k, '')!r}" for k in keys), ", ".join(f"{k}={b.get(k, '')!r}" for k in keys))


def diff_manifests(old: Sequence[Mapping[str, str]], new: Sequence[Mapping[str, str]], *,
                   old_name: str = "old", new_name: str = "new") -> ManifestDiff:
    """Compare two manifests given as rows of cells (as `read_manifest` returns them); no I/O."""
    a = {r["source"]: r for r in old}
    b = {r["source"]: r for r in new}
    status, labels, splits, content = [], [], [], []
    other: Counter[str] = Counter()
    other_rows = 0
    for src in sorted(a.keys() & b.keys()):
        r0, r1 = a[src], b[src]
        changed_labels = _label_changes(r0, r1)
        hashes = _hash_changes(r0, r1)
        notes = {
            "content changed": bool(hashes),
            "classes changed": r0.get("classes", "") != r1.get("classes", ""),
            f"labels {changed_labels[0] or '-'} -> {changed_labels[1] or '-'}":
                bool(changed_labels[0] or changed_labels[1]),
            f"split {_split(r0) or '-'} -> {_split(r1) or '-'}": _split(r0) != _split(r1),
            f"id {r0['item_id'] or '-'} -> {r1['item_id'] or '-'}": r0["item_id"] != r1["item_id"],
        }
        item_id = r1["item_id"] or r0["item_id"]
        if _state(r0) != _state(r1):
            detail = r1["detail"] if r1["status"] == "rejected" else ""
            status.append(Change(src, item_id, _state(r0), _state(r1), tuple(k for k, v in notes.items() if v), detail))
        elif changed_labels[0] or changed_labels[1]:
            also = tuple(k for k, v in notes.items() if v and not k.startswith("labels"))
            labels.append(Change(src, item_id, changed_labels[0] or "-", changed_labels[1] or "-", also))
        elif _split(r0) != _split(r1):
            also = tuple(k for k, v in notes.items() if v and not k.startswith("split"))
            splits.append(Change(src, item_id, _split(r0) or "-", _split(r1) or "-", also))
        elif hashes:
            also = tuple(k for k, v in notes.items() if v and (k.startswith("id") or k.startswith("classes")))
            content.append(Change(src, item_id, "; ".join(f"{c} {r0.get(c, '')[:12] or '-'}" for c in hashes),
                                  "; ".join(r1.get(c, "")[:12] or "-" for c in hashes), also))
        else:
            cols = sorted(c for c in r0.keys() | r1.keys()
                          if c != "index" and not c.startswith("label.") and r0.get(c, "") != r1.get(c, ""))
            other.update(cols)
            other_rows += bool(cols)
    return ManifestDiff(
        old_name=old_name, new_name=new_name,
        old_counts=dict(Counter(r["status"] for r in old)), new_counts=dict(Counter(r["status"] for r in new)),
        added=tuple(Change(s, b[s]["item_id"], "", _state(b[s])) for s in sorted(b.keys() - a.keys())),
        removed=tuple(Change(s, a[s]["item_id"], _state(a[s]), "") for s in sorted(a.keys() - b.keys())),
        status=tuple(status), labels=tuple(labels), content=tuple(content),
        other=tuple(sorted(other.items(), key=lambda kv: (-kv[1], kv[0]))), other_rows=other_rows,
        splits=tuple(splits),
    )


def load_manifest_rows(ref: str, *, cwd: Path) -> list[dict[str, str]]:
    """Read a manifest from a path (relative to `cwd`) or from git as `git:REV:PATH`; raises UsageError."""
    if ref.startswith("git:"):
        parts = _git_ref(ref)
        if parts is None:
            raise UsageError(f"{ref}: expected git:REV:PATH", "e.g. git:HEAD:manifests/demo/manifest.csv")
        text = _git_show(*parts, cwd=cwd, ref=ref)
    else:
        p = Path(ref) if Path(ref).is_absolute() else cwd / ref
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise UsageError(f"{ref}: no such manifest", "run `labzarr convert SPEC` first, or fix the path") from exc
        except IsADirectoryError as exc:
            raise UsageError(f"{ref}: is a folder", f"pass {Path(ref) / 'manifest.csv'}") from exc
        except UnicodeDecodeError as exc:
            raise UsageError(f"{ref}: not a text file ({exc.reason})",
                             "pass a manifest.csv written by labzarr") from exc
    return _parse(text, ref)


def committed(ref: str, *, cwd: Path) -> bool | None:
    """For `git:REV:PATH`: whether PATH exists at REV (False: not committed there yet); None for anything else,
    a plain path or a REV git cannot resolve, which `load_manifest_rows` reports."""
    parts = _git_ref(ref)
    if parts is None:
        return None
    rev, path = parts
    try:
        known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=cwd,
                               capture_output=True, timeout=60)
        if known.returncode != 0:
            return None
        there = subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], cwd=cwd, capture_output=True, timeout=60)
    except FileNotFoundError:
        return None  # no git: load_manifest_rows says so
    return there.returncode == 0


def _git_ref(ref: str) -> tuple[str, str] | None:
    """(REV, PATH) of `git:REV:PATH`; None for anything else."""
    rev, sep, path = ref.removeprefix("git:").partition(":")
    return (rev, path) if ref.startswith("git:") and sep and rev and path else None


def _git_show(rev: str, path: str, *, cwd: Path, ref: str) -> str:
    try:
        out = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=cwd, capture_output=True, timeout=60)
    except FileNotFoundError as exc:
        raise UsageError(f"{ref}: git is not installed", "install git, or pass two manifest paths") from exc
    if out.returncode != 0:
        why = (out.stderr.decode("utf-8", "replace").strip().splitlines() or ["git show failed"])[0]
        raise UsageError(f"{ref}: {why.removeprefix('fatal: ')}",
                         "commit the manifest first (a new delivery has no committed one), or pass a path; "
                         "PATH is from the repository root")
    try:
        return out.stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{ref}: not a text file ({exc.reason})", "pass a manifest.csv written by labzarr") from exc


def _parse(text: str, ref: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in _REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise UsageError(f"{ref}: not a labzarr manifest (no column {missing[0]!r})",
                         "pass the manifest.csv that `labzarr convert` wrote beside the spec")
    rows = [dict(r) for r in reader]
    # A manifest written before sources were unique could give two series one source (`./ (series 1)`):
    # number them in manifest order.
    total = Counter(r["source"] for r in rows)
    seen: Counter[str] = Counter()
    for r in rows:
        if total[r["source"]] > 1:
            seen[r["source"]] += 1
            r["source"] = f"{r['source']} #{seen[r['source']]}"
    return rows
