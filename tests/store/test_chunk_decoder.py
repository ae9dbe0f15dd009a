"""`chunk_decoder`'s function for the default chain (blosc, then crc32c) against `decode_chunk`: the same bytes for
a chunk zarr's codecs wrote, the same ChunkDamage message for every kind of damage."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from labzarr.store.chunks.codecs import ChunkDamage, chunk_decoder, decode_chunk, encoder

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
