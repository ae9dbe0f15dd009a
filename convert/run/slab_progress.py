"""Progress inside an item: workers report the source bytes they have streamed, the driver counts them.

Invariant: the bytes a run shows never go backwards and never exceed the total. A running item's share
is clamped to its size; when its row arrives, its size replaces (never adds to) what it reported, and
reports arriving after that are dropped, so a retried, crashed, timed-out or in-parts item counts once.

Workers report through distributed's event log: `log_event` on a topic of the run's own, at most one
event per task every `EVERY_S` and none for a task's last slab (its row says it is done), so a delivery
of many one-slab files sends none at all. The client calls the listener on its event-loop thread; the
listener only queues, and the driver thread drains the queue, so `Progress` is only ever called there.
"""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from labzarr.readers import Slab

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["EVERY_S", "ByteCount", "SlabEvent", "SlabListener", "SlabReporter", "topic"]

EVERY_S = 0.5  # the most often one task reports: a few events a second per running item


def topic(token: str) -> str:
    """The event-log topic of the run whose tasks carry `token` (`TaskSettings.slab_events`)."""
    return f"labzarr-slabs-{token}"


@dataclass(frozen=True, slots=True)
class SlabEvent:
    """One task's progress through its item: the share of the item's source bytes it has streamed so far."""

    source: str  # the item's source, as in its row
    part: int  # the part of a volume written in parts; 0 for a volume written by one task
    bytes_done: int

    def message(self) -> list[object]:
        """The event as `log_event` carries it (msgpack: plain values only)."""
        return [self.source, self.part, self.bytes_done]

    @classmethod
    def parse(cls, msg: object) -> SlabEvent:
        """The event `message()` made; raises ValueError for anything else (a bug, not a worker's data)."""
        if (isinstance(msg, list | tuple) and len(msg) == 3 and isinstance(msg[0], str)
                and all(isinstance(v, int) and not isinstance(v, bool) for v in msg[1:])):
            return cls(source=msg[0], part=int(msg[1]), bytes_done=int(msg[2]))
        raise ValueError(f"not a slab progress event: {msg!r}")


class SlabReporter:
    """Worker side, one per task: after each slab, the task's share of the item's `size` streamed so far.

    `voxels` is the whole volume's voxel count and `slabs` how many slabs this task streams; `token` empty
    (no one listens) sends nothing.
    """

    def __init__(self, token: str, source: str, *, part: int = 0, size: int, voxels: int, slabs: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._topic = topic(token) if token else ""
        self._source, self._part, self._size, self._voxels, self._slabs = source, part, size, max(1, voxels), slabs
        self._clock = clock
        self._seen = self._done = 0
        self._last = -math.inf

    def update(self, slab: Slab) -> None:
        """Count `slab`; report when it is not the task's last and the last report is `EVERY_S` old."""
        self._seen += 1
        self._done += math.prod(r.stop - r.start for r in slab.region)
        if not self._topic or self._seen >= self._slabs:
            return
        now = self._clock()
        if now - self._last < EVERY_S:
            return
        self._last = now
        share = min(self._size, self._size * self._done // self._voxels)
        from distributed import get_worker  # only a task on a cluster has a listener (a token): dask is there

        get_worker().log_event(self._topic, SlabEvent(self._source, self._part, share).message())


class SlabListener:
    """Driver side: subscribes `client` to the run's topic while open; `drain()` returns what arrived."""

    def __init__(self, client: Client, token: str) -> None:
        self._client, self._topic = client, topic(token)
        self._queue: queue.SimpleQueue[SlabEvent] = queue.SimpleQueue()

    def __enter__(self) -> SlabListener:
        self._client.subscribe_topic(self._topic, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._client.unsubscribe_topic(self._topic)

    def _handle(self, event: tuple[float, Any]) -> None:
        # On the client's event-loop thread: queue it, nothing more (SimpleQueue.put is thread-safe).
        self._queue.put(SlabEvent.parse(event[1]))

    def drain(self) -> list[SlabEvent]:
        """Every event received since the last call, in arrival order."""
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out


class ByteCount:
    """The driver's count of source bytes converted: finished items' sizes plus running items' reported shares."""

    def __init__(self, sizes: Mapping[str, int]) -> None:
        # The unfinished items' sizes: an item leaves when its row arrives, so nothing of a row is kept (a set of
        # finished sources held each row's `source`, scattered over the memory its row was read into).
        self._sizes = dict(sizes)
        self.total = sum(sizes.values())
        self._done = 0  # bytes of finished items
        self._running: dict[str, dict[int, int]] = {}  # source -> part -> bytes reported
        self._shown = 0

    @property
    def shown(self) -> int:
        """What progress shows: never less than before, never more than `total`."""
        return self._shown

    def running(self, ev: SlabEvent) -> bool:
        """Count a report (a late one, for an item already finished, is dropped); True if `shown` grew."""
        size = self._sizes.get(ev.source)
        if size is None:  # finished already, or not an item of this run
            return False
        parts = self._running.setdefault(ev.source, {})
        # A retried task starts its count again from 0: keep its best, the bytes are the same bytes.
        parts[ev.part] = max(parts.get(ev.part, 0), min(size, ev.bytes_done))
        return self._update()

    def finished(self, source: str) -> None:
        """The item's row arrived: its size replaces its reports."""
        size = self._sizes.pop(source, None)
        if size is None:
            return
        self._running.pop(source, None)
        self._done += size
        self._update()

    def _update(self) -> bool:
        running = sum(min(self._sizes[s], sum(parts.values())) for s, parts in self._running.items())
        now = min(self.total, max(self._shown, self._done + running))
        grew, self._shown = now > self._shown, now
        return grew
