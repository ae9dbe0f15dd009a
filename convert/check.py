"""`labzarr check`: what a conversion would do with a delivery, before anything is decoded.

The items with their files per ID, ID collisions (one ID on distinct contents), the label
join (matches, workbook IDs matching no item, unlabelled items), with `[splits]` each item's
split and the leakage audit (by file sha256 and what the store already holds), and the
absolute paths a run reads and writes. `check_delivery` is the I/O (walk, probe in this process, read the
workbook, read what the store records); the report is frozen data and `describe` is pure.

A row here is what the plan knows: an item to convert is `ok` until decoding says
otherwise (a truncated file is found only then), a decided row is final.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from labzarr.readers import readers_with

from .console import collision_lines, split_lines
from .discover import discover, walk
from .labels import join_labels, load_labels, workbook_rel
from .manifest import Row
from .plan.build import Plan, plan
from .plan.collisions import IdCollision, collision_summary, find_collisions
from .plan.records import settings_fingerprint
from .reach import check_reachable
from .spec import Spec, load_spec
from .survey import format_counts, probe

__all__ = ["CheckReport", "Planned", "check_delivery", "planned_rows"]

Fate = Literal["convert", "unchanged", "decided"]


@dataclass(frozen=True, slots=True)
class Planned:
    """One row as planned, and how it got there: to `convert`, `unchanged` from the store, or `decided` now."""

    row: Row
    fate: Fate


def planned_rows(the_plan: Plan) -> list[Planned]:
    """Every item and file of `the_plan` as a row, in manifest order (pure)."""
    out = [Planned(replace(t.base_row(), array=t.array), "convert") for t in the_plan.tasks]
    out += [Planned(Row(item_id=i.item_id, status="ok", source=i.source, kind=i.kind, sha256=i.sha256,
                        array=s.stack.array, slot=i.slot), "convert")
            for s in the_plan.shards for i in s.items]
    out += [Planned(s.base_row(), "convert") for s in the_plan.samples]
    out += [Planned(r, "unchanged") for r in the_plan.unchanged]
    out += [Planned(r, "decided") for r in the_plan.rows]
    return sorted(out, key=lambda p: (p.row.item_id, p.row.source))


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What `check` found: the plan a run would start from, `planned` its rows in manifest order with labels
    joined, `labels` the summary's label part."""

    spec: Spec
    plan: Plan
    formats: Mapping[str, int]
    headline: str  # the plan's counts, as `Plan.describe` starts
    planned: tuple[Planned, ...]
    collisions: tuple[IdCollision, ...]
    labels: Mapping[str, Any] = field(default_factory=dict)
    splits: Mapping[str, Any] = field(default_factory=dict)  # the summary's `splits`, with [splits]

    def describe(self, *, limit: int = 200) -> str:
        """The report for a terminal; `limit` rows listed (0 for all)."""
        files = sum(self.formats.values())
        lines = [f"check: {self.spec.delivery.name} (nothing decoded)", *self._paths(), "",
                 f"files: {files:,} under raw: " + ", ".join(f"{k} {n:,}" for k, n in self.formats.items()),
                 *(self._dicom_lines() if self.formats.get("dicom") else []),
                 f"plan:  {self.headline}", ""]
        ids = {p.row.item_id for p in self.planned if p.row.item_id}
        lines.append(f"items: {len(ids):,} IDs in {len(self.planned):,} rows "
                     "(convert: decoded by the run; unchanged: kept from the store; rejected/ignored: decided now)")
        if any(p.fate == "convert" for p in self.planned):
            # A reason found here (no_label, say) is what the headers show; decoding may find a worse one first.
            lines.append("  decoding may reject more, or for another reason than shown here: a truncated, corrupt "
                         "or too large file is found only when it is read")
        shown = self.planned if limit <= 0 else self.planned[:limit]
        lines += [_line(p) for p in shown]
        if len(shown) < len(self.planned):
            lines.append(f"  ... {len(self.planned) - len(shown):,} more rows (--limit 0 lists all)")
        if self.collisions:
            lines += ["", *collision_lines(collision_summary(self.collisions), limit=limit, more="--limit 0 lists all",
                                           indent="")]
        if self.labels:
            lines += ["", *self._label_lines()]
        if self.splits:
            lines += ["", *split_lines(self.splits, limit=limit, indent="")]
        return "\n".join(lines)

    def _dicom_lines(self) -> list[str]:
        """What DICOM metadata a run keeps: the free-text descriptors above all (spec.md#dicom)."""
        d = self.spec.dicom
        if d.descriptors == "keep":
            how = ("kept ([dicom] descriptors = \"keep\"): free text typed at the scanner, stored in the store's "
                   "attributes and index; make sure it holds no names")
        else:
            how = "left in the raw files ([dicom] descriptors = \"drop\"; \"keep\" stores them)"
        opted = f"; opted in by [dicom] metadata: {', '.join(d.metadata)}" if d.metadata else ""
        return [f"dicom: SeriesDescription, ProtocolName {how}{opted}"]

    def _paths(self) -> list[str]:
        spec = self.spec
        store = spec.delivery.store
        book = str(spec.labels.workbook.absolute()) if spec.labels else "none ([labels] is not set)"
        return [f"  spec:      {spec.path.absolute()}", f"  raw:       {spec.delivery.raw.absolute()}",
                f"  store:     {store.absolute()}",
                f"  workbook:  {book}",
                f"  manifest:  {(spec.manifest_dir / 'manifest.csv').absolute()} (and summary.json beside it)"]

    def _label_lines(self) -> list[str]:
        book, required = self.labels["label_workbook"], self.labels["label_workbook"]["required"]
        rows = [p.row for p in self.planned if p.row.item_id and p.row.status != "ignored"]
        matched = sum(1 for r in rows if r.label_source)
        lost = Counter(r.reason.value for r in rows if r.reason and r.reason.value in ("no_label", "label_conflict"))
        lines = [f"labels: {book['path']} sheet {book['sheet_index']} {book['sheet']!r} (header row "
                 f"{book['header_row']}, IDs in column {book['id_column']}, {book['id_rows']:,} ID rows)",
                 f"  items with a workbook row: {matched:,} of {len(rows):,}"
                 + (f"; rejected for their labels: {', '.join(f'{k} {n}' for k, n in sorted(lost.items()))}"
                    if lost else "")]
        unmatched = self.labels["unmatched_workbook_ids"]
        if unmatched:
            lines.append(f"  workbook IDs matching no item ({len(unmatched):,}): "
                         + ", ".join(f"{u['id'].strip()!r} ({u['cell']})" for u in unmatched))
        unlabelled = self.labels["unlabelled_items"]
        if unlabelled:
            fate = "" if required else "; kept without labels ([labels] required = false)"
            lines.append(f"  items without a label ({len(unlabelled):,}{fate}): {', '.join(unlabelled)}")
        return lines  # the workbook's own warnings (hidden sheets, uncached formulas) are logged by load_labels


def _line(p: Planned) -> str:
    r = p.row
    fate = "convert" if p.fate == "convert" and r.status == "ok" else (p.fate if r.status == "ok" else r.status)
    files = f" [{r.n_files} files]" if r.n_files > 1 else ""
    where = r.group or r.array
    arrow = (f" -> {where}" + (f"[{r.slot}]" if r.slot is not None else "")) if r.status == "ok" and where else ""
    why = f"  ({r.reason.value + ': ' if r.reason else ''}{r.detail})" if r.status != "ok" and r.detail else ""
    split = f"  [{r.split if r.fold is None else f'fold {r.fold}'}]" if r.split else ""
    return f"  {r.item_id or '-':<16} {fate:<9} {r.kind or '':<6} {r.source}{files}{arrow}{split}{why}"


def check_delivery(spec_path: Path, *, root: Path | None = None) -> CheckReport:
    """Load the spec and workbook, walk and probe raw here, plan and join labels; decodes no pixel."""
    from .run.driver import tool_version  # the installed version: part of the fingerprint earlier runs used
    from .write.outcomes import read_outcomes  # reads the store's bookkeeping (zarr); a check needs it only here

    spec = load_spec(spec_path, root=root)
    sheet = load_labels(spec)  # a workbook problem is a usage error here too
    check_reachable(spec.delivery.store)
    candidates = discover(walk(spec.delivery.raw), spec.items)
    probes = probe(candidates, readers_with(spec.run.readers))
    the_plan = plan(spec, candidates, probes, read_outcomes(spec.delivery.store),
                    fingerprint=settings_fingerprint(spec, tool_version()))
    planned = planned_rows(the_plan)
    labels: dict[str, Any] = {}
    if spec.labels is not None and sheet is not None:
        joined = join_labels([p.row for p in planned], sheet, spec.labels, spec.items.id_normalize,
                             workbook=workbook_rel(spec))
        planned = [replace(p, row=r) for p, r in zip(planned, joined.rows)]
        labels = joined.summary
    splits: dict[str, Any] = {}
    if spec.splits is not None:
        from .run.split_step import split_rows  # reads the committed manifest and the store's content hashes

        assigned = split_rows(spec, [p.row for p in planned], spec.delivery.store)
        planned = [replace(p, row=r) for p, r in zip(planned, assigned.rows)]
        splits = assigned.summary
    return CheckReport(spec=spec, plan=the_plan, formats=format_counts(candidates, probes),
                       headline=the_plan.describe().split("\n", 1)[0], planned=tuple(planned),
                       collisions=find_collisions([p.row for p in planned]), labels=labels, splits=splits)
