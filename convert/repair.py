"""Repair: convert again exactly the items `labzarr verify` finds damaged, then verify the store again.

`labzarr verify --repair SPEC` and `labzarr convert --verify SPEC` both run
`repair_delivery`: verify the store (every chunk re-read), convert the delivery
with the damaged arrays forced into tasks (of a stack, only the shards holding
a damaged slot), then verify again. Items verify finds intact are reused as in
any rerun, so the store ends as a clean run would leave it: the same
manifest.csv and summary.json bytes, the same content hashes. A plain `convert`
does only the cheap half (`write/damage.py`): lost chunk files and attributes,
no chunk read, so a flipped byte waits for verify.

The stages are imported at call time: verify (`qc/`) and the run (`run/`) may not
import each other, so they meet here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UsageError

if TYPE_CHECKING:
    from .plan.records import Damage, Repair
    from .progress import Progress
    from .qc.verify import VerifyReport
    from .run.driver import RunResult

__all__ = ["Repaired", "damage_of", "describe_checks", "describe_repair", "repair_delivery", "repaired_line"]

_NAMED = 5  # items named per reason in the summary line


@dataclass(frozen=True, slots=True)
class Repaired:
    """What `repair_delivery` found and did: the verdict before, the run (None when there was nothing to
    repair), and the verdict after."""

    before: VerifyReport | None  # None: no store to verify yet (`convert --verify` on a first run)
    run: RunResult | None
    after: VerifyReport

    @property
    def ok(self) -> bool:
        """True when the store is intact at the end."""
        return self.after.ok


def damage_of(report: VerifyReport) -> dict[str, Damage]:
    """The arrays `report` finds damaged, as the run's `repair` takes them; pure.

    A stack's problems in known places name their slots, so only those shards are redone; a problem of a
    whole array (its metadata, a content hash with no chunk to blame) redoes all of it. A content hash that
    differs beside chunk files missing is their doing (zarr read fill values there), not a second problem.
    """
    from .plan.build import item_array
    from .plan.records import Damage

    by_array: dict[str, list[tuple[str, tuple[int, ...] | None]]] = {}
    for p in report.problems:
        if p.array:  # a volume's downsampled level is its item's damage: the whole image group is redone
            by_array.setdefault(item_array(p.array), []).append((p.kind, p.at))
    out: dict[str, Damage] = {}
    for array, found in sorted(by_array.items()):
        located = [at for _, at in found if at is not None]
        whole = [kind for kind, at in found if at is None and not (located and kind == "content hash differs")]
        kinds = list(dict.fromkeys(kind for kind, at in found if at is not None or kind in whole))
        stack = array.startswith("stacks/")
        slots = frozenset(at[0] for at in located) if stack and not whole else None
        out[array] = Damage(why=", ".join(kinds), slots=slots)
    return out


def repair_delivery(spec: Path | str, *, only_damaged: bool, workers: int | None = None, scheduler: str | None = None,
                    root: Path | None = None, progress: Progress | None = None,
                    threads: int | None = None) -> Repaired:
    """Verify the delivery's store, convert the delivery again with what verify found damaged forced into tasks,
    and verify again.

    With `only_damaged` (`verify --repair`) the store must exist and nothing is converted when it is intact;
    without (`convert --verify`) the delivery is always converted, and a store not there yet is only verified
    after. Raises `UsageError` as `convert_delivery` does, and for a store verify cannot read.
    """
    from .qc.verify import verify_store
    from .run.driver import convert_delivery
    from .spec import load_spec

    store = load_spec(Path(spec), root=root).delivery.store
    try:
        before: VerifyReport | None = verify_store(store, threads=threads)
    except (FileNotFoundError, ValueError) as exc:
        if only_damaged:
            raise UsageError(str(exc), "nothing to repair: run `labzarr convert SPEC` first") from exc
        before = None  # a first run, or one that stopped before writing the store's index
    if only_damaged and before is not None and before.ok:
        return Repaired(before=before, run=None, after=before)
    run = convert_delivery(spec, workers=workers, scheduler=scheduler, root=root, progress=progress,
                           repair=damage_of(before) if before is not None else {})
    return Repaired(before=before, run=run, after=verify_store(store, threads=threads))


def repaired_line(repairs: Sequence[Repair]) -> str:
    """`2 repaired (chunk files missing: case1; attributes unreadable: case4)`: how many, why, and which (the
    first few per reason); "" when none."""
    if not repairs:
        return ""
    by_why: dict[str, list[str]] = {}
    for r in repairs:
        by_why.setdefault(r.why, []).append(r.item_id or r.source)
    parts = []
    for why, items in by_why.items():
        named = ", ".join(items[:_NAMED]) + (f" and {len(items) - _NAMED:,} more" if len(items) > _NAMED else "")
        parts.append(f"{why}: {named}")
    return f"{len(repairs):,} repaired ({'; '.join(parts)})"


def describe_repair(result: Repaired) -> str:
    """What `verify --repair` prints: the verdict before, what was converted again, and the verdict after."""
    assert result.before is not None  # `only_damaged` verifies before, or raises
    if result.run is None:
        return f"{result.before.describe()}\nnothing to repair"
    return "\n\n".join([result.before.describe(), _run_line(result.run), result.after.describe()])


def describe_checks(result: Repaired) -> str:
    """What `convert --verify` prints after the run's table: the damage verify found before (when any), and the
    verdict after."""
    parts = [] if result.before is None or result.before.ok else [f"before converting: {result.before.describe()}"]
    return "\n\n".join([*parts, f"verify: {result.after.describe()}"])


def _run_line(run: RunResult) -> str:
    return (f"repair: {repaired_line(run.repaired) or '0 repaired'}; "
            f"{run.converted:,} converted, {run.unchanged:,} unchanged")
