"""Decoding a laid-out DICOM series: a `VolumeSource` that streams canonical slabs slice by slice.

pydicom's pixel backends decode (native, deflate, RLE; JPEG, JPEG-LS, JPEG 2000
and HTJ2K through the pylibjpeg plugins). RescaleSlope/Intercept are applied
per frame in float64 and cast to the layout's output dtype, which the layout
chose so that the cast is exact when it is an integer type.

Memory: a slab is one volume's slices covering whole canonical chunks along
the slice axis, so a worker holds one chunk-row of one volume, whatever the
series' length; a file holding many frames (a mosaic, an enhanced object) is
kept open across the slabs that need it rather than decoded again for each.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pydicom
from nibabel.orientations import apply_orientation, inv_ornt_aff, io_orientation, ornt2axcodes
from pydicom.dataset import Dataset
from pydicom.pixels.processing import apply_color_lut
from pydicom.pixels.utils import pixel_array

from ._dicom_header import open_dicom, transfer_syntax
from ._dicom_layout import SeriesStack, StackFrame
from ._dicom_meta import acquisition_metadata, diffusion_metadata
from .reasons import Reason, Rejected
from .records import Limits, Metadata, Slab, Volume, VolumeHeader
from .slabs import MemorySource, VolumeSource, assemble

__all__ = ["DicomSource", "open_series", "read_series"]

KIND = "dicom"


def open_series(stack: SeriesStack, limits: Limits) -> VolumeSource:
    """A source for `stack`: streamed slabs for a volume, the decoded image for a 2D item; checks the caps first."""
    if stack.nbytes > limits.max_bytes:
        raise Rejected(Reason.TOO_LARGE, f"{len(stack.frames):,} frames of {stack.rows}x{stack.columns}x{stack.samples}"
                                         f" x {np.dtype(stack.dtype).itemsize} B = {stack.nbytes:,} B, cap "
                                         f"{limits.max_bytes:,} B")
    if stack.layout == "volume":
        return DicomSource(stack)
    if stack.rows * stack.columns > limits.max_pixels:
        raise Rejected(Reason.TOO_LARGE, f"{stack.rows}x{stack.columns} = {stack.rows * stack.columns:,} pixels, cap "
                                         f"{limits.max_pixels:,}")
    image = _Frames(stack).get(stack.frames[0])
    data = np.ascontiguousarray(np.moveaxis(image.reshape(stack.rows, stack.columns, stack.samples), 2, 0))
    return MemorySource(Volume(kind=KIND, data=data, spacing=stack.spacing, affine=stack.affine, orientation="",
                               warnings=stack.warnings, metadata=_metadata(stack)))


def _metadata(stack: SeriesStack, *, phase_axes: tuple[str, str] | None = None,
              phase_signs: tuple[float, float] = (1.0, 1.0), slice_tiles: Sequence[int] = (),
              rotation: npt.NDArray[np.float64] | None = None) -> Metadata:
    """The item's metadata: its scaling convention, the allow-list read from its first image's file, and per
    volume its b-value and b-vector in the stored axes (readers/_dicom_meta.py)."""
    first = stack.frames[0]
    try:
        read = acquisition_metadata(Path(first.path), gzipped=first.gzipped, frame=first.frame,
                                    image_type=stack.image_type, echo_time_ms=stack.echo_time_ms,
                                    extra=stack.extra_metadata, phase_axes=phase_axes, phase_signs=phase_signs,
                                    image_shape=(stack.rows, stack.columns), slice_tiles=slice_tiles,
                                    descriptors=stack.descriptors)
    except (OSError, EOFError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise Rejected(Reason.BAD_HEADER, f"member {first.source}: header cannot be read again for its "
                                          f"metadata: {type(exc).__name__}: {exc}") from exc
    diffusion = diffusion_metadata(stack.bvalues, stack.gradients, rotation) if rotation is not None else ()
    return tuple(sorted({**dict(read), **dict(diffusion), **dict(stack.metadata)}.items()))


def read_series(stack: SeriesStack, limits: Limits) -> Volume:
    """The whole series decoded in memory: the canonical (C, X, Y, Z) volume, or the (C, H, W) image."""
    source = open_series(stack, limits)
    h = source.header
    return Volume(kind=h.kind, data=assemble(source), spacing=h.spacing, affine=h.affine, orientation=h.orientation,
                  warnings=h.warnings, metadata=h.metadata)


class DicomSource:
    """A laid-out series whose voxels stream as canonical slabs along the slice axis (see `VolumeSource`)."""

    def __init__(self, stack: SeriesStack) -> None:
        self._stack = stack
        affine = np.array(stack.affine, dtype=np.float64)
        self._ornt = io_orientation(affine)
        spatial = (stack.columns, stack.rows, stack.n_slices)
        canon_affine = affine @ inv_ornt_aff(self._ornt, spatial)
        canon = [0, 0, 0]
        for axis, (target, _) in enumerate(self._ornt):
            canon[int(target)] = spatial[axis]
        dtype = np.dtype(stack.dtype)
        spacing = np.sqrt((canon_affine[:3, :3] ** 2).sum(axis=0))
        axes = "ijk"
        # A mosaic's tiles are its slices: the tile of each stored slice, in stored order, for SliceTiming.
        tiles = [f.frame for f in stack.frames[: stack.n_slices]] if stack.mosaic else []
        metadata = _metadata(stack, phase_axes=(axes[int(self._ornt[0, 0])], axes[int(self._ornt[1, 0])]),
                             phase_signs=(float(self._ornt[0, 1]), float(self._ornt[1, 1])),
                             slice_tiles=tiles[::-1] if self._ornt[2, 1] < 0 else tiles,
                             rotation=canon_affine[:3, :3] / spacing)
        self._header = VolumeHeader(
            kind=KIND, shape=(stack.n_volumes * stack.samples, *canon), dtype=dtype,
            spacing=tuple(float(v) for v in spacing),
            affine=tuple(tuple(float(v) for v in row) for row in canon_affine),
            orientation="".join(c or "?" for c in ornt2axcodes(self._ornt)),  # aff2axcodes, one io_orientation
            stream_axis=int(self._ornt[2, 0]) + 1, voxel_bytes=dtype.itemsize, warnings=stack.warnings,
            metadata=metadata,
        )

    @property
    def header(self) -> VolumeHeader:
        """Canonical shape, output dtype and geometry; `stream_axis` is where the slices went."""
        return self._header

    def slab_count(self, chunks: Sequence[int]) -> int:
        """Slabs per volume (whole chunk rows along the slice axis) times volumes."""
        return len(self._k_ranges(chunks)) * self._stack.n_volumes

    def slabs(self, chunks: Sequence[int], *, first: int = 0, stop: int | None = None) -> Iterator[Slab]:
        """Decode the slices of slab `first` to `stop`: volume by volume, chunk row by chunk row."""
        st = self._stack
        ranges = self._k_ranges(chunks)
        count = len(ranges) * st.n_volumes
        stop = count if stop is None else min(stop, count)
        frames = _Frames(st)
        buffer: npt.NDArray[Any] | None = None
        for index in range(first, stop):
            volume, (k0, k1) = divmod(index, len(ranges))[0], ranges[index % len(ranges)]
            # Slices land contiguously, each read or decoded straight into its plane of one buffer reused from
            # slab to slab; the (X, Y, Z, samples) order is a view for the writer's cache-friendly copy.
            shape = (k1 - k0, st.rows, st.columns, st.samples)
            if buffer is None or buffer.shape[0] < shape[0]:
                buffer = np.empty(shape, dtype=self._header.dtype)
            planes = buffer[: shape[0]]
            for k in range(k0, k1):
                frames.into(st.frames[volume * st.n_slices + k], planes[k - k0])
            yield self._slab(volume, k0, k1, planes.transpose(2, 1, 0, 3))

    def _k_ranges(self, chunks: Sequence[int]) -> list[tuple[int, int]]:
        """Slice-index ranges, in slice order, that each cover whole canonical chunks along the stream axis."""
        n = self._stack.n_slices
        axis, flip = int(self._ornt[2, 0]), self._ornt[2, 1] < 0
        step = max(1, int(chunks[axis + 1]))
        canon = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
        return sorted((n - hi, n - lo) for lo, hi in canon) if flip else canon

    def _slab(self, volume: int, k0: int, k1: int, block: npt.NDArray[Any]) -> Slab:
        view = np.moveaxis(apply_orientation(block, self._ornt), 3, 0)
        axis, flip = int(self._ornt[2, 0]), self._ornt[2, 1] < 0
        n = self._stack.n_slices
        lo, hi = (n - k1, n - k0) if flip else (k0, k1)
        samples = self._stack.samples
        region = [slice(volume * samples, (volume + 1) * samples)] + [slice(0, m) for m in view.shape[1:]]
        region[axis + 1] = slice(lo, hi)
        return Slab(region=tuple(region), data=view)


class _Frames:
    """Decoded, rescaled frames of a series; the last file opened stays open for its next frames.

    A frame of native pixel data (`StackFrame.offset` >= 0) is read from its offset straight into its plane of
    the slab, the unused high bits cleared and the rescale applied there, as pydicom's `pixel_array` would give
    them (tests/readers/test_dicom_native.py compares the two on every native file pydicom ships, and on every
    mosaic of the dcm_qa corpus); a native mosaic's tiles are cut from its one stored frame, read once a file. Any
    other frame is decoded by pydicom from the file's whole dataset.
    """

    def __init__(self, stack: SeriesStack) -> None:
        self._stack = stack
        self._dtype = np.dtype(stack.dtype)
        self._path: str | None = None
        self._ds: Dataset | None = None
        self._mosaic: npt.NDArray[Any] | None = None
        self._stored_mosaic: tuple[str, npt.NDArray[Any]] | None = None  # the last native mosaic read, by path

    def get(self, f: StackFrame) -> npt.NDArray[Any]:
        """Frame `f` (rows, columns, samples) in the output dtype."""
        out = np.empty((self._stack.rows, self._stack.columns, self._stack.samples), dtype=self._dtype)
        self.into(f, out)
        return out

    def into(self, f: StackFrame, out: npt.NDArray[Any]) -> None:
        """Write frame `f`, in the output dtype, into `out` (a C-contiguous (rows, columns, samples) array)."""
        try:
            if f.offset >= 0 and self._stack.mosaic:
                raw = self._tile(f)
            elif f.offset >= 0:
                self._native(f, out)
                return
            else:
                raw = self._raw(f)
        except Rejected:
            raise
        except NotImplementedError as exc:
            raise Rejected(Reason.DECODER_MISSING, f"member {f.source}: {exc}") from exc
        except EOFError as exc:
            raise Rejected(Reason.TRUNCATED, f"member {f.source}: pixel data ends early: {exc}") from exc
        except (ValueError, RuntimeError, OSError, KeyError, AttributeError, TypeError, IndexError) as exc:
            raise Rejected(Reason.CORRUPT_DATA, f"member {f.source}: pixel data cannot be decoded: "
                                                f"{type(exc).__name__}: {exc}") from exc
        out[...] = self._rescaled(raw, f).reshape(out.shape)

    def _rescaled(self, raw: npt.NDArray[Any], f: StackFrame) -> npt.NDArray[Any]:
        if f.slope == 1.0 and f.intercept == 0.0:
            return raw.astype(self._dtype, copy=False)
        if self._dtype.kind in "iu":  # the layout chose an integer type: slope and intercept are integers
            return (raw.astype(np.int64) * int(f.slope) + int(f.intercept)).astype(self._dtype)
        return (raw.astype(np.float64) * f.slope + f.intercept).astype(self._dtype)

    def _native(self, f: StackFrame, out: npt.NDArray[Any]) -> None:
        stored = np.dtype(f.stored)
        same = stored.itemsize == self._dtype.itemsize and stored.kind in "iu" and self._dtype.kind in "iu"
        # Read into the output's own memory when the stored values are as wide as the output's: the rescale is
        # then done there in modular integer arithmetic, exact because the layout chose an output dtype that
        # holds every rescaled value.
        raw = _read_stored(f, out.view(stored) if same else np.empty(out.shape, dtype=stored))
        if not same:
            out[...] = self._rescaled(raw, f)
            return
        if f.slope != 1.0 or f.intercept != 0.0:
            unsigned = out.view(f"u{stored.itemsize}")
            modulus = 1 << (8 * stored.itemsize)
            np.multiply(unsigned, unsigned.dtype.type(int(f.slope) % modulus), out=unsigned)
            np.add(unsigned, unsigned.dtype.type(int(f.intercept) % modulus), out=unsigned)

    def _tile(self, f: StackFrame) -> npt.NDArray[Any]:
        """Tile `f.frame` of a native mosaic, its values as pydicom's `pixel_array` gives them: the file's one stored
        frame is read whole from its offset once, for all its tiles, rather than the file's dataset read and its
        pixels decoded by pydicom."""
        st, grid = self._stack, self._stack.mosaic
        assert grid is not None, "a tile of a stack that is no mosaic"
        if self._stored_mosaic is None or self._stored_mosaic[0] != f.path:
            whole = np.empty((st.rows * grid, st.columns * grid, st.samples), dtype=np.dtype(f.stored))
            self._stored_mosaic = (f.path, _read_stored(f, whole))
        r, c = divmod(f.frame, grid)
        return self._stored_mosaic[1][r * st.rows:(r + 1) * st.rows, c * st.columns:(c + 1) * st.columns]

    def _raw(self, f: StackFrame) -> npt.NDArray[Any]:
        st = self._stack
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydicom warns about non-conformant values (padding, VRs) it copes with
            ds = self._open(f)
            if st.mosaic:
                if self._mosaic is None:
                    self._mosaic = pixel_array(ds)
                r, c = divmod(f.frame, st.mosaic)
                return self._mosaic[r * st.rows:(r + 1) * st.rows, c * st.columns:(c + 1) * st.columns]
            n_frames = int(ds.get("NumberOfFrames") or 1)
            raw = pixel_array(ds, index=f.frame) if n_frames > 1 else pixel_array(ds)
            if st.photometric == "PALETTE COLOR":
                raw = apply_color_lut(raw, ds)
            return raw

    def _open(self, f: StackFrame) -> Dataset:
        # The whole dataset is read (one file's encoded pixels, never the series): pydicom's dataset path copes
        # with deflated streams, writers that switch VR encoding mid-file and palette lookup tables.
        if self._ds is None or self._path != f.path:
            with open_dicom(Path(f.path), gzipped=f.gzipped) as fp:
                ds = pydicom.dcmread(fp, force=True)
            if "TransferSyntaxUID" not in ds.file_meta:  # no File Meta: pydicom's decoders need the syntax named
                ds.file_meta.TransferSyntaxUID = transfer_syntax(ds)
            self._ds, self._path, self._mosaic = ds, f.path, None
        return self._ds


def _read_stored(f: StackFrame, raw: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Frame `f`'s stored values (a mosaic's: all its tiles) read from its offset into `raw`, an array of its stored
    dtype, and made what pydicom's `pixel_array` gives: native byte order, the unused high bits cleared (signed
    values sign-extended). Returns `raw`, or a view of it in native byte order."""
    stored = np.dtype(f.stored)
    with open(f.path, "rb", buffering=0) as fh:
        fh.seek(f.offset)
        got = fh.readinto(raw.data.cast("B"))
    if got != raw.nbytes:
        raise Rejected(Reason.TRUNCATED, f"member {f.source}: pixel data ends after {got:,} of its "
                                         f"{raw.nbytes:,} B")
    if not stored.isnative:
        raw = raw.view(stored.newbyteorder("="))
        raw.byteswap(inplace=True)
    if f.unused_bits:  # as pydicom: the high bits are not part of the value (PS3.5 8.1.1); signed ones extend
        np.left_shift(raw, f.unused_bits, out=raw)
        np.right_shift(raw, f.unused_bits, out=raw)
    return raw
