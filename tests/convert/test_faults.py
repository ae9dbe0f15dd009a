"""A worker that segfaults or hangs on an item costs that item only: `decoder_crash` and `timeout` rows."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from labzarr.convert import UsageError, convert_delivery, load_spec, read_manifest
from labzarr.convert.demo import EXPECTED
from labzarr.convert.manifest import Row
from labzarr.convert.qc.verify import verify_store
from labzarr.convert.run.faults import summarize_report
from labzarr.convert.write.outcomes import read_outcomes, write_outcomes
from labzarr.readers import Reason
from labzarr.store import Folder

from ..conftest import make_delivery
from ..faulty_readers import HANG_MAGIC, PLUGINS, SEGFAULT_MAGIC


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_segfault_and_hang_cost_only_their_items(tmp_path: Path) -> None:
    d = make_delivery(tmp_path,
                      extra=f"\n[run]\nitem_timeout = 4\ncrash_retries = 1\nreaders = {json.dumps(PLUGINS)}\n")
    (d.raw / "case_901.dcm").write_bytes(SEGFAULT_MAGIC + bytes(range(256)))
    (d.raw / "case_902.jpg").write_bytes(HANG_MAGIC + bytes(range(256)))
    seen, supervisor = _Records(), logging.getLogger("labzarr.convert.run.supervise")
    supervisor.addHandler(seen)  # on the logger itself: the cluster quiets the root's handlers while it runs
    try:
        result = convert_delivery(d.spec, workers=2)
    finally:
        supervisor.removeHandler(seen)
    # Both are small items, run in batches with others (`run/batches.py`): a batch that dies or hangs is redone
    # item by item, and only the culprit's row says so.
    redone = [m for m in seen.messages if "small volumes failed" in m]
    assert redone and all("retrying them one by one" in m for m in redone), seen.messages
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    crash, hang = rows.pop("case_901.dcm"), rows.pop("case_902.jpg")
    assert (crash["status"], crash["reason"], crash["kind"]) == ("rejected", "decoder_crash", "test-segfault")
    assert "died while decoding this item, 2 of 2 attempts" in crash["detail"]
    assert "Segmentation fault" in crash["detail"] and "faulty_readers.py" in crash["detail"]
    assert (hang["status"], hang["reason"], hang["kind"]) == ("rejected", "timeout", "test-hang")
    assert "no result after 4 s" in hang["detail"] and "in read (tests/faulty_readers.py" in hang["detail"]
    assert {s: (r["status"], r["reason"]) for s, r in rows.items()} == dict(EXPECTED)  # nothing else lost
    assert verify_store(d.store).ok
    assert not any((d.store / ".labzarr" / "crash").iterdir())
    assert {"case_901.dcm", "case_902.jpg"}.isdisjoint(read_outcomes(Folder(d.store)).volumes)  # tried again next run


def test_transient_rejections_are_not_recorded(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    rows = [Row(item_id=f"c{i}", status="rejected", source=f"c{i}.nii", reason=reason, sha256="a" * 64)
            for i, reason in enumerate([Reason.TRUNCATED, Reason.DECODER_CRASH, Reason.TIMEOUT])]
    write_outcomes(Folder(store), rows, "s1")
    assert sorted(read_outcomes(Folder(store)).volumes) == ["c0.nii"]


def test_fault_report_summary() -> None:
    report = """Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "/x/distributed/threadpoolexecutor.py", line 55 in _worker

Current thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/repo/readers/dicom.py", line 80 in read
  File "/repo/convert/run/volume_task.py", line 70 in convert_item

Extension modules: numpy (total: 1)
"""
    assert summarize_report(report) == ("Fatal Python error: Segmentation fault",
                                        "string_at (ctypes/__init__.py:519) <- read (readers/dicom.py:80)")
    assert summarize_report("") is None


def test_readers_of_the_spec_must_load(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra='\n[run]\nreaders = ["tests.faulty_readers:NoSuchReader"]\n')
    with pytest.raises(UsageError, match=r"\[run\] readers = .*cannot load 'tests.faulty_readers:NoSuchReader'"):
        load_spec(d.spec, root=tmp_path)
