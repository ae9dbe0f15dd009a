"""`chunk_decoder`'s function for the default chain (blosc, then crc32c) against `decode_chunk`: the same bytes for
a chunk zarr's codecs wrote, the same ChunkDamage message for every kind of damage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from labzarr.store.chunks.codecs import ChunkDamage, chunk_decoder, chunk_encoder, decode_chunk, encoder

CHAIN = ("blosc", "crc32c")
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2,
                                            "blocksize": 0}}


def checked(body: bytes) -> bytes:
    """`body` with its crc32c, as the chain's last codec appends it."""
    crc = encoder({"name": "crc32c"})
    assert crc is not None
    return bytes(crc(body))


def stored(raw: bytes) -> bytes:
    """`raw` as zarr stores a chunk of the default layout: blosc-lz4 with shuffle, then its crc32c."""
    blosc, crc = encoder(BLOSC), encoder({"name": "crc32c"})
    assert blosc is not None and crc is not None
    return bytes(crc(blosc(raw)))


RAW = np.random.default_rng(0).integers(-1000, 3000, size=(16, 16, 16), dtype=np.int16).tobytes()


def outcome(decode: Callable[[bytes], object], data: bytes) -> tuple[str, bytes | str]:
    try:
        return "ok", bytes(memoryview(decode(data)))  # type: ignore[arg-type]
    except ChunkDamage as exc:
        return "damage", str(exc)


def flipped(data: bytes, at: int) -> bytes:
    blob = bytearray(data)
    blob[at] ^= 0x10
    return bytes(blob)


@pytest.mark.parametrize("case", ["good", "crc", "body", "short", "tiny", "garbage", "other size"])
def test_the_default_chain_decodes_as_decode_chunk(case: str) -> None:
    good = stored(RAW)
    data = {"good": good, "crc": flipped(good, len(good) - 2), "body": flipped(good, len(good) // 2),
            "short": good[:len(good) // 2], "tiny": good[:3],
            "garbage": checked(b"not a blosc frame, its crc32c right"),
            "other size": stored(RAW[:-2])}[case]
    fast = chunk_decoder(CHAIN, len(RAW))
    assert fast is not chunk_decoder(("zstd", "crc32c"), len(RAW))
    expected = outcome(lambda d: decode_chunk(d, CHAIN, len(RAW)), data)
    assert outcome(fast, data) == expected
    assert expected[0] == ("ok" if case == "good" else "damage")
    if case == "good":
        assert expected[1] == RAW


@pytest.mark.parametrize("compressor", ["blosc-lz4", "blosc-zstd", "zstd", "none"])
@pytest.mark.parametrize("checksum", [True, False])
def test_chunk_encoder_writes_the_chunks_zarr_writes(tmp_path: Path, compressor: str, checksum: bool) -> None:
    """`chunk_encoder`'s pieces, joined, are each chunk file zarr-python writes for the same array (an edge chunk
    padded with the fill value), and decode back through `decode_chunk`."""
    from labzarr.store.chunks.codecs import zarr_codecs
    from labzarr.store.format import nodes
    from labzarr.store.location import Folder

    values = np.random.default_rng(1).integers(0, 40, size=2500, dtype=np.uint8)
    array = nodes.create_array(Folder(tmp_path / "a"), shape=values.shape, dtype=np.dtype(np.uint8), chunks=(1000,),
                               shards=None, codecs=zarr_codecs(compressor, level=3, checksum=checksum),
                               dimension_names=None, attributes={}, config={"write_empty_chunks": True})
    array[:] = values
    codecs = array.metadata.to_dict()["codecs"]
    encode = chunk_encoder(codecs)
    names = [c["name"] for c in codecs[1:]]
    for k in range(3):
        chunk = np.zeros(1000, dtype=np.uint8)
        part = values[k * 1000:(k + 1) * 1000]
        chunk[:len(part)] = part
        pieces = encode(chunk)
        assert len(pieces) == (2 if checksum else 1)
        data = b"".join(pieces)
        assert data == (tmp_path / "a" / "c" / str(k)).read_bytes()
        assert bytes(memoryview(decode_chunk(data, names, 1000))) == chunk.tobytes()


def test_chunk_encoder_refuses_a_chain_it_cannot_write_as_zarr_does() -> None:
    with pytest.raises(ValueError, match="bytes codec"):
        chunk_encoder([BLOSC])
    with pytest.raises(ValueError, match="not one this module encodes"):
        chunk_encoder([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}])
