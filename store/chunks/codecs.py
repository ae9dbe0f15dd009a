"""A chunk's bytes-to-bytes codec chain, both ways: what the store is written with, and how its bytes decode.

Invariant: this module owns every codec labzarr builds or runs. `zarr_codecs` gives zarr the chain a spec
names (the compressor, then crc32c over the compressed bytes); `encoder` runs one codec of a chain exactly as
zarr-python runs it (the numcodecs codec zarr builds), for the shard writer; `decode_chunk` undoes a chain by
names, for the reader, and `chunk_decoder` gives the reader one function per chain, the default chain's (blosc,
crc32c) written out: its Python runs once a chunk in the read threads, between the calls that release the GIL
(`make bench`, loaders section, batched-reads group; tests/store/test_chunk_decoder.py checks it against
`decode_chunk`). A new compressor is added here and in `compressors.py`, nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import crc32c
import numcodecs
import numcodecs.blosc
import numcodecs.zstd
import numpy.typing as npt

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec

__all__ = ["BYTES_CODECS", "ChunkDamage", "Decode", "Encode", "EncodePieces", "chunk_decoder", "chunk_encoder",
           "decode_chunk", "encoder", "zarr_codecs"]

# The bytes-to-bytes codecs `decode_chunk` undoes; every one of them is self-describing (decoding needs no
# configuration), so a layout keeps only their names.
BYTES_CODECS = frozenset({"blosc", "zstd", "gzip", "crc32c"})

Encode = Callable[[bytes | npt.NDArray[Any]], bytes]
Decode = Callable[[bytes | memoryview], Any]
EncodePieces = Callable[[bytes | npt.NDArray[Any]], tuple[bytes, ...]]

_GZIP = numcodecs.GZip()


class ChunkDamage(ValueError):
    """A chunk's stored bytes that fail their checksum or do not decode; the message says which and why."""


def zarr_codecs(compressor: str, *, level: int, checksum: bool) -> tuple[BytesBytesCodec, ...]:
    """The bytes-to-bytes codecs zarr writes a chunk with: the compressor (`compressors.COMPRESSORS`), then crc32c
    over the compressed bytes when `checksum`."""
    import zarr.codecs  # a module that only names compressors (the spec) does without zarr

    out: list[BytesBytesCodec] = []
    if compressor == "zstd":
        out.append(zarr.codecs.ZstdCodec(level=level))
    elif compressor in ("blosc-zstd", "blosc-lz4"):
        out.append(zarr.codecs.BloscCodec(cname=zarr.codecs.BloscCname(compressor.removeprefix("blosc-")),
                                          clevel=level, shuffle=zarr.codecs.BloscShuffle.shuffle))
    elif compressor != "none":
        raise ValueError(f"compressor {compressor!r}")
    if checksum:
        out.append(zarr.codecs.Crc32cCodec())
    return tuple(out)


def encoder(codec: object) -> Encode | None:
    """The encoder of one bytes-to-bytes codec (its `zarr.json` entry) as zarr-python runs it, or None for a codec
    this module does not encode exactly so."""
    if not isinstance(codec, Mapping):
        return None
    name, conf = codec.get("name"), codec.get("configuration") or {}
    if name == "crc32c":
        return _crc32c
    if name == "zstd":
        zstd = numcodecs.Zstd(level=conf["level"], checksum=conf.get("checksum", False))
        return lambda data: bytes(zstd.encode(data))
    if name == "blosc":
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[conf["shuffle"]]
        try:  # numcodecs >= 0.16 takes the type size, as zarr-python passes it; older ones read the bytes' itemsize (1)
            blosc = numcodecs.Blosc(cname=conf["cname"], clevel=conf["clevel"], shuffle=shuffle,
                                    blocksize=conf.get("blocksize", 0), typesize=conf["typesize"])
        except TypeError:
            blosc = numcodecs.Blosc(cname=conf["cname"], clevel=conf["clevel"], shuffle=shuffle,
                                    blocksize=conf.get("blocksize", 0))
        return lambda data: bytes(blosc.encode(data))
    return None


def chunk_encoder(codecs: object) -> EncodePieces:
    """A chunk's encoder for an array whose `zarr.json` lists `codecs` (the `bytes` codec, then bytes-to-bytes
    ones, each as zarr-python runs it: `encoder`), as a function of the chunk's raw bytes giving the stored bytes in
    pieces to write one after the other: a trailing crc32c is its own piece, so a large chunk is not copied again
    to append four bytes. Raises ValueError for a chain this module does not encode exactly as zarr does, or for
    `codecs` that is not a list of codecs."""
    if not isinstance(codecs, Sequence) or isinstance(codecs, str):
        raise ValueError(f"a chunk chain {codecs!r}; expected a list of codecs")
    first, *rest = codecs or [None]
    if not isinstance(first, Mapping) or first.get("name") != "bytes":
        raise ValueError(f"a chunk chain starting with {first!r}; expected the bytes codec")
    trailer = bool(rest) and isinstance(rest[-1], Mapping) and rest[-1].get("name") == "crc32c"
    steps = []
    for codec in rest[:-1] if trailer else rest:
        step = encoder(codec)
        if step is None:
            raise ValueError(f"codec {codec!r}: not one this module encodes")
        steps.append(step)

    def encode(data: bytes | npt.NDArray[Any]) -> tuple[bytes, ...]:
        out: bytes | npt.NDArray[Any] = data
        for step in steps:
            out = step(out)
        body = out if isinstance(out, bytes) else bytes(out)
        return (body, crc32c.crc32c(body).to_bytes(4, "little")) if trailer else (body,)

    return encode


def _crc32c(data: bytes | npt.NDArray[Any]) -> bytes:
    raw = bytes(data)
    return raw + crc32c.crc32c(raw).to_bytes(4, "little")


def decode_chunk(data: bytes | memoryview, names: Sequence[str], nbytes: int) -> Any:
    """The raw bytes of one chunk stored as `data`, encoded by the codecs `names` (in encoding order, from
    `BYTES_CODECS`); raises ChunkDamage when a checksum fails, a codec cannot decode, or the result is not
    `nbytes` long. Returns a buffer (bytes or a memoryview of `data`)."""
    buf: Any = data
    for name in reversed(names):
        if name == "crc32c":
            buf = _crc32c_checked(buf)
            continue
        try:
            if name == "blosc":
                buf = numcodecs.blosc.decompress(buf)
            elif name == "zstd":
                buf = numcodecs.zstd.decompress(buf)
            else:
                buf = _GZIP.decode(buf)
        except Exception as exc:  # each decoder has its own error types; all mean the bytes are not a chunk
            raise ChunkDamage(f"{name} cannot decode it: {type(exc).__name__}: {exc}") from exc
    return _sized(buf, nbytes)


def _crc32c_checked(data: bytes | memoryview) -> memoryview:
    """`data` without its crc32c trailer, once the trailer matches."""
    view = memoryview(data)
    if len(view) < 4:
        raise ChunkDamage(f"{len(view)} B, too short for its crc32c")
    body = view[:-4]
    # The GIL kept (a chunk's checksum takes a few microseconds): releasing it, which the package does from 32 KiB
    # (about a compressed 32³ int16 chunk), hands it to another read thread and back for less work than the
    # handover costs.
    if crc32c.crc32c(body, gil_release_mode=0) != int.from_bytes(view[-4:], "little"):
        raise ChunkDamage("crc32c mismatch")
    return body


def _sized(buf: Any, nbytes: int) -> Any:
    if len(buf) != nbytes:
        raise ChunkDamage(f"decodes to {len(buf):,} B, expected {nbytes:,} B")
    return buf


def chunk_decoder(names: Sequence[str], nbytes: int) -> Decode:
    """`decode_chunk` for one chain and chunk size, as a function of the stored bytes alone. The chain labzarr
    writes by default (blosc, then crc32c) gets a function of its own with the same checks and messages: the read
    path's threads run it once a chunk between the GIL-free calls (the checksum, the decompression), so its
    Python is what they contend for."""
    if tuple(names) != ("blosc", "crc32c"):
        chain = tuple(names)
        return lambda data: decode_chunk(data, chain, nbytes)
    decompress = numcodecs.blosc.decompress

    def blosc_crc32c(data: bytes | memoryview) -> Any:
        body = _crc32c_checked(data)
        try:
            buf = decompress(body)
        except Exception as exc:  # as in decode_chunk: any error means the bytes are not a chunk
            raise ChunkDamage(f"blosc cannot decode it: {type(exc).__name__}: {exc}") from exc
        return _sized(buf, nbytes)

    return blosc_crc32c
