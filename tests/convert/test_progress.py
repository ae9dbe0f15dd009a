"""Progress while converting: bytes move inside a big item (slab events from the workers), counted once;
a pseudo-terminal that reports no width gets lines, not a bar that prints nothing."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from labzarr.convert import convert_delivery
from labzarr.convert.demo import write_spec
from labzarr.convert.progress import ProgressEvent
from labzarr.convert.run.slab_progress import ByteCount, SlabEvent

from ..conftest import make_delivery
from ..ptys import readable

SHAPE = (256, 256, 512)  # int16: 64 MiB, streamed in z
# 32-plane shards: the volume streams as 16 slabs of 4 MiB (write_spec's default gives 4 of 16 MiB).
THIN = 'chunks = [32, 32, 32]\nshards = [256, 256, 32]\n'


# -- counting -----------------------------------------------------------------------------------------------------

def _count(events: list[tuple[str, object]], sizes: dict[str, int]) -> list[int]:
    count = ByteCount(sizes)
    shown = []
    for kind, what in events:
        if kind == "slab":
            assert isinstance(what, SlabEvent)
            count.running(what)
        else:
            assert isinstance(what, str)
            count.finished(what)
        shown.append(count.shown)
    return shown


@pytest.mark.parametrize(("events", "shown"), [
    pytest.param([("slab", SlabEvent("a", 0, 40)), ("slab", SlabEvent("a", 0, 70)), ("row", "a")], [40, 70, 100],
                 id="grows-then-replaced-by-size"),
    pytest.param([("slab", SlabEvent("a", 0, 70)), ("row", "a"), ("slab", SlabEvent("a", 0, 90))], [70, 100, 100],
                 id="late-event-after-row-dropped"),
    pytest.param([("slab", SlabEvent("a", 0, 60)), ("slab", SlabEvent("a", 0, 10)), ("slab", SlabEvent("a", 0, 80)),
                  ("row", "a")], [60, 60, 80, 100], id="retry-restarts-never-backwards-nor-twice"),
    pytest.param([("slab", SlabEvent("a", 0, 500))], [100], id="clamped-to-item-size"),
    pytest.param([("slab", SlabEvent("a", 0, 40)), ("slab", SlabEvent("a", 1, 50)), ("slab", SlabEvent("a", 1, 80)),
                  ("row", "b"), ("row", "a")], [40, 90, 100, 110, 110], id="parts-of-a-volume-add-up-clamped"),
    pytest.param([("slab", SlabEvent("zzz", 0, 40)), ("row", "b"), ("row", "b")], [0, 10, 10],
                 id="unknown-source-and-second-row-ignored"),
])
def test_byte_count(events: list[tuple[str, object]], shown: list[int]) -> None:
    assert _count(events, {"a": 100, "b": 10}) == shown


def test_slab_events_round_trip_and_refuse_junk() -> None:
    ev = SlabEvent("sub/case1.nii.gz", 2, 12345)
    assert SlabEvent.parse(ev.message()) == ev
    with pytest.raises(ValueError, match="not a slab progress event"):
        SlabEvent.parse(["a", True, 3])


# -- a real conversion --------------------------------------------------------------------------------------------

def _big_volume(path: Path) -> Path:
    x, y, z = np.ogrid[: SHAPE[0], : SHAPE[1], : SHAPE[2]]
    data = (x * 7 + y * 3 + z * 11).astype(np.int16)
    nib.save(nib.Nifti1Image(data, np.diag([0.8, 0.8, 1.0, 1.0])), path)
    return path


def _small_volumes(raw: Path, n: int) -> None:
    rng = np.random.default_rng(3)
    for i in range(n):
        nib.save(nib.Nifti1Image(rng.integers(0, 100, (12, 10, 8)).astype(np.int16), np.eye(4)),
                 raw / f"case{100 + i}.nii.gz")


def _convert(tmp_path: Path, scheduler: str, extra: str = "", store: str = THIN) -> list[ProgressEvent]:
    spec = write_spec(tmp_path / "manifests" / "big" / "delivery.toml", raw=tmp_path / "raw",
                      store=tmp_path / "big.zarr", name="big", labels=False, extra=extra)
    spec.write_text(spec.read_text().replace("chunks = [32, 32, 32]\nshards = [256, 256, 128]\n", store))
    seen: list[ProgressEvent] = []
    result = convert_delivery(spec, scheduler=scheduler, progress=seen.append)
    assert all(r.status == "ok" for r in result.rows), result.rows
    return [ev for ev in seen if ev.phase == "convert"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("parts", [pytest.param("", id="one-task"),
                                   pytest.param("\n[run]\nparts_bytes = 1\n", id="in-two-parts")])
def test_bytes_move_inside_a_big_item_before_it_finishes(tmp_path: Path, scheduler: str, parts: str) -> None:
    (tmp_path / "raw").mkdir()
    size = _big_volume(tmp_path / "raw" / "case1.nii").stat().st_size
    events = _convert(tmp_path, scheduler, parts)
    assert events[0].bytes_total == size and events[0].total == 1
    finished = next(k for k, ev in enumerate(events) if ev.done == 1)
    inside = [ev.bytes_done for ev in events[:finished] if 0 < ev.bytes_done < size]
    assert inside, [(ev.done, ev.bytes_done) for ev in events]  # the bar moved while the item ran
    assert all(ev.done == 0 and ev.row is None for ev in events[:finished])  # items move only when one is done
    assert events[finished].row is not None and events[finished].bytes_done == size
    shown = [ev.bytes_done for ev in events]
    assert shown == sorted(shown) and shown[-1] == size  # never backwards, never past the total


@pytest.mark.timeout(120)
def test_items_of_one_slab_send_no_slab_events(tmp_path: Path, scheduler: str) -> None:
    """A delivery of many small files costs no events: progress moves with their rows alone."""
    (tmp_path / "raw").mkdir()
    _small_volumes(tmp_path / "raw", 12)
    events = _convert(tmp_path, scheduler)
    assert [ev.done for ev in events] == list(range(13))
    assert all(ev.row is not None for ev in events[1:])


# -- the terminal ---------------------------------------------------------------------------------------------------

def _run_on_pty(argv: list[str], columns: int, timeout: float = 120) -> tuple[int, str]:
    """Run `argv` on a fresh pseudo-terminal of `columns` columns (0: one that reports no width)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 0 if columns == 0 else 40, columns, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if readable(master, 0.5):
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not data:
                    break
                out += data
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.wait(timeout=30), out.decode("utf-8", "replace")


@pytest.mark.timeout(150)
def test_a_pty_with_no_width_gets_progress_lines(tmp_path: Path, scheduler: str) -> None:
    d = make_delivery(tmp_path)
    code, out = _run_on_pty([sys.executable, "-m", "labzarr", "convert", str(d.spec), "--scheduler", scheduler],
                            columns=0)
    assert code == 0, out
    lines = out.replace("\r\n", "\n").splitlines()
    assert "\r" not in out.replace("\r\n", "\n") and "\x1b" not in out
    assert any(re.match(r"labzarr: probing (\d+)/\1 files \(100%\)", line) for line in lines), out
    assert any(re.match(r"labzarr: converting (\d+)/\1 items \(100%\).* done in ", line) for line in lines), out
    assert "manifest:" in out


def test_a_run_keeps_the_heap_it_started_with_out_of_collections_and_hands_it_back(tmp_path: Path,
                                                                                   scheduler: str) -> None:
    """The driver's objects from before the run are frozen while it runs (its progress callbacks see them so),
    and the heap is as it was after it, however the run ends."""
    import gc

    raw = tmp_path / "raw"
    raw.mkdir()
    _small_volumes(raw, 3)
    spec = write_spec(tmp_path / "manifests" / "gc" / "delivery.toml", raw=raw, store=tmp_path / "gc.zarr",
                      name="gc", labels=False)
    before = gc.get_freeze_count()
    frozen: list[int] = []
    convert_delivery(spec, scheduler=scheduler, progress=lambda _: frozen.append(gc.get_freeze_count()))
    assert frozen and min(frozen) > before == gc.get_freeze_count()

    def stop(_: ProgressEvent) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_delivery(spec, scheduler=scheduler, progress=stop)
    assert gc.get_freeze_count() == before
