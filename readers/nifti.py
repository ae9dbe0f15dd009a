"""NIfTI-1 and NIfTI-2 single-file volumes (`.nii`, `.nii.gz`), sniffed by content.

Invariant: a returned Volume's header was validated before any voxel was read,
the whole (gzip) stream was inflated and checked, and its data is in
canonical RAS order (`nibabel.as_closest_canonical`), channels first.

Dtype rule: without scaling (scl_slope 0, 1 or NaN and scl_inter 0 or NaN) the
on-disk dtype is kept, in native byte order; with scaling, voxels become
float32 (float64 when the file stores float64), as `slope * raw + inter`.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import ClassVar

import nibabel as nib
import numpy as np
import numpy.typing as npt
from nibabel.orientations import aff2axcodes, apply_orientation, inv_ornt_aff, io_orientation
from nibabel.spatialimages import HeaderDataError

from ._head import Head
from ._stream import read_stream
from .reasons import Reason, Rejected
from .records import Limits, Volume

__all__ = ["NiftiReader", "nifti_version"]

_CIFTI_INTENTS = range(3000, 3100)


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
        """True for a NIfTI-1/2 single-file header, and for .hdr pairs/Analyze (read rejects those)."""
        return nifti_version(head) > 0 or _pair_or_analyze(head) is not None

    def read(self, path: Path, limits: Limits, head: Head) -> Volume:
        """Validate the header, inflate and check the whole stream, return canonical (C, X, Y, Z)."""
        version = nifti_version(head.data)
        if version == 0:
            what = _pair_or_analyze(head.data) or "not a NIfTI header"
            raise Rejected(Reason.UNSUPPORTED_FORMAT, f"{what}; only single-file .nii/.nii.gz is read")
        header_cls = nib.Nifti1Header if version == 1 else nib.Nifti2Header
        image_cls = nib.Nifti1Image if version == 1 else nib.Nifti2Image
        hdr = header_cls(head.data[: header_cls.template_dtype.itemsize], check=False)
        shape, dtype, nbytes, offset = _validate_header(hdr, limits)
        # Extensions sit between the header and vox_offset; allow 1 MiB of trailing padding.
        data = read_stream(path, gzipped=head.gzipped, cap=offset + nbytes + (1 << 20))
        if len(data) < offset + nbytes:
            raise Rejected(
                Reason.TRUNCATED,
                f"{len(data):,} B of content, header implies {offset + nbytes:,} B "
                f"(vox_offset {offset} + {'x'.join(map(str, shape))} x {dtype.itemsize} B)",
            )
        try:
            img = image_cls.from_bytes(data)
            raw = np.asanyarray(img.dataobj)
        except (HeaderDataError, ValueError, OSError, EOFError) as exc:
            raise Rejected(Reason.BAD_HEADER, f"nibabel cannot read the image: {exc}") from exc
        return _canonical(raw, img, hdr)


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
    offset = int(hdr["vox_offset"])
    if offset < hdr.template_dtype.itemsize:
        raise Rejected(Reason.BAD_HEADER, f"vox_offset = {offset}, must be >= {hdr.template_dtype.itemsize}")
    return shape, dtype, nbytes, offset


def _canonical(raw: npt.NDArray[np.generic], img: nib.Nifti1Image, hdr: nib.Nifti1Header) -> Volume:
    data = _as_output_dtype(raw, hdr)
    spatial = tuple(data.shape[:3]) + (1,) * (3 - min(3, data.ndim))
    data = data.reshape(spatial + (-1,), order="F")  # (X, Y, Z, C): every axis past z is a channel
    affine = np.asarray(img.affine, dtype=np.float64)
    source_codes = "".join(c or "?" for c in aff2axcodes(affine))
    ornt = io_orientation(affine)
    if not np.array_equal(ornt, [[0, 1], [1, 1], [2, 1]]):
        data = apply_orientation(data, ornt)
        affine = affine @ inv_ornt_aff(ornt, spatial)
    data = np.ascontiguousarray(np.moveaxis(data, 3, 0))
    spacing = tuple(float(v) for v in np.sqrt((affine[:3, :3] ** 2).sum(axis=0)))
    return Volume(
        kind=NiftiReader.kind,
        data=data,
        spacing=spacing,
        affine=tuple(tuple(float(v) for v in row) for row in affine),
        orientation=source_codes,
    )


def _as_output_dtype(raw: npt.NDArray[np.generic], hdr: nib.Nifti1Header) -> npt.NDArray[np.generic]:
    if raw.dtype.fields:  # RGB24 / RGBA32: one channel per field
        return np.stack([raw[name] for name in raw.dtype.names or ()], axis=-1)
    slope, inter = hdr.get_slope_inter()  # nibabel maps 0/NaN slopes and NaN intercepts to None
    if slope in (None, 1.0) and inter in (None, 0.0):
        return raw.astype(raw.dtype.newbyteorder("="), copy=False)
    out = np.float64 if hdr.get_data_dtype() == np.float64 else np.float32
    return raw.astype(out, copy=False)
