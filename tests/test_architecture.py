"""The store owns its bytes: each part of its format is read and written in one place (docs/design.md).

Each rule walks the package's source (`api/`, `convert/`, `loaders/`, `readers/`, `store/`) with `ast` and
fails naming every offending `file:line`:
- `zarr.json` is parsed (`json.load`/`json.loads` in a module that names a node document) only in
  `store/format/`;
- `isinstance` on a location or transport class only in `store/location/`;
- codecs (zarr's `*Codec` classes, numcodecs' compressors) are constructed only in `store/chunks/`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("api", "convert", "loaders", "readers", "store")
LOCATION_CLASSES = {"Folder", "UrlStore", "Zipped", "Location", "FolderTransport", "ZipTransport",
                    "FsspecTransport"}
CODEC_CLASSES = {"Blosc", "Zstd", "GZip", "LZ4", "Zlib", "BZ2", "LZMA", "Shuffle", "Delta"}  # numcodecs'


def sources() -> Iterator[tuple[str, ast.Module, str]]:
    for top in PACKAGE:
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text()
            yield path.relative_to(ROOT).as_posix(), ast.parse(text, str(path)), text


def _name(node: ast.expr) -> str:
    """`a.b.c` for an attribute chain, `c` for a name; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _name(node.value)
        return f"{head}.{node.attr}" if head else node.attr
    return ""


def calls(tree: ast.Module) -> Iterator[tuple[ast.Call, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, _name(node.func)


def json_parsing_of_nodes(rel: str, tree: ast.Module, text: str) -> list[str]:
    if rel.startswith("store/format/") or ("zarr.json" not in text and "ZARR_JSON" not in text):
        return []
    return [f"{rel}:{c.lineno}: {name}(...) in a module that handles zarr.json"
            for c, name in calls(tree) if name in ("json.loads", "json.load")]


def location_isinstance(rel: str, tree: ast.Module, text: str) -> list[str]:
    if rel.startswith("store/location/"):
        return []
    out = []
    for c, name in calls(tree):
        if name == "isinstance" and len(c.args) == 2:
            named = {_name(n).split(".")[-1] for n in ast.walk(c.args[1]) if isinstance(n, ast.Name | ast.Attribute)}
            if named & LOCATION_CLASSES:
                out.append(f"{rel}:{c.lineno}: isinstance(..., {ast.unparse(c.args[1])})")
    return out


def codec_construction(rel: str, tree: ast.Module, text: str) -> list[str]:
    if rel.startswith("store/chunks/"):
        return []
    out = []
    for c, name in calls(tree):
        last = name.split(".")[-1]
        if (last.endswith("Codec") and last[0].isupper()) or (last in CODEC_CLASSES and "numcodecs" in name):
            out.append(f"{rel}:{c.lineno}: {name}(...)")
    return out


@pytest.mark.parametrize("rule", [json_parsing_of_nodes, location_isinstance, codec_construction],
                         ids=lambda r: r.__name__)
def test_each_format_concern_has_one_owner(rule) -> None:
    found = [hit for rel, tree, text in sources() for hit in rule(rel, tree, text)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("rule, sample, expect", [
    (json_parsing_of_nodes, 'import json\ndef f(p):\n    return json.loads((p / "zarr.json").read_bytes())\n', 3),
    (location_isinstance, "def f(s):\n    return isinstance(s, UrlStore)\n", 2),
    (location_isinstance, "def f(s):\n    return isinstance(s, store.Folder | int)\n", 2),
    (codec_construction, "import zarr.codecs\nc = zarr.codecs.ZstdCodec(level=3)\n", 2),
    (codec_construction, "import numcodecs\nc = numcodecs.Blosc(cname='lz4')\n", 2),
])
def test_each_rule_names_the_offending_line(rule, sample: str, expect: int) -> None:
    found = rule("convert/x.py", ast.parse(sample), sample)
    assert len(found) == 1 and found[0].startswith(f"convert/x.py:{expect}:"), found
