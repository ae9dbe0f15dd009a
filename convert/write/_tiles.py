"""The compiled tile transposition behind `transpose.py` (which says why and when): imported only there, at the
first use, since importing it imports numba (and compiles the four element widths, or loads them from numba's
cache beside this file)."""

from __future__ import annotations

from typing import Any

import numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .transpose import MAX_EDGE, VECTOR_BYTES, tile_edge

__all__ = ["transpose"]


@intrinsic
def _tile(typingctx: Any, like: Any, src: Any, src_row: Any, dst: Any, dst_row: Any) -> Any:
    """Transpose one square tile of `like`'s elements (`tile_edge` on a side): row i, a vector of contiguous
    elements at src + i * src_row, becomes element i of the rows at dst + j * dst_row (addresses and steps in
    bytes)."""
    width = like.dtype.bitwidth
    edge = tile_edge(width // 8)
    sig = types.void(like, types.intp, types.intp, types.intp, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        _, src, src_row, dst, dst_row = args
        vector = ir.VectorType(ir.IntType(width), edge)
        pointer, intp, lanes = vector.as_pointer(), ir.IntType(64), ir.VectorType(ir.IntType(32), edge)

        def at(base: Any, step: Any, i: int) -> Any:
            return builder.inttoptr(builder.add(base, builder.mul(step, ir.Constant(intp, i))), pointer)

        rows = [builder.load(at(src, src_row, i), align=1) for i in range(edge)]
        # Round k swaps bit k of the row index with bit k of the column index, between rows r and r + k; after
        # every bit, row j holds column j.
        k = 1
        while k < edge:
            low = ir.Constant(lanes, [c if not c & k else edge + c - k for c in range(edge)])
            high = ir.Constant(lanes, [c + k if not c & k else edge + c for c in range(edge)])
            for r in range(edge):
                if not r & k:
                    a, b = rows[r], rows[r | k]
                    rows[r], rows[r | k] = builder.shuffle_vector(a, b, low), builder.shuffle_vector(a, b, high)
            k <<= 1
        for j, row in enumerate(rows):
            builder.store(row, at(dst, dst_row, j), align=1)
        return context.get_dummy_value()

    return sig, codegen


# Each width in any layout (an F- or C-contiguous chunk is cast to "A" rather than compiled again) into C order.
@numba.njit([f"void({t}[:, :, :, :], {t}[:, :, :, ::1])" for t in ("uint8", "uint16", "uint32", "uint64")],
            nogil=True, cache=True)
def transpose(view: Any, out: Any) -> None:  # pragma: no cover - compiled
    """`view` (c, x, y, z; x contiguous or flipped, x and z multiples of the tile edge) into the C-contiguous
    `out` of its shape and unsigned dtype (`transpose.fits`)."""
    nc, nx, ny, nz = view.shape
    sc, sx, sy, sz = view.strides
    size = view.itemsize
    edge = min(MAX_EDGE, VECTOR_BYTES // size)  # tile_edge(size), which numba cannot call
    src, dst = view.ctypes.data, out.ctypes.data
    row = ny * nz * size  # from the output's z-run of (x, y) to that of (x + 1, y)
    last = 0 if sx > 0 else edge - 1  # x flipped: a tile's x-runs are read from their lowest address, x descending
    step = row if sx > 0 else -row
    for c in range(nc):
        for y in range(ny):
            for z in range(0, nz, edge):
                for x in range(0, nx, edge):
                    # mypy reads the intrinsic's call as its typing function's (typingctx first)
                    _tile(view, src + c * sc + (x + last) * sx + y * sy + z * sz, sz,  # type: ignore[call-arg]
                          dst + (((c * nx + x + last) * ny + y) * nz + z) * size, step)
