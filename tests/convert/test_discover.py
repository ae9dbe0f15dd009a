from __future__ import annotations

import os
from pathlib import Path

import pytest

from labzarr.convert import normalize_id, walk
from labzarr.convert.discover import FileEntry, discover, glob_match
from labzarr.convert.spec import ItemsSpec


def entries(*rels: str) -> list[FileEntry]:
    return [FileEntry(rel, f"/raw/{rel}", 10) for rel in rels]


def test_discover_is_pure_and_assigns_ids() -> None:
    items = ItemsSpec(id_normalize=("strip", "casefold", "drop_separators", "strip_leading_zeros"))
    found = discover(entries("CASE-007.nii.gz", "case_7/b.nii", "notes.txt", ".DS_Store", "sub/Thumbs.db"), items)
    assert [c.item_id for c in found] == ["case7", "case7", None, None, None]
    assert found[3].excluded_by and "exclude" in found[3].excluded_by
    assert found[4].excluded_by
    assert found[2].excluded_by is None  # not excluded: it is ignored later, by content
    assert discover(entries("CASE-007.nii.gz"), items) == discover(entries("CASE-007.nii.gz"), items)


@pytest.mark.parametrize(("raw", "steps", "want"), [
    (" CASE-007 ", ("strip", "casefold", "drop_separators"), "case007"),
    ("case_7", ("casefold", "drop_separators", "strip_leading_zeros"), "case7"),
    ("Case 007", ("casefold", "drop_separators", "strip_leading_zeros"), "case7"),
    ("000", ("strip_leading_zeros",), "0"),
    ("A-10", ("strip_leading_zeros",), "A-10"),
    ("Cafe\u0301", (), "Caf\u00e9"),  # NFC always
])
def test_normalize_id(raw: str, steps: tuple[str, ...], want: str) -> None:
    assert normalize_id(raw, steps) == want


@pytest.mark.parametrize(("rel", "pattern", "want"), [
    ("a/b/.DS_Store", "**/.DS_Store", True), (".DS_Store", "**/.DS_Store", True), ("a/x.nii", "*.nii", False),
    ("x.nii", "*.nii", True), ("a/b/x.nii", "a/**/*.nii", True), ("a/x.nii", "a/**/*.nii", True),
])
def test_glob(rel: str, pattern: str, want: bool) -> None:
    assert glob_match(rel, pattern) is want


def test_include_filters() -> None:
    found = discover(entries("a/x.nii", "b/y.nii"), ItemsSpec(id_pattern=r"(?P<id>[xy])", include=("a/**",)))
    assert found[0].excluded_by is None and found[1].excluded_by and "include" in found[1].excluded_by


def test_walk_sorted_nfc_and_symlink_outside(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    (raw / "b").mkdir(parents=True)
    (raw / "b" / "z.nii").write_bytes(b"1")
    (raw / "a.nii").write_bytes(b"22")
    (raw / "Cafe\u0301_1.nii").write_bytes(b"3")  # NFD on disk
    secret = tmp_path / "secret.nii"
    secret.write_bytes(b"secret")
    os.symlink(secret, raw / "link_2.nii")
    os.symlink(raw / "a.nii", raw / "inside_3.nii")
    os.symlink(tmp_path, raw / "dirlink")
    found = walk(raw)
    rels = [e.rel for e in found]
    assert rels == sorted(rels)
    assert "Caf\u00e9_1.nii" in rels
    by = {e.rel: e for e in found}
    assert by["link_2.nii"].outside == str(secret) and by["link_2.nii"].size == 0
    assert by["dirlink"].outside is not None
    assert by["inside_3.nii"].outside is None and by["inside_3.nii"].size == 2
