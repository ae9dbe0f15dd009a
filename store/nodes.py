"""Reading zarr v3 node documents (`zarr.json`) of a store: the one place they are parsed.

Invariant: every caller that needs a node's metadata or attributes (the reader, `verify`, the converter's
bookkeeping) gets it from here, as a plain dict checked to be a JSON object; nothing else calls `json.loads` on
a `zarr.json`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .location import Transport

__all__ = ["ZARR_JSON", "NodeError", "array_nodes", "node_key", "parse_node", "read_node"]

ZARR_JSON = "zarr.json"


class NodeError(ValueError):
    """A `zarr.json` that is not a JSON object."""


def node_key(path: str) -> str:
    """The key of the node document of the node at `path` ("" for the root)."""
    path = path.strip("/")
    return f"{path}/{ZARR_JSON}" if path else ZARR_JSON


def parse_node(blob: bytes, where: str) -> dict[str, Any]:
    """The document in `blob` (the bytes of the `zarr.json` at `where`); raises NodeError."""
    try:
        doc = json.loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NodeError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise NodeError(f"{where}: not a JSON object")
    return doc


def read_node(transport: Transport, path: str) -> dict[str, Any]:
    """The document of the node at `path`; raises FileNotFoundError (no node there), NodeError."""
    key = node_key(path)
    return parse_node(transport.read(key), f"{transport.where}/{key}")


def array_nodes(transport: Transport, keys: Iterable[str], *, skip: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(path, document) of every array among the node documents in `keys` (a store's listing), by path; nodes
    below an array or below the top-level folder `skip`, and documents that do not parse, are left out."""
    found = sorted(k[: -len(ZARR_JSON)].rstrip("/") for k in keys
                   if k.rsplit("/", 1)[-1] == ZARR_JSON and not (skip and k.startswith(f"{skip}/")))
    out: list[tuple[str, dict[str, Any]]] = []
    arrays: set[str] = set()
    for path in found:
        parts = path.split("/")
        if any("/".join(parts[:n]) in arrays for n in range(1, len(parts))):
            continue  # below an array: its chunk folders hold no nodes of the hierarchy
        try:
            doc = read_node(transport, path)
        except (OSError, NodeError):
            continue
        if doc.get("node_type") == "array":
            out.append((path, doc))
            arrays.add(path)
    return out
