"""NIfTI-1 and NIfTI-2 single-file volumes (`.nii`, `.nii.gz`), sniffed by content.

Invariant: the header is validated before any voxel is read; voxels come out
in canonical RAS order (`nibabel.as_closest_canonical`), channels first, and
the whole (gzip) stream is inflated and checked before the last slab is
handed over.

Streaming: NIfTI stores x fastest, so the file is a sequence of z-planes per
channel; `open()` returns a source that inflates a few planes at a time into
one reused buffer, reorients them (a flip/transpose view) and yields them as
slabs covering whole chunks of the canonical array. Memory is one slab, not
the volume. `read()` assembles those same slabs into a whole `Volume`.

Dtype rule: without scaling (scl_slope 0, 1 or NaN and scl_inter 0 or NaN) the
on-disk dtype is kept, in native byte order; with scaling, voxels become
float32 (float64 when the file stores float64), as `slope * raw + inter`.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import nibabel as nib
import numpy as np
import numpy.typing as npt
from nibabel.orientations import apply_orientation, inv_ornt_aff, io_orientation, ornt2axcodes
from nibabel.spatialimages import HeaderDataError
from nibabel.volumeutils import apply_read_scaling

from ._head import Head
from ._stream import ContentStream
from .reasons import Reason, Rejected
from .records import Limits, Slab, Volume, VolumeHeader
from .slabs import assemble

__all__ = ["NiftiReader", "NiftiSource", "nifti_version"]

_CIFTI_INTENTS = range(3000, 3100)
# Extensions sit between the header and vox_offset; more than this is not a real header.
_MAX_VOX_OFFSET = 256 << 20
# Content past the voxels that is tolerated (padding some writers add).
_TRAILING_SLACK = 1 << 20


def nifti_version(data: bytes) -> int:
    """1 or 2 for a single-file NIfTI header at the start of `data`, else 0 (pairs and Analyze are 0)."""
    if len(data) >= 348:
        for order in "<>":
            (size,) = struct.unpack(order + "i", data[:4])
            if size == 348 and data[344:348] == b"n+1\x00":
                return 1
            if size == 540 and data[4:8] == b"n+2\x00":
                return 2
    return 0


def _cut_header(data: bytes) -> int | None:
    """1 or 2 when `data` starts like a NIfTI-1/2 header (sizeof_hdr, and the magic where it fits) but ends first."""
    if len(data) < 4:
        return None
    for order in "<>":
        (size,) = struct.unpack(order + "i", data[:4])
        if size == 348 and len(data) < 348:
            return 1
        if size == 540 and len(data) < 540 and (len(data) < 8 or data[4:8] == b"n+2\x00"):
            return 2
    return None


def _pair_or_analyze(data: bytes) -> str | None:
    if len(data) >= 348:
        for order in "<>":
            if struct.unpack(order + "i", data[:4])[0] == 348:
                return "NIfTI-1 header/image pair (.hdr/.img)" if data[344:348] == b"ni1\x00" else "Analyze 7.5"
    return None


class NiftiReader:
    """Reads single-file NIfTI-1/2, gzipped or not, whatever the file is named."""

    kind: ClassVar[str] = "nifti"

    def sniff(self, head: bytes) -> bool:
        """True for a NIfTI-1/2 single-file header, .hdr pairs/Analyze, or a header cut short (read rejects those)."""
        return nifti_version(head) > 0 or _pair_or_analyze(head) is not None or _cut_header(head) is not None

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Validate the header, inflate and check the whole stream, return canonical (C, X, Y, Z)."""
        source = self.open(path, limits, head)
        h = source.header
        return Volume(kind=h.kind, data=assemble(source), spacing=h.spacing, affine=h.affine,
                      orientation=h.orientation, warnings=h.warnings)

    def open(self, path: Path, limits: Limits, head: Head) -> NiftiSource:
        """Validate the header (and extensions); voxels are read only by `NiftiSource.slabs`."""
        cut = _cut_header(head.data)
        if cut is not None:
            raise Rejected(Reason.TRUNCATED, f"{len(head.data)} B of content; a NIfTI-{cut} header alone is "
                                             f"{348 if cut == 1 else 540} B")
        version = nifti_version(head.data)
        if version == 0:
            what = _pair_or_analyze(head.data) or "not a NIfTI header"
            raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{what}; only single-file .nii/.nii.gz is read")
        header_cls: type[nib.Nifti1Header] = nib.Nifti1Header if version == 1 else nib.Nifti2Header
        hdr = header_cls(head.data[: header_cls.template_dtype.itemsize], check=False)
        shape, dtype, nbytes, offset = _validate_header(hdr, limits)
        cap = offset + nbytes + _TRAILING_SLACK
        with ContentStream(path, gzipped=head.gzipped, cap=cap) as stream:
            prefix = memoryview(bytearray(offset))
            got = stream.readinto(prefix)
        if got < offset:
            raise Rejected(Reason.TRUNCATED,
                           f"{got:,} B of content, header and extensions end at vox_offset {offset:,}")
        try:
            full = header_cls.from_fileobj(io.BytesIO(bytes(prefix)))
            layout = _layout(full, shape, dtype, offset)
        except (HeaderDataError, ValueError, OSError, EOFError) as exc:
            raise Rejected(Reason.BAD_HEADER, f"nibabel cannot read the header: {exc}") from exc
        return NiftiSource(path, gzipped=head.gzipped, cap=cap, layout=layout)


@dataclass(frozen=True, slots=True)
class _Layout:
    """How the file's bytes map onto the canonical array."""

    header: VolumeHeader
    spatial: tuple[int, int, int]  # on-disk (X, Y, Z), padded with 1s
    channels: int  # on-disk volumes past the third axis (each a contiguous block)
    raw: np.dtype[Any]  # on-disk dtype, possibly structured (RGB) or non-native
    slope: float | None  # None: unscaled
    inter: float
    offset: int
    ornt: npt.NDArray[np.float64]  # on-disk axis -> canonical axis, flip


class NiftiSource:
    """A validated NIfTI file whose voxels stream as canonical slabs (see `VolumeSource`)."""

    def __init__(self, path: Path, *, gzipped: bool, cap: int, layout: _Layout) -> None:
        self._path, self._gzipped, self._cap, self._l = path, gzipped, cap, layout

    @property
    def header(self) -> VolumeHeader:
        """Canonical shape, output dtype and geometry; `stream_axis` is where on-disk z went."""
        return self._l.header

    def slab_count(self, chunks: Sequence[int]) -> int:
        """Slabs per channel (whole chunk rows along the stream axis) times channels."""
        return len(self._z_ranges(chunks)) * self._l.channels

    def slabs(self, chunks: Sequence[int], *, first: int = 0, stop: int | None = None) -> Iterator[Slab]:
        """Inflate slab `first` to `stop` in file order; past the last one, validate the rest of the stream."""
        lay = self._l
        X, Y, Z = lay.spatial
        ranges = self._z_ranges(chunks)
        count = len(ranges) * lay.channels
        stop = count if stop is None else min(stop, count)
        plane = X * Y * lay.raw.itemsize
        thick = max(z1 - z0 for z0, z1 in ranges)
        buf = memoryview(bytearray(plane * thick))
        scaled = None
        if lay.slope is not None:
            scaled = np.empty((X, Y, thick), dtype=lay.header.dtype, order="F")
        with ContentStream(self._path, gzipped=self._gzipped, cap=self._cap) as stream:
            start_at = lay.offset + (first // len(ranges)) * Z * plane + ranges[first % len(ranges)][0] * plane
            if stream.skip(start_at) < start_at:
                raise self._short(stream.position)
            for index in range(first, stop):
                channel, (z0, z1) = divmod(index, len(ranges))[0], ranges[index % len(ranges)]
                n = (z1 - z0) * plane
                if stream.readinto(buf[:n]) < n:
                    raise self._short(stream.position)
                raw = np.frombuffer(buf[:n], dtype=lay.raw).reshape((X, Y, z1 - z0), order="F")
                for field, data in enumerate(self._decode(raw, scaled)):
                    yield self._slab(channel + field * lay.channels, z0, z1, data)
            if stop == count:
                stream.finish()

    def _z_ranges(self, chunks: Sequence[int]) -> list[tuple[int, int]]:
        """On-disk z ranges, in file order, that each cover whole canonical chunks along the stream axis."""
        Z = self._l.spatial[2]
        axis, flip = int(self._l.ornt[2, 0]), self._l.ornt[2, 1] < 0
        step = max(1, int(chunks[axis + 1]))
        canon = [(lo, min(Z, lo + step)) for lo in range(0, Z, step)]
        if flip:
            return sorted((Z - hi, Z - lo) for lo, hi in canon)
        return canon

    def _decode(self, raw: npt.NDArray[Any], scaled: npt.NDArray[Any] | None) -> list[npt.NDArray[Any]]:
        """The slab's voxels in the output dtype: fields split (RGB), byte order native, scaling applied."""
        lay = self._l
        if raw.dtype.names:  # RGB24 / RGBA32: one channel per field
            return [raw[name] for name in raw.dtype.names]
        if scaled is None or lay.slope is None:
            if not raw.dtype.isnative:  # swap in the reused buffer: no copy of the slab
                raw = raw.byteswap(inplace=True).view(raw.dtype.newbyteorder("="))
            return [raw]
        out = scaled[:, :, : raw.shape[2]]
        for k in range(raw.shape[2]):  # plane by plane: nibabel's arithmetic, bounded temporaries
            out[:, :, k] = apply_read_scaling(raw[:, :, k], lay.slope, lay.inter)
        return [out]

    def _slab(self, channel: int, z0: int, z1: int, data: npt.NDArray[Any]) -> Slab:
        lay = self._l
        view = apply_orientation(data, lay.ornt)
        axis, flip = int(lay.ornt[2, 0]), lay.ornt[2, 1] < 0
        Z = lay.spatial[2]
        lo, hi = (Z - z1, Z - z0) if flip else (z0, z1)
        region = [slice(channel, channel + 1)] + [slice(0, n) for n in view.shape]
        region[axis + 1] = slice(lo, hi)
        return Slab(region=tuple(region), data=view[np.newaxis])

    def _short(self, position: int) -> Rejected:
        lay = self._l
        total = lay.offset + lay.channels * int(np.prod(lay.spatial)) * lay.raw.itemsize
        shape = "x".join(map(str, (*lay.spatial, lay.channels)))
        return Rejected(
            Reason.TRUNCATED,
            f"{position:,} B of content, header implies {total:,} B "
            f"(vox_offset {lay.offset} + {shape} x {lay.raw.itemsize} B)",
        )


def _validate_header(
    hdr: nib.Nifti1Header, limits: Limits
) -> tuple[tuple[int, ...], np.dtype[np.generic], int, int]:
    dim = [int(v) for v in hdr["dim"]]
    ndim = dim[0]
    if not 1 <= ndim <= 7:
        raise Rejected(Reason.BAD_HEADER, f"dim[0] = {ndim}, expected 1..7")
    shape = tuple(dim[1 : ndim + 1])
    if any(n < 1 for n in shape):
        raise Rejected(Reason.BAD_HEADER, f"dim = {list(shape)}, every extent must be >= 1")
    intent = int(hdr["intent_code"])
    if intent in _CIFTI_INTENTS:
        raise Rejected(Reason.UNSUPPORTED_FORMAT, f"CIFTI-2 (intent_code {intent}) holds surface data, not a volume")
    try:
        dtype = hdr.get_data_dtype()
    except (HeaderDataError, KeyError) as exc:
        raise Rejected(Reason.BAD_HEADER, f"datatype code {int(hdr['datatype'])} is not a NIfTI type") from exc
    if dtype.kind == "c":
        raise Rejected(Reason.UNSUPPORTED_FORMAT, f"complex voxels ({dtype}) are not stored")
    nvox = int(np.prod(shape, dtype=object))
    nbytes = nvox * dtype.itemsize
    if nbytes > limits.max_bytes:
        raise Rejected(
            Reason.TOO_LARGE,
            f"{'x'.join(map(str, shape))} = {nvox:,} voxels x {dtype.itemsize} B = {nbytes:,} B, "
            f"cap {limits.max_bytes:,} B",
        )
    if nvox > limits.max_voxels:
        raise Rejected(Reason.TOO_LARGE, f"{'x'.join(map(str, shape))} = {nvox:,} voxels, cap {limits.max_voxels:,}")
    offset = int(hdr["vox_offset"])
    if not hdr.template_dtype.itemsize <= offset <= _MAX_VOX_OFFSET:
        raise Rejected(Reason.BAD_HEADER,
                       f"vox_offset = {offset}, expected {hdr.template_dtype.itemsize}..{_MAX_VOX_OFFSET:,}")
    return shape, dtype, nbytes, offset


def _layout(hdr: nib.Nifti1Header, shape: tuple[int, ...], raw: np.dtype[Any], offset: int) -> _Layout:
    slope, inter = hdr.get_slope_inter()  # 0/NaN slopes and NaN intercepts are None; raises on an inf intercept
    if raw.fields or (slope in (None, 1.0) and inter in (None, 0.0)):
        out, slope = (np.dtype(np.uint8) if raw.fields else raw.newbyteorder("=")), None
    else:
        out = np.dtype(np.float64 if raw == np.float64 else np.float32)
    spatial = tuple(shape[:3]) + (1,) * (3 - min(3, len(shape)))
    channels = int(np.prod(shape[3:], dtype=np.int64)) if len(shape) > 3 else 1
    fields = len(raw.names) if raw.names else 1
    affine = np.asarray(hdr.get_best_affine(), dtype=np.float64)
    ornt = io_orientation(affine)
    source_codes = "".join(c or "?" for c in ornt2axcodes(ornt))  # aff2axcodes, without its own io_orientation
    canon_affine = affine @ inv_ornt_aff(ornt, spatial)
    canon = [0, 0, 0]
    for axis, (target, _) in enumerate(ornt):
        canon[int(target)] = spatial[axis]
    spacing = tuple(float(v) for v in np.sqrt((canon_affine[:3, :3] ** 2).sum(axis=0)))
    itemsize = raw.itemsize + (out.itemsize if slope is not None else 0)
    header = VolumeHeader(
        kind=NiftiReader.kind, shape=(channels * fields, *canon), dtype=out, spacing=spacing,
        affine=tuple(tuple(float(v) for v in row) for row in canon_affine), orientation=source_codes,
        stream_axis=int(ornt[2, 0]) + 1, voxel_bytes=itemsize,
    )
    return _Layout(header=header, spatial=(spatial[0], spatial[1], spatial[2]), channels=channels, raw=raw,
                   slope=None if slope is None else float(slope), inter=0.0 if inter is None else float(inter),
                   offset=offset, ornt=ornt)
