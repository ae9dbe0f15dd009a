"""The task boundary: where every kind of job's failure becomes manifest rows, on the worker or without it.

A job is one of four kinds, each run on a dask worker as its own future:
`VolumeTask` (a volume: one row), `ShardTask` (a shard of 2D images: a row per
image), `SampleTask` (an image with its mask and other roles: one row) and
`VolumePart` (a slab range of a volume written in parts: the volume's one
row once every part is in). Whatever the kind, a failure ends the same way:

- on the worker (`refusal`): `Rejected` is the reader's refusal, its reason
  and detail; `MemoryError` is `too_large`; any other exception is a bug in a
  decoder or in our code and is `decoder_crash`, logged with its traceback --
  one item is lost, never the run;
- `StoreWriteError` (disk full, read-only store) and `Superseded` (another run
  took the store over) are not the item's fault and escape (`ESCAPES`): the
  driver stops the run with one `UsageError` (`store_failed`), or drops the work;
- a worker process that dies (a segfault in a C decoder, the memory limit)
  reaches the driver as `KilledWorker`: `crashed` gives `decoder_crash` rows
  whose detail names what the fault report the job's worker wrote
  (`on_worker`) says, and where;
- a job past `[run] item_timeout` is cancelled: `timed_out` gives `timeout` rows.

`tests/convert/test_boundary.py` runs every kind through each of these.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labzarr.readers import Reason, Rejected

from ..errors import UsageError
from ..manifest import Row
from ..plan.build import VolumeTask
from ..plan.parts import VolumePart
from ..plan.samples import SampleTask
from ..plan.stacks import ShardTask
from ..write.arrays import StoreWriteError, Superseded, compact_metadata
from .faults import fault_report, report_path, summarize_report
from .settings import TaskSettings

__all__ = ["ESCAPES", "Job", "crashed", "on_worker", "refusal", "rejected_rows", "report_key", "store_failed",
           "timed_out"]

log = logging.getLogger(__name__)

Job = VolumeTask | ShardTask | SampleTask | VolumePart
ESCAPES: tuple[type[Exception], ...] = (StoreWriteError, Superseded)


def report_key(job: Job) -> str:
    """The name `job`'s fault report goes by: its array, its sample's group, its slot range or its part."""
    if isinstance(job, VolumeTask):
        return job.array
    if isinstance(job, VolumePart):
        return job.report_key
    if isinstance(job, SampleTask):
        return job.group
    return f"{job.stack.array}@{job.first}-{job.stop}"


@contextmanager
def on_worker(job: Job, settings: TaskSettings) -> Iterator[None]:
    """Run `job`'s body with its fault report armed: a fatal signal (or a hang) leaves its stacks there."""
    with fault_report(report_path(settings.reports(), report_key(job)), hang_after=settings.hang_report_after,
                      enabled=settings.fault_reports), compact_metadata():
        yield


def refusal(exc: Exception, source: str) -> tuple[Reason, str]:
    """The (reason, detail) the item at `source` is rejected with for `exc`; raises `exc` again if it `ESCAPES`."""
    if isinstance(exc, ESCAPES):
        raise exc
    if isinstance(exc, Rejected):
        return exc.reason, exc.detail
    if isinstance(exc, MemoryError):
        return Reason.TOO_LARGE, f"out of memory while decoding: {exc}"
    log.error("decoder crashed on %s", source, exc_info=exc)
    return Reason.DECODER_CRASH, f"{type(exc).__name__}: {exc}"


def rejected_rows(job: Job, reason: Reason, detail: str) -> list[Row]:
    """The rows of every item `job` stood for, rejected with `reason`: one, or one per image of a shard."""
    if isinstance(job, ShardTask):
        return [i.base_row().rejected(reason, detail) for i in job.items]
    base = job.task.base_row() if isinstance(job, VolumePart) else job.base_row()
    return [base.rejected(reason, detail)]


def crashed(job: Job, reports: Path, exc: BaseException | None) -> list[Row]:
    """`decoder_crash` rows for a job whose worker died (`exc`, the scheduler's `KilledWorker`), from its report."""
    from distributed.scheduler import KilledWorker  # only a cluster's worker dies apart from the run: dask is there

    attempts = exc.allowed_failures + 1 if isinstance(exc, KilledWorker) else 1
    report = _report(reports, job)
    if report is None:
        why = "no fault report: the process was killed from outside (e.g. the worker memory limit or the OOM killer)"
    else:
        what, where = report
        why = what + (f" in {where}" if where else "")
    return rejected_rows(job, Reason.DECODER_CRASH,
                         f"the worker process died while decoding this item, {attempts} of {attempts} attempts; {why}")


def timed_out(job: Job, reports: Path, item_timeout: float) -> list[Row]:
    """`timeout` rows for a job cancelled after `item_timeout` s, naming where its report says it hung."""
    report = _report(reports, job)
    where = f"; it was in {report[1]}" if report and report[1] else ""
    return rejected_rows(job, Reason.TIMEOUT, f"no result after {item_timeout:g} s ([run] item_timeout = "
                                              f"{item_timeout:g}){where}; its worker was restarted")


def store_failed(exc: StoreWriteError) -> UsageError:
    """The one error a run stops with when the store cannot be written."""
    return UsageError(f"cannot write the store: {exc}",
                      "free space (or fix permissions) and rerun the same command: finished items are kept and the "
                      "run resumes")


def _report(reports: Path, job: Job) -> tuple[str, str | None] | None:
    path = report_path(reports, report_key(job))
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return summarize_report(text)
