"""`labzarr init`: a first spec measured on a delivery's real files, every default written out, loadable as is."""

from __future__ import annotations

import re
import shutil
from dataclasses import fields, replace
from pathlib import Path

import pytest

from labzarr.convert import UsageError, convert_delivery, load_spec
from labzarr.convert.check import check_delivery
from labzarr.convert.cli import main
from labzarr.convert.demo import EXPECTED, EXPECTED_LABELS, NIBABEL_DATA, write_demo
from labzarr.convert.init import init_delivery
from labzarr.convert.init.template import LabelsChoice, render
from labzarr.convert.spec import (
    AnnotationsSpec,
    DicomSpec,
    ItemsSpec,
    LabelsSpec,
    ManifestSpec,
    MasksSpec,
    RunSpec,
    SplitsSpec,
    StoreSpec,
    ValidateSpec,
)
from labzarr.readers import WorkbookLimits

from ..dicom_data import ct_series

# Five different volumes in two folders whose names match the default pattern before the file names do.
BATCHES = {"batch2/case001.nii": "anatomical.nii", "batch2/case002.nii": "functional.nii",
           "batch2/case003.nii.gz": "standard.nii.gz", "batch3/case004.nii.gz": "example4d.nii.gz",
           "batch3/case005.nii": "reoriented_anat_moved.nii"}


def batches(raw: Path) -> Path:
    for rel, name in BATCHES.items():
        (raw / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(NIBABEL_DATA / name, raw / rel)
    return raw


def minimal(root: Path, spec_text: str) -> Path:
    path = root / "manifests" / "lab" / "minimal.toml"
    path.write_text(spec_text)
    return path


def same_spec(written: Path, other: Path, root: Path) -> None:
    a, b = load_spec(written, root=root), load_spec(other, root=root)
    assert replace(a, path=b.path, sha256=b.sha256) == b


def test_init_on_a_workbook_delivery_finds_sheet_and_id_column(tmp_path: Path) -> None:
    raw = write_demo(tmp_path / "data" / "raw" / "lab")
    result = init_delivery("lab", raw, root=tmp_path)
    assert result.path == tmp_path / "manifests" / "lab" / "delivery.toml"
    text = result.path.read_text()
    # Formats by content, as discovery sniffs them; paths relative to the project root.
    assert "# Files found (34), by content (not by name): nifti 19, dicom 10, other (no reader) 2, text 2, excluded 1" \
        in text
    assert "\nraw = 'data/raw/lab'" in text and "\nstore = 'data/stores/lab.zarr'" in text
    # The demo's workbook: labels on its third sheet, under two merged title rows; case_5 vs case_005 -> zeros dropped.
    assert "sheet = 'Annotations v2'" in text and "id_column = 'A'" in text
    assert "IDs in column A ('Case') below header row 3" in text and "18 of their 19 IDs match an item" in text
    assert "id_normalize = ['strip', 'casefold', 'drop_separators', 'strip_leading_zeros']" in text
    assert re.search(r"# cell_type = 'F' +# 'Cell type': filled in 18 of 19 ID rows; 4 values: astrocyte", text)
    same_spec(result.path, minimal(tmp_path, f"""[delivery]
name = "lab"
raw = "data/raw/lab"
store = "data/stores/lab.zarr"
[items]
id_pattern = '{ItemsSpec().id_pattern}'
id_normalize = ["strip", "casefold", "drop_separators", "strip_leading_zeros"]
[labels]
workbook = "labels/annotations.xlsx"
sheet = "Annotations v2"
"""), tmp_path)


def test_init_picks_an_id_pattern_that_keeps_distinct_files_apart(tmp_path: Path) -> None:
    raw = batches(tmp_path / "data" / "raw" / "lab")
    result = init_delivery("lab", raw, root=tmp_path)
    assert result.chosen.pattern.where == "in the file name" and len(result.chosen.ids) == 5
    assert not result.chosen.collisions
    default = result.trials[0]
    assert [(c.item_id, c.contents) for c in default.collisions] == [("batch2", 3), ("batch3", 2)]
    text = result.path.read_text()
    assert "#   first match in the path, the default: 2 IDs, 2 collision(s) (5 contents), 0 file(s) without an ID" \
        in text
    assert "#   in the file name: 5 IDs, 0 collision(s), 0 file(s) without an ID  <- chosen" in text
    assert "# [labels]" in text and "no .xlsx under raw" in text  # the section, commented out
    same_spec(result.path, minimal(tmp_path, f"""[delivery]
name = "lab"
raw = "data/raw/lab"
store = "data/stores/lab.zarr"
[items]
id_pattern = '{result.chosen.pattern.regex}'
"""), tmp_path)


def test_init_keeps_a_dicom_series_one_item_whatever_its_file_names(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    for case in ("case_001", "case_002"):
        for k, path in enumerate(sorted(ct_series(raw / case / "ct", case))):
            path.rename(path.with_name(f"IM{k:04d}"))  # slice names the file-name pattern would take as IDs
    result = init_delivery("ct", raw, root=tmp_path)
    assert result.chosen.pattern.where == "first match in the path, the default"
    assert result.chosen.ids == {"case001", "case002"} and not result.chosen.collisions
    by_name = next(t for t in result.trials if t.pattern.where == "in the file name")
    assert by_name.rejected == 10  # every slice its own one-slice item: series_too_short


def second_delivery(raw: Path) -> Path:
    """Issue 33: two NIfTI cases named by file, and one 4-slice DICOM series in a case folder, slices named IM0001.."""
    for rel, name in (("batch2/case_001.nii", "anatomical.nii"), ("batch2/case_002.nii.gz", "standard.nii.gz")):
        (raw / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(NIBABEL_DATA / name, raw / rel)
    slices = ct_series(raw / "batch2" / "case_004", "case_004", lambda k, ds: ds if k < 4 else None)
    for k, path in enumerate(sorted(slices)):
        path.rename(path.with_name(f"IM{k + 1:04d}.dcm"))
    return raw


def test_init_never_splits_a_dicom_series_and_says_why_it_chose(tmp_path: Path) -> None:
    raw = second_delivery(tmp_path / "data" / "raw" / "lab")
    result = init_delivery("lab", raw, root=tmp_path)
    # The file name gives each slice its own ID (im0001 ... im0004): four one-slice items, series_too_short.
    by_name = next(t for t in result.trials if t.pattern.where == "in the file name")
    assert [(s.source, s.items) for s in by_name.split] == [("batch2/case_004/ (series 5)", 4)]
    assert "splits 1 DICOM series into 4 items" in by_name.describe()
    assert not result.chosen.split
    assert result.chosen.ids == {"case001", "case002", "case004"} and not result.chosen.collisions
    # Why this one: named in the printed summary and in the spec's comments.
    assert ("\n    chosen: 'case' and its number\n      preferred to in the file name: it splits 1 DICOM series into "
            "4 items (batch2/case_004/ (series 5))\n") in result.describe(Path("x.toml"))
    text = result.path.read_text()
    assert re.search(r"# chosen: .*\n#   preferred to in the file name: it splits 1 DICOM series into 4 items", text)
    # The spec plans the series as one item and every NIfTI as its own: nothing rejected before decoding.
    rows = [p.row for p in check_delivery(result.path, root=tmp_path).planned]
    assert sorted((r.item_id, r.source, r.status) for r in rows) == [
        ("case001", "batch2/case_001.nii", "ok"), ("case002", "batch2/case_002.nii.gz", "ok"),
        ("case004", "batch2/case_004/ (series 5)", "ok")]


def test_init_refuses_to_overwrite_a_spec_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = batches(tmp_path / "data" / "raw" / "lab")
    args = ["init", "lab", "--raw", str(raw), "--root", str(tmp_path)]
    assert main(args) == 0
    assert "wrote " in capsys.readouterr().out
    spec = tmp_path / "manifests" / "lab" / "delivery.toml"
    spec.write_text("# edited by hand\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{spec}: a spec for 'lab' exists already" in err and "hint: pass --force" in err
    assert spec.read_text() == "# edited by hand\n"
    assert main([*args, "--force"]) == 0 and spec.read_text().startswith("# Delivery 'lab'")
    with pytest.raises(UsageError, match="a delivery name uses letters"):
        init_delivery("lab/x", raw, root=tmp_path)
    with pytest.raises(UsageError, match="--raw .*: folder not found"):
        init_delivery("lab", tmp_path / "nowhere", root=tmp_path)


def _keys(text: str) -> dict[str, set[str]]:
    """Every key the text writes, commented out or not, by section."""
    out: dict[str, set[str]] = {}
    section = ""
    for line in text.splitlines():
        if m := re.match(r"(?:# )?\[([\w.]+)\]", line):
            section = m.group(1)
            out.setdefault(section, set())
        elif (m := re.match(r"(?:# )?(\w+) = ", line)) and section:
            out[section].add(m.group(1))
    return out


def test_the_template_writes_every_key_the_spec_module_knows() -> None:
    """A field added to a spec dataclass without the template knowing fails here (a comment is also required:
    the template raises KeyError for a key without one)."""
    text = render(name="x", raw="raw", store="x.zarr", id_pattern=ItemsSpec().id_pattern,
                  id_normalize=ItemsSpec().id_normalize, labels=LabelsChoice(workbook="w.xlsx", sheet="S",
                                                                             id_column="A"))
    names = lambda cls: {f.name for f in fields(cls)}  # noqa: E731
    assert _keys(text) == {
        "delivery": {"name", "raw", "store"},
        "items": names(ItemsSpec),
        "labels": names(LabelsSpec) - {"limits", "columns", "annotations"} | names(WorkbookLimits) - {"max_members"},
        "labels.columns": set(),
        "labels.annotations": names(AnnotationsSpec),
        "store": names(StoreSpec) | {"storage_options"},
        "validate": names(ValidateSpec), "dicom": names(DicomSpec), "masks": names(MasksSpec), "run": names(RunSpec),
        "manifest": names(ManifestSpec),
        "splits": names(SplitsSpec) - {"fractions", "group_from", "pinned_column"} | {"train", "val", "test"},
    }


def test_an_init_spec_converts_with_its_labels_matched(tmp_path: Path, scheduler: str) -> None:
    raw = write_demo(tmp_path / "data" / "raw" / "lab")
    spec = init_delivery("lab", raw, root=tmp_path).path
    # The one review step init leaves: keep the label column (uncomment its suggested line).
    spec.write_text(re.sub(r"^# (cell_type = 'F')", r"\1", spec.read_text(), flags=re.M))
    result = convert_delivery(spec, scheduler=scheduler)
    assert result.spec.delivery.store == tmp_path / "data" / "stores" / "lab.zarr"
    rows = {r.source: r for r in result.rows}
    assert {s: (r.status, r.reason.value if r.reason else "") for s, r in rows.items()} == dict(EXPECTED)
    assert {r.item_id: dict(r.labels)["cell_type"] for r in result.rows if r.status == "ok"} == EXPECTED_LABELS
    assert result.summary["unmatched_workbook_ids"] == [
        {"id": "case_099", "normalized": "case99", "cell": "Annotations v2!A20"}]
    assert result.summary["id_collisions"] == []
