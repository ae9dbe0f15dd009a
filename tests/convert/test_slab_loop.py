"""The one slab loop (`run/slab_loop.py`) the volume, part and sample tasks share: every slab checked, written,
counted and reported in that order; a non-finite slab stops the writing but not the reading, and is refused with
the detail the whole volume read at once would get."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from labzarr.convert.intensity import Accumulator, measure
from labzarr.convert.run.slab_loop import write_slabs
from labzarr.convert.spec import StoreSpec
from labzarr.convert.validate import FiniteCheck, check_finite
from labzarr.convert.write.arrays import codecs
from labzarr.convert.write.writer import VolumeWriter
from labzarr.readers import Reason, Rejected, Slab, Volume, VolumeHeader
from labzarr.store import Folder

SHAPE = (2, 12, 8, 6)  # (c, x, y, z): three slabs of 4 along x
EYE = tuple(tuple(float(i == j) for j in range(4)) for i in range(4))


def _data(nan_at: tuple[int, ...] | None = None) -> np.ndarray:
    data = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    if nan_at is not None:
        data[nan_at] = np.nan
        data[(nan_at[0], nan_at[1] + 1, *nan_at[2:])] = np.inf  # a second one, after the first in (c, x, y, z)
    return data


def _header(data: np.ndarray) -> VolumeHeader:
    return VolumeHeader(kind="nifti", shape=data.shape, dtype=data.dtype, spacing=(1.0, 1.0, 1.0), affine=EYE,
                        orientation="RAS", stream_axis=1, voxel_bytes=data.dtype.itemsize)


def _slabs(data: np.ndarray) -> list[Slab]:
    rest = tuple(slice(0, n) for n in data.shape[2:])
    return [Slab(region=(slice(0, data.shape[0]), slice(x, x + 4), *rest), data=data[:, x:x + 4])
            for x in range(0, data.shape[1], 4)]


class _Log:
    """Records which step saw which slab (by its first x), into a log the steps share."""

    def __init__(self, name: str, log: list[tuple[str, int]]) -> None:
        self._name, self._log = name, log

    def write(self, slab: Slab) -> None:
        self._log.append((self._name, slab.region[1].start))

    update = write


def _whole(data: np.ndarray) -> Volume:
    return Volume(kind="nifti", data=data, spacing=(1.0, 1.0, 1.0), affine=EYE, orientation="RAS")


def test_every_slab_is_written_counted_and_reported_in_order() -> None:
    data = _data()
    log: list[tuple[str, int]] = []
    write_slabs(_slabs(data), finite=FiniteCheck(_header(data), "reject"), writer=_Log("write", log),
                stats=(_Log("stats", log), _Log("classes", log)), progress=_Log("progress", log))
    assert log == [(step, x) for x in (0, 4, 8) for step in ("write", "stats", "classes", "progress")]


def test_the_slabs_store_the_volume_and_its_statistics(tmp_path: Path) -> None:
    data = _data()
    h = _header(data)
    writer = VolumeWriter(Folder(tmp_path / "s.zarr"), "v", h, chunks=(1, 4, 8, 6), shards=None,
                          codecs=codecs(StoreSpec()), attrs={})
    finite, stats = FiniteCheck(h, "reject"), Accumulator(h.dtype)
    try:
        write_slabs(_slabs(data), finite=finite, writer=writer, stats=(stats,))
        assert finite.outcome() == ()
        writer.finish(complete="x")
    finally:
        writer.close()
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr" / "v", mode="r")[...], data)
    assert stats.result(SHAPE[0]) == measure(data).channels


def test_a_non_finite_slab_stops_the_writing_not_the_reading() -> None:
    data = _data(nan_at=(1, 5, 2, 3))  # in the second slab
    log: list[tuple[str, int]] = []
    finite = FiniteCheck(_header(data), "reject")
    write_slabs(_slabs(data), finite=finite, writer=_Log("write", log), stats=(_Log("stats", log),),
                progress=_Log("progress", log))
    assert log == [("write", 0), ("stats", 0), ("progress", 0), ("progress", 4), ("progress", 8)]
    with pytest.raises(Rejected) as streamed:
        finite.outcome()
    with pytest.raises(Rejected) as whole:
        check_finite(_whole(data), "reject")
    assert streamed.value.reason == whole.value.reason == Reason.NON_FINITE
    assert streamed.value.detail == whole.value.detail
    assert streamed.value.detail.startswith("2 of 1,152 voxels are NaN/Inf (first at (c,x,y,z) = (1, 5, 2, 3))")


def test_a_non_finite_slab_let_through_is_written_with_the_warning_of_the_whole_volume() -> None:
    data = _data(nan_at=(0, 9, 0, 0))
    log: list[tuple[str, int]] = []
    finite = FiniteCheck(_header(data), "warn")
    write_slabs(_slabs(data), finite=finite, writer=_Log("write", log), progress=_Log("progress", log))
    assert log == [(step, x) for x in (0, 4, 8) for step in ("write", "progress")]
    assert finite.outcome() == check_finite(_whole(data), "warn")
    assert finite.outcome()[0].startswith("non_finite: 2 of 1,152 voxels")
