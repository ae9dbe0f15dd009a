"""The compiled kernels behind `_batched.py` (which says why and when): imported only there, at the first batched
read that can use them, since importing this imports numba (and compiles the kernels, or loads them from numba's
cache beside this file).

The tables the kernels take are int64 arrays whose columns are named below; every address in them is a buffer
the caller keeps alive for the call (the batch, the shard indexes, the fill values, the file descriptors' files).
C functions are called through their addresses, passed in as arguments, never baked into the compiled code: a
cached kernel is then valid in any process, whatever address the libraries were loaded at.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils as _cgutils
from numba.core import types
from numba.extending import intrinsic

__all__ = ["MAX_NDIM", "plan", "shifts", "work"]

MAX_NDIM = 8  # axes of an array the tables hold; an array of more is read by the Python path

# `arrays`, a row per array a batch reads: its geometry, element size and fill value.
A_NDIM, A_ITEMSIZE, A_NBYTES, A_FILL, A_SHAPE, A_CHUNK, A_PER = 0, 1, 2, 3, 4, 4 + MAX_NDIM, 4 + 2 * MAX_NDIM
A_COLUMNS = 4 + 3 * MAX_NDIM
# `regions`, a row per region read: its array's row, where its box starts in memory, its first row in `shards`,
# the box in the array, its byte strides, and the box of shards it meets (first shard, shards per axis).
R_ARRAY, R_DEST, R_SHARDS, R_START, R_STOP = 0, 1, 2, 3, 3 + MAX_NDIM
R_STRIDES, R_SHARD_LO, R_SHARD_N = 3 + 2 * MAX_NDIM, 3 + 3 * MAX_NDIM, 3 + 4 * MAX_NDIM
R_COLUMNS = 3 + 5 * MAX_NDIM
# `shards`, a row per shard a region meets (in C order of the region's box of shards): the file descriptor its
# chunks are read from and the address of its index (0 for a shard never written: every chunk is fill value).
S_FD, S_INDEX = 0, 1
S_COLUMNS = 2
# `chunks`, what `plan` returns, a row per stored chunk the batch touches: its array, file, byte range (offset -1,
# the index's ABSENT: the fill value), and its parts' span in the `parts` array (the regions it fills), then its
# grid coordinates.
C_ARRAY, C_FD, C_OFFSET, C_NBYTES, C_FIRST, C_END, C_COORDS = 0, 1, 2, 3, 4, 5, 6
C_COLUMNS = 6 + MAX_NDIM

# What `work` reports per chunk: 0 placed; else why the Python path must read it again (it then raises the error
# it always raised, or reads what the kernel could not).
OK, SHORT_READ, TOO_SHORT, CRC_MISMATCH, HEADER, DECOMPRESS, TOO_LONG = 0, 1, 2, 3, 4, 5, 6

cgutils: Any = _cgutils  # numba's code-generation helpers, unannotated

_ABSENT = -1  # the index's ABSENT (2**64 - 1) as int64
_BLOSC_HEADER = 16


def _intrinsic(typing: Callable[..., Any]) -> Any:
    """numba's `intrinsic`, typed as what it is to its callers here: a function of the codegen's arguments (mypy
    would read each call as one of `typing`, its typing context first)."""
    return intrinsic(typing)


@_intrinsic
def _load_i64(typingctx: Any, addr: Any) -> Any:
    """The little-endian int64 at byte address `addr` (any alignment)."""
    sig = types.int64(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return sig, codegen


@_intrinsic
def _load_u32(typingctx: Any, addr: Any) -> Any:
    """The little-endian uint32 at byte address `addr` (any alignment), widened to int64."""
    sig = types.int64(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = builder.inttoptr(args[0], ir.IntType(32).as_pointer())
        return builder.zext(builder.load(ptr, align=1), ir.IntType(64))

    return sig, codegen


@_intrinsic
def _copy(typingctx: Any, dst: Any, src: Any, n: Any) -> Any:
    """memcpy of `n` bytes from address `src` to address `dst` (the two never overlap here)."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        byte = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(args[0], byte), builder.inttoptr(args[1], byte), args[2], 1)
        return context.get_dummy_value()

    return sig, codegen


@_intrinsic
def _crc32c_word(typingctx: Any, crc: Any, addr: Any) -> Any:
    """crc32c's raw update (no inversions) of `crc` by the 8 bytes at `addr`: SSE4.2's crc32 instruction."""
    sig = types.int64(types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]),
                                            "llvm.x86.sse42.crc32.64.64")
        word = builder.load(builder.inttoptr(args[1], i64.as_pointer()), align=1)
        return builder.call(fn, [args[0], word])

    return sig, codegen


@_intrinsic
def _crc32c_byte(typingctx: Any, crc: Any, addr: Any) -> Any:
    """crc32c's raw update of `crc` (its low 32 bits) by the byte at `addr`."""
    sig = types.int64(types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, i8]),
                                            "llvm.x86.sse42.crc32.32.8")
        byte = builder.load(builder.inttoptr(args[1], i8.as_pointer()))
        return builder.zext(builder.call(fn, [builder.trunc(args[0], i32), byte]), i64)

    return sig, codegen


@_intrinsic
def _pread(typingctx: Any, fn: Any, fd: Any, buf: Any, n: Any, offset: Any) -> Any:
    """libc's `pread(fd, buf, n, offset)` through its address `fn`."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, i64, byte = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i64, [i32, byte, i64, i64])
        call = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.call(call, [builder.trunc(args[1], i32), builder.inttoptr(args[2], byte), args[3], args[4]])

    return sig, codegen


@_intrinsic
def _decompress(typingctx: Any, fn: Any, src: Any, dst: Any, n: Any) -> Any:
    """c-blosc's `blosc_decompress_ctx(src, dst, n, 1)` through its address `fn` (its own context, one thread:
    safe from any number of threads at once, as its global-context sibling is not)."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, i64, byte = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i32, [byte, byte, i64, i32])
        call = builder.inttoptr(args[0], fnty.as_pointer())
        ret = builder.call(call, [builder.inttoptr(args[1], byte), builder.inttoptr(args[2], byte), args[3],
                                  ir.Constant(i32, 1)])
        return builder.sext(ret, i64)

    return sig, codegen


@_intrinsic
def _take_next(typingctx: Any, counter: Any) -> Any:
    """Atomically add 1 to `counter[0]` (an int64 array) and return its value before: how the threads running
    `work` on one batch share its chunks out, each taking the next one when free."""
    sig = types.int64(counter)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(64), 1), "monotonic")

    return sig, codegen


_TABLE = "int64[:, ::1]"


@numba.njit(f"Tuple((int64[:, ::1], int64[::1]))({_TABLE}, {_TABLE}, {_TABLE})", nogil=True, cache=True)
def plan(arrays: Any, regions: Any, shards: Any) -> Any:  # pragma: no cover - compiled
    """The stored chunks `regions` touch, each once however many regions share it (a `chunks` table, sorted by
    array and chunk), and for each chunk the regions it fills (`parts`, spans in the table)."""
    nreg = regions.shape[0]
    total = 0
    for r in range(nreg):
        a = regions[r, R_ARRAY]
        n = 1
        for ax in range(arrays[a, A_NDIM]):
            c = arrays[a, A_CHUNK + ax]
            lo, hi = regions[r, R_START + ax], regions[r, R_STOP + ax]
            n *= 0 if hi <= lo else (hi - 1) // c - lo // c + 1
        total += n
    keys = np.empty(total, np.int64)
    owner = np.empty(total, np.int64)
    coords = np.zeros((total, MAX_NDIM), np.int64)
    narr = arrays.shape[0]
    p = 0
    first = np.zeros(MAX_NDIM, np.int64)
    last = np.zeros(MAX_NDIM, np.int64)
    at = np.zeros(MAX_NDIM, np.int64)
    for r in range(nreg):
        a = regions[r, R_ARRAY]
        nd = arrays[a, A_NDIM]
        empty = False
        for ax in range(nd):
            c = arrays[a, A_CHUNK + ax]
            lo, hi = regions[r, R_START + ax], regions[r, R_STOP + ax]
            if hi <= lo:
                empty = True
            first[ax], last[ax] = lo // c, (hi - 1) // c
            at[ax] = first[ax]
        if empty:
            continue
        while True:
            linear = 0
            for ax in range(nd):
                grid = (arrays[a, A_SHAPE + ax] + arrays[a, A_CHUNK + ax] - 1) // arrays[a, A_CHUNK + ax]
                linear = linear * grid + at[ax]
                coords[p, ax] = at[ax]
            keys[p] = linear * narr + a
            owner[p] = r
            p += 1
            ax = nd - 1
            while ax >= 0:
                at[ax] += 1
                if at[ax] <= last[ax]:
                    break
                at[ax] = first[ax]
                ax -= 1
            if ax < 0:
                break
    order = np.argsort(keys, kind="mergesort")
    parts = np.empty(total, np.int64)
    nchunks = 0
    for j in range(total):
        if j == 0 or keys[order[j]] != keys[order[j - 1]]:
            nchunks += 1
    chunks = np.empty((nchunks, C_COLUMNS), np.int64)
    k = -1
    for j in range(total):
        q = order[j]
        parts[j] = owner[q]
        if j > 0 and keys[q] == keys[order[j - 1]]:
            chunks[k, C_END] = j + 1
            continue
        k += 1
        r = owner[q]
        a = regions[r, R_ARRAY]
        nd = arrays[a, A_NDIM]
        row = 0  # the chunk's shard, in the region's box of shards (C order)
        local = 0  # the chunk's place in its shard's index (C order)
        for ax in range(nd):
            per = arrays[a, A_PER + ax]
            row = row * regions[r, R_SHARD_N + ax] + coords[q, ax] // per - regions[r, R_SHARD_LO + ax]
            local = local * per + coords[q, ax] % per
            chunks[k, C_COORDS + ax] = coords[q, ax]
        row += regions[r, R_SHARDS]
        chunks[k, C_ARRAY] = a
        chunks[k, C_FD] = shards[row, S_FD]
        chunks[k, C_FIRST] = j
        chunks[k, C_END] = j + 1
        index = shards[row, S_INDEX]
        offset = _ABSENT if index == 0 else _load_i64(index + 16 * local)
        if offset == _ABSENT:
            chunks[k, C_OFFSET], chunks[k, C_NBYTES] = _ABSENT, 0
        else:
            chunks[k, C_OFFSET], chunks[k, C_NBYTES] = offset, _load_i64(index + 16 * local + 8)
    return chunks, parts


STRIPE = 2048  # bytes of each of the three streams crc32c runs over at once


@numba.njit(nogil=True, cache=True)
def _raw(crc: int, addr: int, n: int) -> int:  # pragma: no cover - compiled
    """crc32c's raw state `crc` (no inversions) updated by the `n` bytes at `addr`, one instruction a word."""
    end = addr + n
    while addr + 8 <= end:
        crc = _crc32c_word(crc, addr)
        addr += 8
    while addr < end:
        crc = _crc32c_byte(crc, addr)
        addr += 1
    return crc


@numba.njit("uint32[:, :, ::1]()", nogil=True, cache=True)
def shifts() -> Any:  # pragma: no cover - compiled
    """Tables of the linear maps that advance crc32c's raw state over `STRIPE` and 2 x `STRIPE` zero bytes, a
    table of 256 entries per byte of the state (`_advance`): what joins three streams' states into one."""
    out = np.zeros((2, 4, 256), np.uint32)
    zeros = np.zeros(2 * STRIPE, np.uint8)
    for t in range(2):
        for bit in range(32):
            moved = _raw(1 << bit, zeros.ctypes.data, (t + 1) * STRIPE) & 0xFFFFFFFF
            byte, low = bit // 8, bit % 8
            for v in range(256):
                if v >> low & 1:
                    out[t, byte, v] ^= moved
    return out


@numba.njit(nogil=True, cache=True)
def _advance(tables: Any, t: int, crc: int) -> Any:  # pragma: no cover - compiled
    return (tables[t, 0, crc & 0xFF] ^ tables[t, 1, (crc >> 8) & 0xFF] ^ tables[t, 2, (crc >> 16) & 0xFF]
            ^ tables[t, 3, (crc >> 24) & 0xFF])


@numba.njit(nogil=True, cache=True)
def _crc32c(tables: Any, addr: int, n: int) -> int:  # pragma: no cover - compiled
    """The crc32c of the `n` bytes at `addr`. The crc32 instruction takes a word a cycle but returns its state
    three cycles later, so one stream of words runs at a third of its rate: blocks of three `STRIPE`-byte
    streams are run side by side and their states joined (`tables` from `shifts`)."""
    crc = 0xFFFFFFFF
    while n >= 3 * STRIPE:
        a, b, c = crc, 0, 0
        for i in range(0, STRIPE, 8):
            a = _crc32c_word(a, addr + i)
            b = _crc32c_word(b, addr + STRIPE + i)
            c = _crc32c_word(c, addr + 2 * STRIPE + i)
        crc = _advance(tables, 1, a & 0xFFFFFFFF) ^ _advance(tables, 0, b & 0xFFFFFFFF) ^ (c & 0xFFFFFFFF)
        addr += 3 * STRIPE
        n -= 3 * STRIPE
    return (_raw(crc, addr, n) & 0xFFFFFFFF) ^ 0xFFFFFFFF


@numba.njit(nogil=True, cache=True)
def _place(arrays: Any, regions: Any, a: int, r: int, coords: Any, k: int, src: int,
           fill: bool) -> None:  # pragma: no cover - compiled
    """Copy the part of chunk `k` (decoded at address `src`; or the fill value) that region `r` needs into it."""
    nd = arrays[a, A_NDIM]
    size = arrays[a, A_ITEMSIZE]
    src_off = 0
    dst_off = 0
    ext = np.empty(MAX_NDIM, np.int64)
    sstep = np.empty(MAX_NDIM, np.int64)
    step = size
    for ax in range(nd - 1, -1, -1):
        sstep[ax] = step
        step *= arrays[a, A_CHUNK + ax]
    for ax in range(nd):
        c = arrays[a, A_CHUNK + ax]
        c0 = coords[k, C_COORDS + ax] * c
        lo = max(regions[r, R_START + ax], c0)
        hi = min(regions[r, R_STOP + ax], c0 + c)
        ext[ax] = hi - lo
        src_off += (lo - c0) * sstep[ax]
        dst_off += (lo - regions[r, R_START + ax]) * regions[r, R_STRIDES + ax]
    inner = nd - 1
    run = ext[inner]
    dstep = regions[r, R_STRIDES + inner]
    dest = regions[r, R_DEST]
    at = np.zeros(MAX_NDIM, np.int64)
    while True:
        s, d = src_off, dst_off
        for ax in range(inner):
            s += at[ax] * sstep[ax]
            d += at[ax] * regions[r, R_STRIDES + ax]
        if fill:
            for i in range(run):
                _copy(dest + d + i * dstep, arrays[a, A_FILL], size)
        elif dstep == size:
            _copy(dest + d, src + s, run * size)
        else:
            for i in range(run):
                _copy(dest + d + i * dstep, src + s + i * size, size)
        ax = inner - 1
        while ax >= 0:
            at[ax] += 1
            if at[ax] < ext[ax]:
                break
            at[ax] = 0
            ax -= 1
        if ax < 0:
            break


@numba.njit(nogil=True, cache=True)
def work(arrays: Any, regions: Any, chunks: Any, parts: Any, status: Any, counter: Any, pread: int,
         decompress: int, tables: Any) -> None:  # pragma: no cover - compiled
    """Read, check, decode and place chunks of `chunks` into their regions, taking the next one from `counter`
    until none is left (any number of threads may run this on one batch at once); `status[k]` says whether chunk
    k was placed (OK) or why not. Checks, as the Python path's decoder: the read is whole, the crc32c trailer
    matches the rest, blosc's header says the chunk's size and the stored length, and blosc decodes exactly that."""
    nchunks = chunks.shape[0]
    if counter[0] >= nchunks:
        return
    biggest = 0
    for k in range(nchunks):
        biggest = max(biggest, arrays[chunks[k, C_ARRAY], A_NBYTES])
    # c-blosc stores a chunk it cannot shrink as a copy after its header: no frame of a chunk is longer than
    # the chunk and the header, and the crc32c's 4 bytes after it. A longer one (another writer's, or an index
    # out of its mind) is declined unread, not allocated.
    stored = np.empty(biggest + _BLOSC_HEADER + 4, np.uint8)
    decoded = np.empty(max(biggest, 1), np.uint8)
    while True:
        # Addresses taken afresh each time round: numba frees an array after its last use, so the buffers must
        # be used in the loop to live through it.
        src, dst = stored.ctypes.data, decoded.ctypes.data
        k = _take_next(counter)
        if k >= nchunks:
            return
        a = chunks[k, C_ARRAY]
        n = chunks[k, C_NBYTES]
        if chunks[k, C_OFFSET] == _ABSENT:
            for j in range(chunks[k, C_FIRST], chunks[k, C_END]):
                _place(arrays, regions, a, parts[j], chunks, k, 0, True)
            status[k] = OK
            continue
        if n < 0 or n > arrays[a, A_NBYTES] + _BLOSC_HEADER + 4:
            status[k] = TOO_LONG
            continue
        if _pread(pread, chunks[k, C_FD], src, n, chunks[k, C_OFFSET]) != n:
            status[k] = SHORT_READ
            continue
        if n < 4 + _BLOSC_HEADER:
            status[k] = TOO_SHORT
            continue
        if _crc32c(tables, src, n - 4) != _load_u32(src + n - 4):
            status[k] = CRC_MISMATCH
            continue
        want = arrays[a, A_NBYTES]
        if _load_u32(src + 4) != want or _load_u32(src + 12) != n - 4:
            status[k] = HEADER
            continue
        if _decompress(decompress, src, dst, want) != want:
            status[k] = DECOMPRESS
            continue
        for j in range(chunks[k, C_FIRST], chunks[k, C_END]):
            _place(arrays, regions, a, parts[j], chunks, k, dst, False)
        status[k] = OK
