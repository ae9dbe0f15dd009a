"""The layout of one zarr v3 array, read from its `zarr.json`: what `store.read` needs to find and decode chunks.

Invariant: a `Layout` exists only for arrays the reader decodes exactly as zarr-python does. `Layout.parse` is
pure (no I/O) and raises `UnsupportedLayout` with the reason for anything else (an array-to-array codec, a
codec it has no decoder for, an irregular chunk grid, a non-numeric data type, a shard index it cannot read),
so the caller can fall back to zarr-python for that array instead of guessing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Literal, cast

import numpy as np

from ..chunks.codecs import BYTES_CODECS
from ..chunks.shard import index_nbytes

__all__ = ["Layout", "UnsupportedLayout", "storage_grid", "storage_keys"]


_DTYPES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                     "float16", "float32", "float64", "complex64", "complex128"})
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class UnsupportedLayout(ValueError):
    """The array's metadata describes something the labzarr reader does not decode; `reason` says what."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self) -> tuple[type[UnsupportedLayout], tuple[str]]:
        return (UnsupportedLayout, (self.reason,))


@dataclass(frozen=True, slots=True)
class Layout:
    """How one array's chunks are keyed, laid out and encoded.

    `grid` is the shape of one stored object (a shard when `sharded`, else a chunk); `chunks` the shape of one
    decoded chunk (the inner chunk when sharded). Chunk bytes decode by undoing `codecs` (encoding order) from
    the last, then reading `stored_dtype` in C order; values are returned as `dtype` (native byte order).
    """

    shape: tuple[int, ...]
    dtype: np.dtype[np.generic]
    stored_dtype: np.dtype[np.generic]
    fill_value: np.generic
    grid: tuple[int, ...]
    chunks: tuple[int, ...]
    codecs: tuple[str, ...]
    key_prefix: str  # "c" + separator for the default encoding, "" for v2
    separator: str
    sharded: bool
    chunks_per_shard: tuple[int, ...]
    index_location: Literal["start", "end"]
    index_crc32c: bool
    attributes: Mapping[str, object]

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy does not pickle; the attributes travel as a dict and are wrapped again.
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return (_unpickle, ({**values, "attributes": dict(self.attributes)},))

    @property
    def index_nbytes(self) -> int:
        """The encoded size of one shard index (0 when not sharded)."""
        if not self.sharded:
            return 0
        return index_nbytes(self.chunks_per_shard, crc=self.index_crc32c)

    def key(self, coords: Sequence[int]) -> str:
        """The key (relative to the array) of the stored object at grid coordinates `coords`."""
        if not coords:
            return "c" if self.key_prefix else "0"
        return self.key_prefix + self.separator.join(map(str, coords))

    @classmethod
    def parse(cls, doc: Mapping[str, object]) -> Layout:
        """The layout `doc` (a parsed `zarr.json`) describes; raises `UnsupportedLayout` naming what is not handled."""
        if doc.get("zarr_format") != 3:
            raise UnsupportedLayout(f"zarr_format {doc.get('zarr_format')!r}, not 3")
        if doc.get("node_type") != "array":
            raise UnsupportedLayout(f"node_type {doc.get('node_type')!r}, not an array")
        if doc.get("storage_transformers") not in (None, []):
            raise UnsupportedLayout("storage transformers")
        shape = _ints(doc.get("shape"), "shape")
        data_type = doc.get("data_type")
        if not isinstance(data_type, str) or data_type not in _DTYPES:
            raise UnsupportedLayout(f"data_type {data_type!r}")
        dtype = np.dtype(data_type)
        grid = _ints(_named(doc.get("chunk_grid"), "chunk_grid", {"regular"})[1].get("chunk_shape"), "chunk_shape")
        if len(grid) != len(shape) or any(g <= 0 for g in grid):
            raise UnsupportedLayout(f"chunk_shape {list(grid)} for shape {list(shape)}")
        prefix, separator = _key_encoding(doc.get("chunk_key_encoding"))
        codecs = _codec_list(doc.get("codecs"), "codecs")
        first, first_conf = _named(codecs[0] if codecs else None, "codec", None)
        if first == "sharding_indexed":
            if len(codecs) > 1:
                raise UnsupportedLayout("codecs after sharding_indexed (a shard encoded whole cannot be read in part)")
            chunks = _ints(first_conf.get("chunk_shape"), "sharding chunk_shape")
            if len(chunks) != len(shape) or any(c <= 0 or g % c for g, c in zip(grid, chunks)):
                raise UnsupportedLayout(f"inner chunks {list(chunks)} do not tile shards {list(grid)}")
            inner = _codec_list(first_conf.get("codecs"), "sharding codecs")
            endian, chain = _serializer(inner, dtype)
            index_location = first_conf.get("index_location", "end")
            if index_location not in ("start", "end"):
                raise UnsupportedLayout(f"index_location {index_location!r}")
            index_codecs = [_named(c, "index codec", None) for c in _codec_list(first_conf.get("index_codecs"),
                                                                               "index_codecs")]
            names = [n for n, _ in index_codecs]
            if names not in (["bytes"], ["bytes", "crc32c"]) or index_codecs[0][1].get("endian", "little") != "little":
                raise UnsupportedLayout(f"shard index codecs {names} (labzarr reads bytes(little) [+ crc32c])")
            sharded, per_shard = True, tuple(g // c for g, c in zip(grid, chunks))
            index_crc = names[-1] == "crc32c"
        else:
            endian, chain = _serializer(codecs, dtype)
            sharded, chunks, per_shard, index_location, index_crc = False, grid, (), "end", False
        stored = dtype.newbyteorder("<" if endian == "little" else ">") if dtype.itemsize > 1 else dtype
        attributes = doc.get("attributes", {})
        if not isinstance(attributes, dict):
            raise UnsupportedLayout("attributes is not an object")
        return cls(shape=shape, dtype=dtype, stored_dtype=stored, fill_value=_fill(doc.get("fill_value"), dtype),
                   grid=grid, chunks=chunks, codecs=chain, key_prefix=prefix, separator=separator, sharded=sharded,
                   chunks_per_shard=per_shard, index_location="start" if index_location == "start" else "end",
                   index_crc32c=index_crc, attributes=MappingProxyType(dict(attributes)))


def storage_grid(doc: Mapping[str, object]) -> tuple[int, ...]:
    """How many stored objects (shards when sharded, else chunks) the array `doc` (a parsed `zarr.json`) has per
    axis; raises `UnsupportedLayout` naming what does not parse."""
    shape = _ints(doc.get("shape"), "shape")
    grid = _ints(_named(doc.get("chunk_grid"), "chunk_grid", {"regular"})[1].get("chunk_shape"), "chunk_shape")
    if len(grid) != len(shape) or any(g <= 0 for g in grid):
        raise UnsupportedLayout(f"chunk_shape {list(grid)} for shape {list(shape)}")
    return tuple(-(-n // g) for n, g in zip(shape, grid))


def storage_keys(doc: Mapping[str, object]) -> list[tuple[str, tuple[int, ...]]]:
    """(key, grid coordinates) of every stored object (a shard when sharded, else a chunk) `doc` (a parsed
    `zarr.json`) implies, in C order: its shape, regular grid and key encoding only, codecs unchecked (a cheap
    look at which files an array should have). Raises `UnsupportedLayout` naming what does not parse."""
    counts = storage_grid(doc)
    shape = _ints(doc.get("shape"), "shape")
    prefix, separator = _key_encoding(doc.get("chunk_key_encoding"))
    cells = itertools.product(*(range(n) for n in counts))
    if not shape:
        return [("c" if prefix else "0", ())]
    return [(prefix + separator.join(map(str, coords)), coords) for coords in cells]


def _unpickle(values: dict[str, Any]) -> Layout:
    return Layout(**{**values, "attributes": MappingProxyType(values["attributes"])})


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        raise UnsupportedLayout(f"{what} {value!r} is not a list of non-negative integers")
    return tuple(value)


def _named(value: object, what: str, allowed: set[str] | None) -> tuple[str, Mapping[str, object]]:
    """A `{"name": ..., "configuration": {...}}` object (or a bare name) as (name, configuration)."""
    if isinstance(value, str):
        name, conf = value, {}
    elif isinstance(value, dict) and isinstance(value.get("name"), str):
        name, conf = value["name"], value.get("configuration", {})
        if not isinstance(conf, dict):
            raise UnsupportedLayout(f"{what} {name!r} has a configuration that is not an object")
    else:
        raise UnsupportedLayout(f"{what} {value!r}")
    if allowed is not None and name not in allowed:
        raise UnsupportedLayout(f"{what} {name!r}")
    return name, conf


def _codec_list(value: object, what: str) -> list[object]:
    if not isinstance(value, list) or not value:
        raise UnsupportedLayout(f"{what} {value!r} is not a non-empty list")
    return value


def _key_encoding(value: object) -> tuple[str, str]:
    name, conf = _named(value, "chunk_key_encoding", {"default", "v2"})
    separator = conf.get("separator", "/" if name == "default" else ".")
    if separator not in ("/", "."):
        raise UnsupportedLayout(f"chunk key separator {separator!r}")
    assert isinstance(separator, str)
    return ("c" + separator if name == "default" else ""), separator


def _serializer(codecs: Sequence[object], dtype: np.dtype[np.generic]) -> tuple[str, tuple[str, ...]]:
    """(endian, bytes-to-bytes codec names) for a chunk's codec list: exactly `bytes`, then known compressors."""
    named = [_named(c, "codec", None) for c in codecs]
    name, conf = named[0]
    if name != "bytes":
        kind = "array-to-array" if name == "transpose" else "serializer"
        raise UnsupportedLayout(f"codec {name!r} ({kind}) is not handled; labzarr reads bytes + compressors")
    endian = conf.get("endian", "little" if dtype.itemsize == 1 else None)
    if endian not in ("little", "big"):
        raise UnsupportedLayout(f"bytes codec endian {endian!r} for {dtype}")
    assert isinstance(endian, str)
    rest = tuple(n for n, _ in named[1:])
    unknown = [n for n in rest if n not in BYTES_CODECS]
    if unknown:
        raise UnsupportedLayout(f"codec {unknown[0]!r} has no decoder here (known: {', '.join(sorted(BYTES_CODECS))})")
    return endian, rest


def _fill(value: object, dtype: np.dtype[np.generic]) -> np.generic:
    """The fill value as a numpy scalar of `dtype`, decoded as the zarr v3 spec writes it."""
    try:
        if dtype.kind == "b":
            if not isinstance(value, bool):
                raise TypeError(value)
            return _scalar(value, dtype)
        if dtype.kind == "c":
            if not isinstance(value, list) or len(value) != 2:
                raise TypeError(value)
            part = np.dtype(f"f{dtype.itemsize // 2}")
            real, imag = (complex(_float(v, part).item()) for v in value)
            return _scalar(real + 1j * imag, dtype)
        if dtype.kind == "f":
            return _float(value, dtype)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(value)
        return _scalar(value, dtype)  # numpy refuses a value out of the dtype's range (OverflowError)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnsupportedLayout(f"fill_value {value!r} for {dtype}") from exc


def _float(value: object, dtype: np.dtype[np.generic]) -> np.generic:
    if isinstance(value, str) and value.startswith("0x"):
        # The exact bit pattern (a NaN payload survives): reinterpret the big-endian integer as the float.
        bits = int(value, 16).to_bytes(dtype.itemsize, "big")
        return _scalar(np.frombuffer(bits, dtype=dtype.newbyteorder(">"))[0], dtype)
    if isinstance(value, str) and value in _FLOAT_WORDS:
        value = _FLOAT_WORDS[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _scalar(value, dtype)
    raise TypeError(value)


def _scalar(value: object, dtype: np.dtype[np.generic]) -> np.generic:
    return cast(np.generic, np.asarray(value, dtype=dtype)[()])
