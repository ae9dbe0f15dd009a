"""Choosing `[items] id_pattern` for a new delivery: candidate patterns tried on its real files (pure).

Each candidate is planned exactly as `convert` would plan it (`discover` then `plan`, with the
probes already taken), so "distinct IDs for distinct files" is judged on items, not on files: a
DICOM series is one item whatever its file names. The best candidate loses fewest items: files
left without an ID (rejected id_unmatched) plus contents merged into another's ID (kept, but
stored as `<id>~n` under one label: `plan/collisions.py`). Then it gives fewest contents a shared
ID, leaves fewest files without an ID, rejects fewest rows before decoding (a pattern that names
every DICOM slice its own item rejects them all as too short), and matches the most workbook IDs;
ties go to the earlier candidate, the default first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from labzarr.readers import Reason

from ..check import planned_rows
from ..discover import FileEntry, discover
from ..plan.build import plan
from ..plan.collisions import IdCollision, find_collisions
from ..probe import Probe
from ..spec import ItemsSpec, Spec

__all__ = ["CANDIDATES", "IdTrial", "Pattern", "best_trial", "try_pattern"]

_ID = ItemsSpec().id_pattern  # the default's ID expression, anchored differently by each variant


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


@dataclass(frozen=True, slots=True)
class IdTrial:
    """What one (pattern, id_normalize) gives on the delivery: its items' IDs, collisions and misses."""

    pattern: Pattern
    normalize: tuple[str, ...]
    ids: frozenset[str]
    collisions: tuple[IdCollision, ...]
    unmatched: int  # files without an ID (id_unmatched), counting a series' files
    rejected: int  # rows rejected before decoding (an ID split that leaves series too short shows here)

    @property
    def lost(self) -> int:
        """Files left without an ID, plus contents beyond the first under each shared ID."""
        return self.unmatched + self.colliding - len(self.collisions)

    @property
    def colliding(self) -> int:
        """Contents that share an ID with another content."""
        return sum(c.contents for c in self.collisions)

    def describe(self) -> str:
        """`22 IDs, 0 collisions, 1 file without an ID`."""
        return (f"{len(self.ids):,} IDs, {len(self.collisions):,} collision(s)"
                + (f" ({self.colliding:,} contents)" if self.collisions else "")
                + f", {self.unmatched:,} file(s) without an ID")


def try_pattern(spec: Spec, pattern: Pattern, normalize: tuple[str, ...], entries: Sequence[FileEntry],
                probes: Mapping[str, Probe]) -> IdTrial:
    """Plan the delivery under `pattern` and `normalize` (nothing decoded) and measure the IDs it gives."""
    items = replace(spec.items, id_pattern=pattern.regex, id_normalize=normalize)
    trial_spec = replace(spec, items=items)
    rows = [p.row for p in planned_rows(plan(trial_spec, discover(entries, items), probes))]
    return IdTrial(pattern=pattern, normalize=normalize,
                   ids=frozenset(r.item_id for r in rows if r.item_id and r.status != "ignored"),
                   collisions=find_collisions(rows),
                   unmatched=sum(r.n_files for r in rows if r.reason is Reason.ID_UNMATCHED),
                   rejected=sum(1 for r in rows if r.status == "rejected" and r.reason is not Reason.ID_UNMATCHED))


def best_trial(trials: Sequence[IdTrial], matches: Sequence[int]) -> int:
    """Index of the best trial (module docstring); `matches[i]`: workbook IDs trial i matches."""
    return min(range(len(trials)),
               key=lambda i: (trials[i].lost, trials[i].colliding, trials[i].unmatched, trials[i].rejected,
                              -matches[i], i))
