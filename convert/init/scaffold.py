"""`labzarr init NAME --raw PATH`: a first delivery.toml for a delivery, measured on its files.

The only I/O of init: walk and probe raw (as `convert` does, in this process), read the
workbooks under it, write `manifests/NAME/delivery.toml` under the project root. What goes
in the file is decided by the pure modules beside this one (`ids`, `workbook`, `template`),
and the file is loaded with `load_spec` before it replaces anything: init never writes a
spec that `convert` would refuse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labzarr.readers import READERS
from labzarr.store import Folder

from ..discover import discover, walk
from ..errors import UsageError
from ..manifest import atomic_write
from ..spec import DELIVERY_NAME, DeliverySpec, ItemsSpec, Spec, StoreSpec, ValidateSpec, load_spec
from ..survey import format_counts, probe
from .ids import IdTrial, best_trial, candidate_patterns, preferred, try_pattern
from .template import LabelsChoice, render
from .workbook import IdColumn, LabelColumn, Workbook, best_column, label_columns, survey_workbooks

__all__ = ["InitResult", "init_delivery"]

# id_normalize variants tried: the default, and with leading zeros dropped (`case_5` in the workbook, case_005 on disk)
_NORMALIZE: tuple[tuple[str, ...], ...] = (ItemsSpec().id_normalize, (*ItemsSpec().id_normalize, "strip_leading_zeros"))
_VALUES_SHOWN = 6  # distinct values quoted per suggested label column
_VALUE_CHARS = 16  # ... each cut to this length


@dataclass(frozen=True, slots=True)
class InitResult:
    """What init wrote and what it measured on the way."""

    path: Path
    formats: dict[str, int]
    trials: tuple[IdTrial, ...]
    chosen: IdTrial
    why: tuple[str, ...]  # why `chosen` beat the others, in words: a line per measure that decided
    workbooks: tuple[Workbook, ...]
    labels: tuple[Workbook, IdColumn, int] | None  # the chosen workbook, ID column and item IDs it matches

    def describe(self, shown: Path) -> str:
        """What to tell the user; `shown` is the spec's path as they would type it."""
        files = sum(self.formats.values())
        lines = [f"wrote {shown}",
                 f"  files:       {files:,} under raw: " + ", ".join(f"{k} {n:,}" for k, n in self.formats.items()),
                 f"  id_pattern:  '{self.chosen.pattern.regex}' ({self.chosen.pattern.where}), id_normalize "
                 f"{list(self.chosen.normalize)}: {self.chosen.describe()}; tried {len(self.trials)} (see the "
                 "comments in the file)",
                 *(f"    {line}" for line in self.why)]
        for c in self.chosen.collisions[:5]:
            lines.append(f"    warning: ID {c.item_id!r} is given to {c.contents} distinct contents: "
                         + ", ".join(r.source for r in c.rows[:5]) + (" ..." if len(c.rows) > 5 else ""))
        if self.labels is not None:
            book, col, hits = self.labels
            lines.append(f"  labels:      {book.rel} sheet {col.sheet_index} {col.sheet!r}, header row "
                         f"{col.header_row}, IDs in column {col.letter}: {hits:,} of {len(col.ids):,} IDs match an "
                         "item; pick the label columns in [labels.columns]")
        elif self.workbooks:
            lines.append(f"  labels:      {len(self.workbooks)} workbook(s), no column matches an item ID; "
                         "[labels] written commented out")
        else:
            lines.append("  labels:      no .xlsx under raw; [labels] written commented out")
        lines.append(f"next: review it, then `labzarr check {shown}`")
        return "\n".join(lines)


def init_delivery(name: str, raw: Path, *, root: Path, force: bool = False) -> InitResult:
    """Write `root/manifests/<name>/delivery.toml` for the delivery at `raw`. Raises `UsageError`."""
    if not DELIVERY_NAME.fullmatch(name):
        raise UsageError(f"init {name!r}: a delivery name uses letters, digits, '.', '_' and '-'",
                         "pick a name such as lab-2026-11 (it names the manifests/ folder and the store)")
    if not raw.is_dir():
        raise UsageError(f"--raw {raw}: {'folder not found' if not raw.exists() else 'not a folder'}",
                         "pass the folder the delivery was copied to, e.g. --raw data/raw/" + name)
    root = root.absolute()
    target = root / "manifests" / name / "delivery.toml"
    if target.exists() and not force:
        raise UsageError(f"{target}: a spec for {name!r} exists already",
                         "pass --force (make init ... FORCE=1) to overwrite it (its manifest.csv and summary.json "
                         "stay), or pick another NAME")
    raw = Path(os.path.normpath(raw.absolute()))
    store = f"data/stores/{name}.zarr"
    base = Spec(path=target, sha256="", root=root, delivery=DeliverySpec(name, raw, Folder(root / store)),
                items=ItemsSpec(), store=StoreSpec(), validate=ValidateSpec())
    entries = walk(raw)
    candidates = discover(entries, base.items)
    probes = probe(candidates, READERS)
    books = survey_workbooks(candidates)
    trials = [try_pattern(base, p, n, entries, probes) for p in candidate_patterns(entries) for n in _NORMALIZE]
    matches = [found[2] if (found := best_column(books, t.ids, t.normalize)) else 0 for t in trials]
    best = best_trial(trials, matches)
    chosen, why = trials[best], _why(trials[best], preferred(trials, matches, best))
    labels = best_column(books, chosen.ids, chosen.normalize)
    text = render(name=name, raw=_relative(raw, root), store=store, id_pattern=chosen.pattern.regex,
                  id_normalize=chosen.normalize, labels=_labels_choice(books, labels),
                  preamble=_preamble(name, _relative(raw, root), format_counts(candidates, probes)),
                  items_notes=_id_notes(trials, chosen, len(entries), why))
    _write_checked(target, text, root)
    return InitResult(path=target, formats=format_counts(candidates, probes), trials=tuple(trials), chosen=chosen,
                      why=why, workbooks=tuple(books), labels=labels)


def _relative(path: Path, root: Path) -> str:
    """`path` as the spec writes it: relative to the project root when below it, else absolute."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()


def _write_checked(target: Path, text: str, root: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.init")
    staged.write_text(text, encoding="utf-8")
    try:
        load_spec(staged, root=root)  # a spec init wrote and load_spec refuses is a bug: its traceback says where
        atomic_write(target, text.encode("utf-8"))
    finally:
        staged.unlink()


def _preamble(name: str, raw: str, formats: dict[str, int]) -> list[str]:
    return [f"Delivery {name!r}, written by `labzarr init` from the files under {raw}.",
            "Every key is written with its default; review it, then run `labzarr check` on this file.",
            f"Files found ({sum(formats.values()):,}), by content (not by name): "
            + ", ".join(f"{k} {n:,}" for k, n in formats.items()) + "."]


def _name(t: IdTrial) -> str:
    return t.pattern.where + (" + strip_leading_zeros" if "strip_leading_zeros" in t.normalize else "")


def _why(chosen: IdTrial, beaten: Sequence[tuple[IdTrial, str]]) -> tuple[str, ...]:
    """`chosen: <pattern>`, then `  preferred to <pattern>: it splits 1 DICOM series ...`, a line per measure."""
    head = f"chosen: {_name(chosen)}" + (f" (WARNING: it {chosen.splits_what()}, as every candidate does)"
                                         if chosen.split else "")
    return (head, *(f"  preferred to {_name(t)}: {reason}" for t, reason in beaten))


def _id_notes(trials: Sequence[IdTrial], chosen: IdTrial, n_files: int, why: Sequence[str]) -> list[str]:
    notes = [f"id_pattern and id_normalize: tried on the {n_files:,} files under raw, planned as convert plans them:"]
    for t in trials:
        mark = "  <- chosen" if t is chosen else ""
        notes.append(f"  {_name(t)}: {t.describe()}{mark}")
    notes += why
    if chosen.collisions:
        notes.append(f"WARNING: {len(chosen.collisions)} ID(s) given to distinct contents (stored as <id>~1, <id>~2, "
                     "one label between them):")
        notes += [f"  {c.item_id!r}: " + ", ".join(r.source for r in c.rows[:8]) + (" ..." if len(c.rows) > 8 else "")
                  for c in chosen.collisions[:10]]
    return notes


def _labels_choice(books: Sequence[Workbook], found: tuple[Workbook, IdColumn, int] | None) -> LabelsChoice:
    unreadable = [f"{b.rel}: not readable: {b.problem}" for b in books if b.problem]
    if found is None:
        why = "no .xlsx under raw" if not books else "no column of the workbook(s) under raw matches an item ID"
        return LabelsChoice(notes=(f"Labels: {why}; to join labels, fill in and uncomment:", *unreadable))
    book, col, hits = found
    others = [b.rel for b in books if b is not book and not b.problem]
    notes = [f"Labels: {book.rel} sheet {col.sheet_index} of {len(book.sheets)} ({', '.join(map(repr, book.sheets))}):",
             f"  IDs in column {col.letter} ({col.header!r}) below header row {col.header_row} (found by "
             f'header_row = "auto"); {hits:,} of their {len(col.ids):,} IDs match an item',
             *([f"  other workbooks (not used): {', '.join(others)}"] if others else []), *unreadable]
    return LabelsChoice(workbook=Path(book.rel).as_posix(), sheet=col.sheet, id_column=col.letter, notes=tuple(notes),
                        columns=tuple(_suggestion(c, len(col.ids)) for c in label_columns(book, col)))


def _suggestion(c: LabelColumn, rows: int) -> tuple[str, str, str]:
    name = "".join(ch if ch.isalnum() else "_" for ch in c.header.strip().lower()).strip("_") or f"column_{c.letter}"
    if not (name[0].isalpha() or name[0] == "_") or not name.isascii():
        name = f"column_{c.letter}"
    values = ", ".join(v if len(v) <= _VALUE_CHARS else v[:_VALUE_CHARS - 1] + "…" for v in c.values[:_VALUES_SHOWN])
    values += ", ..." if len(c.values) > _VALUES_SHOWN else ""
    return name, c.letter, f"{c.header!r}: filled in {c.filled} of {rows} ID rows; {len(c.values)} values: {values}"
