"""Choosing `[items] id_pattern` for a new delivery: candidate patterns tried on its real files (pure).

Each candidate is planned exactly as `convert` would plan it (`discover` then `plan`, with the
probes already taken), so "distinct IDs for distinct files" is judged on items, not on files: a
DICOM series is one item whatever its file names. A candidate that gives the files of one DICOM
series different IDs (a pattern that names every slice IM0001, IM0002, ... its own item) is never
chosen while another keeps every series whole: each piece would be rejected as too short, and
"6 IDs, 0 collisions" would look like the best score. Among the rest the best candidate loses
fewest items: files left without an ID (rejected id_unmatched) plus contents merged into
another's ID (kept, but stored as `<id>~n` under one label: `plan/collisions.py`). Then it gives
fewest contents a shared ID, leaves fewest files without an ID, rejects fewest rows before
decoding, and matches the most workbook IDs; ties go to the earlier candidate, the default first.

Besides the fixed candidates (where in the path the ID is), each word the delivery puts before
its numbers (`case` in case_001.nii and case_004/IM0001.dcm) is a candidate of its own: the one
pattern that fits a delivery mixing cases named by file and cases named by folder.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from labzarr.readers import Reason

from ..check import planned_rows
from ..discover import Candidate, FileEntry, discover
from ..plan.build import plan
from ..plan.collisions import IdCollision, find_collisions
from ..plan.series import series_key
from ..probe import Probe
from ..spec import ItemsSpec, Spec

__all__ = ["CANDIDATES", "IdTrial", "Pattern", "SplitSeries", "best_trial", "candidate_patterns", "preferred",
           "try_pattern"]

_ID = ItemsSpec().id_pattern  # the default's ID expression, anchored differently by each variant
_WORD = re.compile(r"(?<![A-Za-z])([A-Za-z]+)[-_ ]?\d")  # a word the default pattern would take an ID from
_WORDS = 4  # word candidates tried: the words found in most files


@dataclass(frozen=True, slots=True)
class Pattern:
    """A candidate `id_pattern` and where in the path it looks, in words."""

    regex: str
    where: str


CANDIDATES: tuple[Pattern, ...] = (
    Pattern(_ID, "first match in the path, the default"),
    Pattern(f"{_ID}(?=[^/]*$)", "in the file name"),
    Pattern(f"^[^/]*?{_ID}[^/]*/", "in the first folder"),
    Pattern(f"(?:^|/)[^/]*?{_ID}[^/]*/[^/]*$", "in the file's own folder"),
)


def candidate_patterns(entries: Sequence[FileEntry]) -> tuple[Pattern, ...]:
    """`CANDIDATES`, then one pattern per word found before a number in most files' paths (module docstring)."""
    files: Counter[str] = Counter()
    spellings: defaultdict[str, set[str]] = defaultdict(set)
    for e in entries:
        found = {m.group(1) for m in _WORD.finditer(e.rel)}
        files.update({w.casefold() for w in found})
        for w in found:
            spellings[w.casefold()].add(w)
    words = sorted(files, key=lambda w: (-files[w], w))[:_WORDS]
    out = []
    for w in words:
        # One spelling is written as found, so the spec reads plainly; several are matched ignoring case.
        (only,) = spellings[w] if len(spellings[w]) == 1 else ("",)
        word = re.escape(only) if only else f"(?i:{re.escape(w)})"
        out.append(Pattern(f"(?<![A-Za-z])(?P<id>{word}[-_ ]?\\d+)", f"'{only or w}' and its number"))
    return (*CANDIDATES, *out)


@dataclass(frozen=True, slots=True)
class SplitSeries:
    """A DICOM series whose files a pattern gives different IDs (or no ID to some): convert plans each ID's
    files as an item of its own."""

    source: str  # the series' folder and number, as convert names it when it is one item
    items: int  # how many items (an ID-less group counting as one) its files fall into


@dataclass(frozen=True, slots=True)
class IdTrial:
    """What one (pattern, id_normalize) gives on the delivery: its items' IDs, collisions and misses."""

    pattern: Pattern
    normalize: tuple[str, ...]
    ids: frozenset[str]
    collisions: tuple[IdCollision, ...]
    unmatched: int  # files without an ID (id_unmatched), counting a series' files
    rejected: int  # rows rejected before decoding (an ID split that leaves series too short shows here)
    split: tuple[SplitSeries, ...] = ()  # DICOM series given more than one ID

    @property
    def lost(self) -> int:
        """Files left without an ID, plus contents beyond the first under each shared ID."""
        return self.unmatched + self.colliding - len(self.collisions)

    @property
    def colliding(self) -> int:
        """Contents that share an ID with another content."""
        return sum(c.contents for c in self.collisions)

    @property
    def split_items(self) -> int:
        """The items the split series fall into; 0 when every series is one item."""
        return sum(s.items for s in self.split)

    def describe(self) -> str:
        """`22 IDs, 0 collisions, 1 file without an ID`, and the series it splits, if any."""
        return (f"{len(self.ids):,} IDs, {len(self.collisions):,} collision(s)"
                + (f" ({self.colliding:,} contents)" if self.collisions else "")
                + f", {self.unmatched:,} file(s) without an ID"
                + (f", {self.splits_what()}" if self.split else ""))

    def splits_what(self) -> str:
        """`splits 1 DICOM series into 4 items (case_004/ (series 5))`."""
        shown = ", ".join(s.source for s in self.split[:3]) + (", ..." if len(self.split) > 3 else "")
        return f"splits {len(self.split):,} DICOM series into {self.split_items:,} items ({shown})"


def try_pattern(spec: Spec, pattern: Pattern, normalize: tuple[str, ...], entries: Sequence[FileEntry],
                probes: Mapping[str, Probe]) -> IdTrial:
    """Plan the delivery under `pattern` and `normalize` (nothing decoded) and measure the IDs it gives."""
    items = replace(spec.items, id_pattern=pattern.regex, id_normalize=normalize)
    trial_spec = replace(spec, items=items)
    found = discover(entries, items)
    rows = [p.row for p in planned_rows(plan(trial_spec, found, probes))]
    return IdTrial(pattern=pattern, normalize=normalize,
                   ids=frozenset(r.item_id for r in rows if r.item_id and r.status != "ignored"),
                   collisions=find_collisions(rows),
                   unmatched=sum(r.n_files for r in rows if r.reason is Reason.ID_UNMATCHED),
                   rejected=sum(1 for r in rows if r.status == "rejected" and r.reason is not Reason.ID_UNMATCHED),
                   split=_split_series(found, probes))


def _split_series(found: Sequence[Candidate], probes: Mapping[str, Probe]) -> tuple[SplitSeries, ...]:
    """The series (grouped as `plan/series.py` groups them, ID aside) whose files carry more than one ID."""
    ids: defaultdict[tuple[str, str], set[str | None]] = defaultdict(set)
    rels: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    numbers: dict[tuple[str, str], int | None] = {}
    for c in found:
        p = probes.get(c.rel)
        if c.excluded_by or p is None or p.dicom is None or not p.dicom.spatial:
            continue
        key = series_key(c.rel, p.dicom)
        ids[key].add(c.item_id)
        rels[key].append(c.rel)
        numbers.setdefault(key, p.dicom.series_number)
    out = []
    for key in sorted(k for k in ids if len(ids[k]) > 1):
        folder = posixpath.commonpath([posixpath.dirname(r) for r in rels[key]])
        number = numbers[key]
        out.append(SplitSeries(f"{folder or '.'}/ (series {number if number is not None else '?'})", len(ids[key])))
    return tuple(sorted(out, key=lambda s: s.source))


# The ranking, best first: (what a trial scores, how to say it scored worse than the chosen one).
_RANKING: tuple[tuple[Callable[[IdTrial, int], int], Callable[[IdTrial], str]], ...] = (
    (lambda t, m: t.split_items, lambda t: f"it {t.splits_what()}"),
    (lambda t, m: t.lost, lambda t: f"it loses {t.lost:,} item(s) (files without an ID, contents under a shared ID)"),
    (lambda t, m: t.colliding, lambda t: f"it gives {t.colliding:,} contents a shared ID"),
    (lambda t, m: t.unmatched, lambda t: f"it leaves {t.unmatched:,} file(s) without an ID"),
    (lambda t, m: t.rejected, lambda t: f"it rejects {t.rejected:,} row(s) before decoding"),
    (lambda t, m: -m, lambda t: "it matches fewer workbook IDs"),
)


def _key(trial: IdTrial, matches: int, index: int) -> tuple[int, ...]:
    return (*(score(trial, matches) for score, _ in _RANKING), index)


def best_trial(trials: Sequence[IdTrial], matches: Sequence[int]) -> int:
    """Index of the best trial (module docstring); `matches[i]`: workbook IDs trial i matches."""
    return min(range(len(trials)), key=lambda i: _key(trials[i], matches[i], i))


def preferred(trials: Sequence[IdTrial], matches: Sequence[int], chosen: int) -> list[tuple[IdTrial, str]]:
    """Why trial `chosen` won: for each measure that decided against some other trial, the best-ranked such
    trial and what it scored worse on, in ranking order (a trial equal on every measure lost on order alone)."""
    best = _key(trials[chosen], matches[chosen], chosen)
    decided: dict[int, tuple[tuple[int, ...], int]] = {}
    for i, t in enumerate(trials):
        if i == chosen:
            continue
        key = _key(t, matches[i], i)
        k = next(k for k in range(len(key)) if key[k] != best[k])
        if k not in decided or key < decided[k][0]:
            decided[k] = (key, i)
    tied = "equal on every measure; the earlier candidate wins"
    return [(trials[i], _RANKING[k][1](trials[i]) if k < len(_RANKING) else tied)
            for k, (_, i) in sorted(decided.items())]
