"""What every worker task needs besides its own job: the run's settings, shipped once per task."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from labzarr.readers import Limits
from labzarr.store import Folder, Location, as_location
from labzarr.store.format.ngff import Pyramid

from ..plan.chunks import SLAB_BYTES
from ..spec import MasksSpec, StoreSpec
from ..write.state import crash_dir
from ..write.writer import DEFAULT_THREADS

__all__ = ["TaskSettings", "hang_report_after", "report_grace", "threads_per_task", "usable_cores"]


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """What every task needs besides its own item: shipped once per task, small."""

    store: str
    store_spec: StoreSpec
    limits: Limits
    non_finite: Literal["reject", "warn"]
    masks: MasksSpec = field(default_factory=MasksSpec)  # how a sample's mask is checked (samples only)
    slab_bytes: int = SLAB_BYTES  # memory for one slab of a streamed volume (see convert/plan/chunks.py)
    run_id: str = ""  # the lock holder's run id: a task of a dead run never installs an array
    fingerprint: str = ""  # the settings fingerprint recorded beside each array (plan/records.py)
    readers: tuple[str, ...] = ()  # extra readers, "module:Name", before the built-in ones
    hang_report_after: float | None = None  # seconds after which a hung item's stack is written to its report
    fault_reports: bool = True  # only where a worker runs one task at a time (faulthandler is per process)
    store_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec storage_options of a URL store
    crash_reports: str = ""  # the fault reports' folder; default: the store's .labzarr/crash
    slab_events: str = ""  # the run's token for progress inside items (slab_progress.py); "": report none
    # Threads one task encodes a volume's chunks with; 0: the writer's default (every core, at most 8). The driver
    # shares each host's cores out among the tasks that run there at once (`driver.encode_threads`), so workers
    # x threads <= cores: more threads than cores only add switching and cache misses to the same work.
    threads: int = 0

    def writer_threads(self) -> int:
        """The encoding threads a task's writer is given."""
        return self.threads or DEFAULT_THREADS

    def location(self) -> Location:
        """The store: a folder, or a URL store with its storage options."""
        return as_location(self.store, self.store_options)

    def pyramid(self, *, labels: bool = False) -> Pyramid:
        """The levels every image is given below level 0 (`[store] pyramid`); a label image's by mode."""
        return Pyramid(levels=self.store_spec.pyramid, method="mode" if labels else "mean")

    def reports(self) -> Path:
        """Where workers write fault reports: a local folder (faulthandler needs a file descriptor)."""
        if self.crash_reports:
            return Path(self.crash_reports)
        return crash_dir(Folder(self.store))


def hang_report_after(item_timeout: float) -> float:
    """When a hung item's worker writes its stacks, counted from its start on the worker.

    The driver counts from when the scheduler handed the item over, which is earlier by the task's
    transfer and the worker's first imports; it also waits up to `report_grace` longer for the report.
    """
    return max(0.6 * item_timeout, item_timeout - 10.0)


def report_grace(item_timeout: float) -> float:
    """How much longer than `item_timeout` a hung item is waited for while its report is not yet written."""
    return min(10.0, 0.5 * item_timeout)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or `taskset` narrows), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_per_task(workers: Iterable[tuple[str, int, int]]) -> int:
    """Encoding threads for each task, from every worker's (host, task slots, usable cores): each host's cores
    shared out among the tasks that run there at once, the tightest host deciding; at least 1."""
    slots: Counter[str] = Counter()
    cores: dict[str, int] = {}
    for host, nthreads, ncores in workers:
        slots[host] += max(1, nthreads)
        cores[host] = ncores
    return max(1, min((cores[h] // slots[h] for h in slots), default=1))
