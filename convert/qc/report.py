"""`labzarr report`: a static QC page for one converted delivery (index.html + PNGs, no scripts, no network).

Everything on the page comes from the delivery's committed record
(`summary.json`, `manifest.csv`) and its store; thumbnails are read from the
store, never from the raw files. Before drawing anything the three are checked
to belong to the same run (manifest sha256 in the summary and in the store).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from labzarr.readers import Reason
from labzarr.store import ChannelStats, StoreView, open_store
from labzarr.store.format.items import IndexItems

from ..errors import UsageError
from ..manifest import read_manifest
from ..spec import Spec, load_spec
from .charts import bar_chart, intensity_chart, top_values
from .explain import EXPLAIN
from .fingerprint import shown_channels
from .thumbs import class_color, thumbnail

__all__ = ["Chart", "MaskClass", "ReasonCount", "ReportResult", "Thumb", "default_report_dir", "sample_evenly",
           "write_report"]

log = logging.getLogger(__name__)
_TOP_VALUES = 25  # label values drawn and listed; the rest are summed as "other"
_MAX_ROWS = 2000  # rows per table on the page (a page stays quick to open); manifest.csv has them all


@dataclass(frozen=True, slots=True)
class Thumb:
    """One contact-sheet tile: `png` relative to the page, or `error` when the store could not be read."""

    index: str
    item_id: str
    source: str
    shape: str
    spacing: str
    labels: tuple[tuple[str, str], ...]
    warnings: str
    classes: str = ""  # a sample's mask classes with voxel counts, as the manifest writes them
    png: str = ""
    width: int = 0
    height: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class Chart:
    """One label's value counts: the chart's file and the same numbers as a table (top values, then the rest)."""

    name: str
    png: str
    counts: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class MaskClass:
    """One mask class over the delivery: in how many samples, how many voxels, its overlay colour (CSS)."""

    value: int
    samples: int
    voxels: int
    color: str


@dataclass(frozen=True, slots=True)
class ReasonCount:
    """One row of the reasons table."""

    reason: str
    count: int
    explain: str


@dataclass(frozen=True, slots=True)
class ReportResult:
    """Where the page went and what it shows."""

    index: Path
    ok: int
    rejected: int
    thumbnails: int
    failed: int


def _below(path: Path, root: Path) -> str:
    """`path` relative to `root` when it lies below it: the page reads the same from any working directory."""
    try:
        return str(Path(os.path.abspath(path)).relative_to(root))
    except ValueError:
        return os.path.abspath(path)


def default_report_dir(spec: Spec) -> Path:
    """`data/reports/<delivery>` under the spec's project root, like its other relative paths."""
    return spec.root / "data" / "reports" / spec.delivery.name


def sample_evenly(n: int, k: int) -> list[int]:
    """`min(n, k)` indexes spread evenly over range(n), first and last included."""
    if k >= n:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _load_record(spec: Spec) -> tuple[dict[str, Any], list[dict[str, str]], StoreView]:
    summary_path = spec.manifest_dir / "summary.json"
    manifest_path = spec.manifest_dir / "manifest.csv"
    run = f"run `labzarr convert {spec.path}` first"
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        manifest = manifest_path.read_bytes()
    except FileNotFoundError as exc:
        raise UsageError(f"{exc.filename}: not found; delivery {spec.delivery.name!r} is not converted yet",
                         run) from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"{summary_path}: not valid JSON ({exc})", f"regenerate it: {run}") from exc
    if hashlib.sha256(manifest).hexdigest() != summary.get("manifest_sha256"):
        raise UsageError(f"{manifest_path}: its sha256 differs from the one {summary_path.name} records "
                         "(edited by hand, or from another run)", f"regenerate both: {run}")
    try:
        view = open_store(spec.delivery.store)
    except (FileNotFoundError, ValueError, ConnectionError) as exc:
        raise UsageError(str(exc), run) from exc
    if view.attrs.get("manifest_sha256") != summary["manifest_sha256"]:
        raise UsageError(f"{spec.delivery.store}: written by another run than {manifest_path} "
                         "(manifest sha256 differs)", f"bring them back in step: {run}")
    return summary, read_manifest(manifest_path), view


def _label_counts(summary: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    labels = summary.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(
            isinstance(v, Mapping) and all(isinstance(n, int) for n in v.values()) for v in labels.values()):
        raise ValueError(f"summary.json labels: expected {{label: {{value: count}}}}, got {labels!r:.200}")
    return {str(name): {str(k): int(n) for k, n in counts.items()} for name, counts in labels.items()}


def _mask_classes(summary: Mapping[str, Any]) -> list[MaskClass]:
    out = []
    for value, c in sorted((summary.get("classes") or {}).items(), key=lambda kv: int(kv[0])):
        k = int(value)
        color = "transparent" if k <= 0 else "#{:02x}{:02x}{:02x}".format(*class_color(k))
        out.append(MaskClass(k, int(c["samples"]), int(c["voxels"]), color))
    return out


def _unmatched(summary: Mapping[str, Any]) -> list[str]:
    # Entries are IDs, or records naming the ID and its cell; shown as text either way.
    out = []
    for entry in summary.get("unmatched_workbook_ids") or []:
        if isinstance(entry, Mapping) and "id" in entry:
            out.append(f"{str(entry['id']).strip()} ({entry.get('cell', '?')})")
        elif isinstance(entry, Mapping):
            out.append(", ".join(f"{k}: {v}" for k, v in entry.items()))
        else:
            out.append(str(entry))
    return out


def _row_labels(row: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((k.removeprefix("label."), v) for k, v in row.items() if k.startswith("label.") and v)


def _thumbs(rows: Sequence[Mapping[str, str]], view: StoreView, out: Path, max_thumbs: int) -> list[Thumb]:
    items = IndexItems.of(view.items)  # positions from the index's columns: only the thumbnails' items are built
    at: dict[tuple[str, int | None], int] = {(a, None if s < 0 else s): n for n, (a, s) in
                                             enumerate(zip(items.values("array"), items.slots().tolist()))}
    ok = [r for r in rows if r["status"] == "ok"]
    (out / "thumbs").mkdir(parents=True, exist_ok=True)
    tiles = []
    for pos in sample_evenly(len(ok), max_thumbs):
        row = ok[pos]
        slot = int(row["slot"]) if row["slot"] else None
        base = Thumb(index=row["index"], item_id=row["item_id"], source=row["source"], shape=row["shape"],
                     spacing=row["spacing"], labels=_row_labels(row), warnings=row["warnings"],
                     classes=row.get("classes", ""))
        position = at.get((row["array"], slot))
        if position is None:
            tiles.append(replace(base, error=f"{row['array']} is not in the store's index"))
            continue
        item = items[position]
        try:
            mask = view.array(item.roles["mask"]) if "mask" in item.roles else None
            img = thumbnail(view.array(item), slot=slot, spacing=item.spacing, mask=mask)
        except Exception as exc:  # a damaged chunk costs one tile, shown on the page, not the report
            log.warning("cannot draw %s from %s: %s: %s", row["source"], row["array"], type(exc).__name__, exc)
            tiles.append(replace(base, error=f"cannot read from the store: {type(exc).__name__}: {exc}"))
            continue
        name = f"thumbs/{int(row['index']):06d}.png"
        img.save(out / name, optimize=True)
        tiles.append(replace(base, png=name, width=img.width, height=img.height))
    return tiles


@dataclass(frozen=True, slots=True)
class IntensityRow:
    """One line of the page's intensity table: a kind's (or the foreground's) channel."""

    name: str
    voxels: int
    low: float  # 0.5th percentile
    median: float
    high: float  # 99.5th percentile
    mean: float
    std: float
    nonfinite: int


@dataclass(frozen=True, slots=True)
class Statistics:
    """The page's statistics section: intensity rows, the histogram chart and the geometry per dimensionality."""

    items: int
    missing: int
    rows: tuple[IntensityRow, ...]
    chart: str | None
    geometry: Mapping[str, Any]


def _statistics(view: StoreView, out: Path) -> Statistics | None:
    """The statistics section, from the store's records (no voxel is read), and its chart written to `out`."""
    stats = view.stats()
    if not stats.items:
        return None
    groups = {kind: s.channels for kind, s in stats.kinds.items()}
    if stats.foreground():
        groups["foreground"] = stats.foreground()
    rows: list[IntensityRow] = []
    curves: dict[str, ChannelStats] = {}
    for name, channels in groups.items():
        for label, s in shown_channels(name, channels):
            if s.count:
                low, median, high = s.percentiles((0.5, 50.0, 99.5))
                rows.append(IntensityRow(label, s.count, low, median, high, s.mean, s.std, s.nan + s.inf))
                curves.setdefault(label, s)
    chart = None
    if curves:
        (out / "intensity.png").write_bytes(intensity_chart(dict(list(curves.items())[:8]),
                                                            title="voxel intensities"))
        chart = "intensity.png"
    return Statistics(items=stats.items, missing=stats.missing, rows=tuple(rows), chart=chart,
                      geometry={k: g.summary() for k, g in stats.geometry.items()})


def _environment() -> Environment:
    return Environment(loader=PackageLoader("labzarr.convert.qc", "templates"),
                       autoescape=select_autoescape(["html", "j2"], default_for_string=True),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def write_report(spec: Path | str, *, root: Path | None = None, out: Path | None = None,
                 max_thumbs: int = 200) -> ReportResult:
    """Write the QC page of a converted delivery and return where it is.

    `root`: as for `load_spec`. `out`: the folder to (re)write, relative to the working directory;
    by default `data/reports/<delivery>` under the project root.
    Raises `UsageError` when the delivery is not converted, or its manifest, summary and store disagree.
    """
    parsed = load_spec(Path(spec), root=root)
    summary, rows, view = _load_record(parsed)
    target = Path(os.path.abspath(out if out is not None else default_report_dir(parsed)))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    except OSError as exc:
        raise UsageError(f"{target}: cannot write the report there ({exc.strerror})",
                         "pass --out with a folder you can write to") from exc
    try:
        tiles = _thumbs(rows, view, tmp, max_thumbs)
        labels = _label_counts(summary)
        charts = []
        for i, (name, counts) in enumerate(sorted(labels.items())):
            png = f"label_{i}.png"
            (tmp / png).write_bytes(bar_chart(counts, title=f"label.{name}: items per value", top=_TOP_VALUES))
            charts.append(Chart(name, png, tuple(top_values(counts, top=_TOP_VALUES).items())))
        if summary["reasons"]:
            (tmp / "reasons.png").write_bytes(bar_chart(summary["reasons"], title="rejected items per reason",
                                                        color="#c44e52"))
        ok_rows = [r for r in rows if r["status"] == "ok"]
        statistics = _statistics(view, tmp)
        html = _environment().get_template("report.html.j2").render(
            summary=summary, spec_path=_below(parsed.path, parsed.root),
            store=parsed.delivery.store.shown(parsed.root),
            reasons=[ReasonCount(r, n, EXPLAIN[Reason(r)]) for r, n in summary["reasons"].items()],
            charts=charts, tiles=tiles, ok_total=len(ok_rows),
            rejected=[r for r in rows if r["status"] == "rejected"],
            ignored=[r for r in rows if r["status"] == "ignored"],
            warned=[r for r in ok_rows if r["warnings"]],
            max_rows=_MAX_ROWS, mask_classes=_mask_classes(summary), unmatched=_unmatched(summary),
            workbook=summary.get("label_workbook"),
            unlabelled=[str(i) for i in summary.get("unlabelled_items") or []],
            manifest_short=summary["manifest_sha256"][:12], splits=summary.get("splits"), statistics=statistics,
            leak_what={"group_in_several_splits": "a group in several splits",
                       "content_in_several_splits": "one content in several splits",
                       "stratum_disagrees": "a group that disagrees on the stratification label"},
        )
        (tmp / "index.html").write_text(html, encoding="utf-8")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a report is meant to be shared
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ReportResult(index=target / "index.html", ok=len(ok_rows), rejected=int(summary["counts"]["rejected"]),
                        thumbnails=sum(1 for t in tiles if t.png), failed=sum(1 for t in tiles if t.error))
