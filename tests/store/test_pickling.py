"""`fast_pickling` against the pickling `dataclasses` gives a slotted dataclass: the same state, the same objects."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np

from labzarr.convert.manifest import ClassCount, RoleSource, Row
from labzarr.readers import Reason
from labzarr.store.format.pickling import fast_pickling
from labzarr.store.format.stats import ChannelStats, Histogram, ItemStats


@dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: tuple[str, ...] = ()
    c: dict[str, int] = field(default_factory=dict)


@fast_pickling
@dataclass(frozen=True, slots=True)
class _Fast:
    a: int
    b: tuple[str, ...] = ()
    c: dict[str, int] = field(default_factory=dict)


def test_the_state_is_the_one_dataclasses_gives() -> None:
    plain, fast = _Plain(1, ("x",), {"k": 2}), _Fast(1, ("x",), {"k": 2})
    assert fast.__getstate__() == plain.__getstate__() == [1, ("x",), {"k": 2}]  # type: ignore[attr-defined]
    again = object.__new__(_Fast)
    again.__setstate__(plain.__getstate__())  # type: ignore[attr-defined]
    assert again == fast


def test_rows_and_statistics_round_trip() -> None:
    hist = Histogram(np.array([3, 9], dtype=np.int64), np.array([5, 1], dtype=np.int64))
    stats = ItemStats(channels=(ChannelStats(count=6, mean=1.0, m2=2.0, min=0.0, max=3.0, histogram=hist),),
                      classes={1: (ChannelStats(count=2, mean=1.0, m2=0.0, min=1.0, max=1.0),)})
    row = Row(item_id="s1", status="rejected", source="s1/a.nii", reason=Reason.TRUNCATED, shape=(1, 2),
              roles=(RoleSource("image", "s1/a.nii", "f" * 64),), classes=(ClassCount(1, 4, 0, 2),), stats=stats,
              metadata=(("EchoTime", 2.5),), slot=3)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(row, protocol=protocol))
        assert back == row and back.stats is not None
        assert np.array_equal(back.stats.channels[0].histogram.counts, hist.counts)
