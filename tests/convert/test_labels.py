from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from labzarr.convert import UsageError, convert_delivery, execute, load_spec, read_manifest
from labzarr.convert.cli import main
from labzarr.convert.discover import discover, walk
from labzarr.convert.labels import PIN, join_labels, load_labels
from labzarr.convert.manifest import Row
from labzarr.convert.spec import ItemsSpec, LabelsSpec
from labzarr.loaders import open_store
from labzarr.readers import ColumnRef, LabelCell, LabelRow, LabelSheet, Reason

from ..workbooks import Entry, lab_workbook, save, zip_bomb

ALL_STEPS = ("strip", "casefold", "drop_separators", "strip_leading_zeros")


# --- the join, pure -------------------------------------------------------------------------------------------

def sheet(*rows: tuple[str, str], names: tuple[str, ...] = ("cell_type",)) -> LabelSheet:
    def cell(value: str, col: str, r: int) -> LabelCell:
        missing = "formula without a cached value" if value == "=" else ""
        return LabelCell("" if missing else value, f"S!{col}{r}", missing)

    return LabelSheet(
        sheet="S", sheet_index=3, sheets=("a", "b", "S"), header_row=3, id_column="A",
        columns=tuple((n, "F", n) for n in names),
        rows=tuple(LabelRow(cell(i, "A", 4 + k), tuple(cell(v, "F", 4 + k) for _ in names))
                   for k, (i, v) in enumerate(rows)),
        warnings=(),
    )


def ok(item_id: str, source: str | None = None) -> Row:
    return Row(item_id=item_id, status="ok", source=source or f"{item_id}.nii", array=f"volumes/{item_id}")


def spec(**kw) -> LabelsSpec:
    return LabelsSpec(workbook=Path("w.xlsx"), **kw)


def join(rows, sh, steps=ALL_STEPS, **kw):
    return join_labels(rows, sh, spec(**kw), steps, workbook="labels/w.xlsx")


@pytest.mark.parametrize("typed", ["case_7", " CASE-007 ", "Case 07", "case\u2013007", "\u00a0case7"])
def test_every_id_spelling_matches_the_same_item(typed: str) -> None:
    out = join([ok("case7")], sheet((typed, "neuron")))
    assert out.rows[0].labels == (("cell_type", "neuron"),) and out.rows[0].label_source == "S!F4"
    assert out.summary["unmatched_workbook_ids"] == []


def test_normalisation_steps_are_the_specs() -> None:
    out = join([ok("case007")], sheet(("case_7", "neuron")), steps=("strip", "casefold", "drop_separators"))
    assert out.rows[0].status == "rejected" and out.rows[0].reason is Reason.NO_LABEL
    assert out.summary["unmatched_workbook_ids"] == [{"id": "case_7", "normalized": "case7", "cell": "S!A4"}]


def _pinned_sheet(*rows: tuple[str, str, str]) -> LabelSheet:
    """A sheet with a label column F and a `[splits] pinned` column G."""
    return LabelSheet(sheet="S", sheet_index=1, sheets=("S",), header_row=1, id_column="A",
                      columns=(("cell_type", "F", "Cell type"), (PIN, "G", "Split")),
                      rows=tuple(LabelRow(LabelCell(i, f"S!A{2 + k}"), (LabelCell(v, f"S!F{2 + k}"),
                                                                       LabelCell(p, f"S!G{2 + k}")))
                                 for k, (i, v, p) in enumerate(rows)), warnings=())


@pytest.mark.parametrize(("rows", "pin", "warning"), [
    pytest.param([("case1", "neuron", "val")], "val", "", id="pinned"),
    pytest.param([("case1", "neuron", " ")], "", "", id="blank-is-not-pinned"),
    pytest.param([("case1", "neuron", "val"), ("case1", "neuron", "")], "val", "", id="one-of-two-rows"),
    pytest.param([("case1", "neuron", "val"), ("case1", "neuron", "test")], "",
                 "[splits] pinned cells disagree: 'val' at S!G2, 'test' at S!G3; not pinned", id="rows-disagree"),
])
def test_a_pin_cell_is_no_label(rows: list[tuple[str, str, str]], pin: str, warning: str) -> None:
    out = join([ok("case1")], _pinned_sheet(*rows), required=True)
    row = out.rows[0]
    assert (row.status, row.labels, row.pin) == ("ok", (("cell_type", "neuron"),), pin)
    assert row.warnings == ((warning,) if warning else ())
    assert out.names == ("cell_type",) and list(out.summary["label_workbook"]["columns"]) == ["cell_type"]


def test_same_id_twice_same_value_is_fine_different_values_conflict() -> None:
    rows = [ok("case1"), ok("case2")]
    out = join(rows, sheet(("case_1", "neuron"), ("CASE-001", "neuron"), ("case_2", "neuron"), ("case_2", "glia ")))
    one, two = out.rows
    assert one.status == "ok" and one.labels == (("cell_type", "neuron"),) and one.label_source == "S!F4"
    assert two.status == "rejected" and two.reason is Reason.LABEL_CONFLICT
    assert two.detail == "cell_type: 'neuron' at S!F6, 'glia' at S!F7" and two.array == ""
    assert out.summary["unlabelled_items"] == ["case2"]


def test_conflict_warn_policy_keeps_item_with_label_empty() -> None:
    out = join([ok("case2")], sheet(("case_2", "neuron"), ("case_2", "glia")), conflict="warn")
    row = out.rows[0]
    assert row.status == "ok" and row.labels == () and row.array == "volumes/case2"
    assert row.warnings == ("label_conflict: cell_type: 'neuron' at S!F4, 'glia' at S!F5; label left empty",)


def test_required_rejects_unlabelled_optional_keeps_with_warning() -> None:
    sh = sheet(("case_1", "neuron"), ("case_3", "="))
    strict = join([ok("case1"), ok("case2"), ok("case3")], sh)
    assert [(r.status, r.reason) for r in strict.rows] == [("ok", None), ("rejected", Reason.NO_LABEL),
                                                           ("rejected", Reason.NO_LABEL)]
    assert "no row for ID 'case2' in labels/w.xlsx sheet 'S' column A" in strict.rows[1].detail
    assert strict.rows[2].detail == ("row for ID 'case3' at S!A5, but cell_type is formula without a cached value "
                                     "at S!F5")
    loose = join([ok("case1"), ok("case2")], sh, required=False)
    assert [r.status for r in loose.rows] == ["ok", "ok"]
    assert loose.rows[1].warnings[0].startswith("no_label: no row for ID 'case2'")
    assert loose.summary["unlabelled_items"] == ["case2"]


def test_rejected_items_keep_their_reason_and_get_their_label() -> None:
    bad = Row(item_id="case1", status="rejected", source="case1.nii", reason=Reason.TRUNCATED, detail="cut")
    gone = Row(item_id="case2", status="rejected", source="case2.nii", reason=Reason.EMPTY_FILE, detail="0 B")
    out = join([bad, gone], sheet(("case_1", "neuron")))
    assert (out.rows[0].reason, out.rows[0].labels) == (Reason.TRUNCATED, (("cell_type", "neuron"),))
    assert out.rows[1].reason is Reason.EMPTY_FILE and out.rows[1].warnings[0].startswith("no_label:")
    assert out.summary["labels"] == {"cell_type": {}}  # counts are over ok items only


def test_summary_counts_unmatched_and_unlabelled() -> None:
    rows = [ok("case1"), ok("case2"), ok("case3"), Row(item_id="", status="ignored", source="notes.txt")]
    out = join(rows, sheet(("case_1", "neuron"), ("case_2", "neuron"), ("case_99", "glia"), ("Total", "3")),
               required=False)
    assert out.summary["labels"] == {"cell_type": {"neuron": 2}}
    assert out.summary["unmatched_workbook_ids"] == [{"id": "case_99", "normalized": "case99", "cell": "S!A6"},
                                                     {"id": "Total", "normalized": "total", "cell": "S!A7"}]
    assert out.summary["unlabelled_items"] == ["case3"]
    assert out.rows[3] == rows[3]


def test_no_label_columns_makes_the_workbook_an_inclusion_list() -> None:
    out = join([ok("case1"), ok("case2")], sheet(("case_1", ""), names=()))
    assert (out.rows[0].status, out.rows[0].label_source) == ("ok", "S!A4")
    assert out.rows[1].reason is Reason.NO_LABEL


def test_numeric_ids_keep_their_padding_end_to_end_without_dask(tmp_path: Path) -> None:
    """A file `007.nii` and the number 7 formatted 000 meet; the same 7 formatted General does not."""
    from labzarr.readers import read_label_sheet

    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("007.nii", "012.nii"):
        (raw / name).write_bytes(b"x")
    items = ItemsSpec(id_pattern=r"(?P<id>\d+)", id_normalize=("strip",))
    ids = [c.item_id for c in discover(walk(raw), items)]
    book = save(lab_workbook([Entry(7, "neuron", id_format="000"), Entry(12, "glia")]), tmp_path / "w.xlsx")
    sh = read_label_sheet(book, sheet=3, id_column=ColumnRef.parse("A"), columns={"cell_type": ColumnRef.parse("F")},
                          header_row="auto")
    out = join([ok(i) for i in ids], sh, steps=items.id_normalize)
    assert [(r.item_id, r.status, r.labels) for r in out.rows] == [("007", "ok", (("cell_type", "neuron"),)),
                                                                  ("012", "rejected", ())]
    assert out.summary["unmatched_workbook_ids"] == [{"id": "12", "normalized": "12", "cell": "Annotations v2!A5"}]


# --- a delivery on a real cluster -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as c:
        yield c


ENTRIES = [
    Entry("case_1", "neuron"),                      # strip_leading_zeros
    Entry(" CASE-002 ", "astrocyte"),               # strip, casefold, drop_separators
    Entry("Case 003", "microglia"),                 # space separator
    Entry("case\u2013004", "neuron"),               # en dash from Excel's autocorrect
    Entry(5, "neuron", id_format='"case_"000'),     # a number shown as case_005
    Entry(7, "glia", id_format="000"),              # "007": matches no case item (documented)
    Entry("case_008", "neuron"), Entry("case-8", "neuron"),        # twice, same value
    Entry("case_009", "neuron"), Entry("case_009", "astrocyte"),   # twice, different values
    Entry("case_010", "=F4"),                       # formula saved without a cached value
    Entry("case_099", "neuron"),                    # no such item
]


def write_delivery(root: Path, extra: str = "") -> Path:
    raw = root / "raw"
    raw.mkdir(parents=True)
    for i in range(1, 11):  # tiny volumes, each with its own bytes
        nib.save(nib.Nifti1Image(np.full((4, 5, 3), i, np.int16), np.eye(4)), raw / f"case_{i:03d}.nii")
    save(lab_workbook(ENTRIES), raw / "labels" / "Annotations 2026.xlsx")
    spec_path = root / "manifests" / "lab" / "delivery.toml"
    spec_path.parent.mkdir(parents=True)
    spec_path.write_text(
        f'[delivery]\nname = "lab"\nraw = "{raw}"\nstore = "{root / "lab.zarr"}"\n\n'
        '[items]\nid_normalize = ["strip", "casefold", "drop_separators", "strip_leading_zeros"]\n\n'
        '[labels]\nworkbook = "labels/Annotations 2026.xlsx"\nsheet = 3\nid_column = "Case"\n'
        'columns = { cell_type = "Cell type", reviewed = "C" }\n' + extra)
    return spec_path


def test_delivery_labels_in_manifest_summary_store_and_attrs(tmp_path: Path, client: Client) -> None:
    spec_path = write_delivery(tmp_path)
    result = execute(load_spec(spec_path, root=tmp_path), client)
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    assert list(next(iter(rows.values())))[-3:] == ["label.cell_type", "label.reviewed", "label_source"]
    want = {
        "case_001.nii": ("ok", "", "neuron", "Annotations v2!F4; Annotations v2!C4"),
        "case_002.nii": ("ok", "", "astrocyte", "Annotations v2!F5; Annotations v2!C5"),
        "case_003.nii": ("ok", "", "microglia", "Annotations v2!F6; Annotations v2!C6"),
        "case_004.nii": ("ok", "", "neuron", "Annotations v2!F7; Annotations v2!C7"),
        "case_005.nii": ("ok", "", "neuron", "Annotations v2!F8; Annotations v2!C8"),
        "case_006.nii": ("rejected", "no_label", "", ""),
        "case_007.nii": ("rejected", "no_label", "", ""),
        "case_008.nii": ("ok", "", "neuron", "Annotations v2!F10; Annotations v2!C10"),
        "case_009.nii": ("rejected", "label_conflict", "",
                         "Annotations v2!F12; Annotations v2!F13; Annotations v2!C12"),
        "case_010.nii": ("rejected", "no_label", "", "Annotations v2!C14"),
    }
    for source, (status, reason, cell_type, where) in want.items():
        r = rows[source]
        assert (r["status"], r["reason"], r["label.cell_type"], r["label_source"]) == (
            status, reason, cell_type, where), source
        assert r["label.reviewed"] == ("2026-11-03" if reason != "no_label" or source == "case_010.nii" else "")
    assert rows["case_009.nii"]["detail"] == ("cell_type: 'neuron' at Annotations v2!F12, "
                                              "'astrocyte' at Annotations v2!F13")
    assert "formula without a cached value at Annotations v2!F14" in rows["case_010.nii"]["detail"]
    book = rows["labels/Annotations 2026.xlsx"]
    assert (book["status"], book["item_id"]) == ("ignored", "") and "label workbook" in book["detail"]

    summary = json.loads(result.summary_path.read_text())
    assert summary["labels"] == {"cell_type": {"astrocyte": 1, "microglia": 1, "neuron": 4},
                                 "reviewed": {"2026-11-03": 6}}
    assert summary["unmatched_workbook_ids"] == [
        {"id": "007", "normalized": "7", "cell": "Annotations v2!A9"},
        {"id": "case_099", "normalized": "case99", "cell": "Annotations v2!A15"},
    ]
    assert summary["unlabelled_items"] == ["case10", "case6", "case7", "case9"]
    meta = summary["label_workbook"]
    assert (meta["path"], meta["sheet"], meta["sheet_index"], meta["header_row"]) == (
        "labels/Annotations 2026.xlsx", "Annotations v2", 3, 3)
    assert meta["columns"] == {"cell_type": {"column": "F", "header": "Cell type"},
                               "reviewed": {"column": "C", "header": "Reviewed"}}
    assert any("2 'Annotations v1'" in w for w in meta["warnings"])
    assert any("F14: formula without a cached value" in w for w in meta["warnings"])

    view = open_store(result.spec.delivery.store)
    assert {i.item_id: i.labels["cell_type"] for i in view.items} == {
        "case1": "neuron", "case2": "astrocyte", "case3": "microglia", "case4": "neuron", "case5": "neuron",
        "case8": "neuron"}
    root = zarr.open_group(result.spec.delivery.store, mode="r")
    # Items rejected only for their labels keep their arrays outside the index (issue 8: a corrected
    # workbook makes them ok on the next run without decoding them again).
    label_rejected = sorted(r["item_id"] for r in rows.values() if r["reason"] in ("no_label", "label_conflict"))
    assert sorted(root["volumes"].group_keys()) == sorted(["case1", "case2", "case3", "case4", "case5", "case8",
                                                           *label_rejected])
    for item in view.items:
        assert view.array(item).attrs["labels"] == dict(item.labels)


def test_policies_and_an_edited_workbook_on_rerun(tmp_path: Path, client: Client) -> None:
    spec_path = write_delivery(tmp_path, extra='required = false\nconflict = "warn"\n')
    first = execute(load_spec(spec_path, root=tmp_path), client)
    rows = {r["source"]: r for r in read_manifest(first.manifest)}
    assert all(rows[f"case_{i:03d}.nii"]["status"] == "ok" for i in range(1, 11))
    assert "label_conflict: cell_type: 'neuron' at Annotations v2!F12" in rows["case_009.nii"]["warnings"]
    assert rows["case_006.nii"]["warnings"].startswith("no_label: no row for ID 'case6'")
    assert first.summary["unlabelled_items"] == ["case10", "case6", "case7", "case9"]

    edited = [Entry("case_1", "glia") if e.case == "case_1" else e for e in ENTRIES]
    save(lab_workbook(edited), first.spec.labels.workbook)
    second = execute(load_spec(spec_path, root=tmp_path), client)
    view = open_store(second.spec.delivery.store)
    item = next(i for i in view.items if i.item_id == "case1")
    assert item.labels["cell_type"] == "glia" and view.array(item).attrs["labels"]["cell_type"] == "glia"


# --- workbook problems are usage errors before anything runs --------------------------------------------------

def _xls(path: Path) -> None:
    import xlwt

    book = xlwt.Workbook()
    book.add_sheet("Labels").write(0, 0, "Case")
    book.save(str(path))


BAD = [
    pytest.param(lambda p: save(lab_workbook(ENTRIES), p), 'sheet = 7\n',
                 r"\[labels\] sheet: labels/l\.xlsx: sheet 7 is past the end: l\.xlsx has 4 sheets: 1 'Read me', "
                 r"2 'Annotations v1' \(hidden\), 3 'Annotations v2', 4 'Pivot'", id="sheet-past-end"),
    pytest.param(lambda p: save(lab_workbook(ENTRIES), p), 'sheet = 3\ncolumns = { cell_type = "Celltype" }\n',
                 r"\[labels\] columns\.cell_type: .*row 3: 'Case', 'Reader', 'Reviewed', 'Slices', 'Notes', "
                 r"'Cell type'",
                 id="header-not-found"),
    pytest.param(_xls, "", r"\[labels\] workbook: labels/l\.xlsx: not an xlsx: a legacy Excel 97-2003 \.xls", id="xls"),
    pytest.param(lambda p: zip_bomb(p, 64 << 20), "", r"\[labels\] workbook: .*inflates .* \(ratio", id="zip-bomb"),
]


@pytest.mark.parametrize(("build", "keys", "match"), BAD)
def test_workbook_problems_stop_the_run_before_conversion(tmp_path: Path, build, keys: str, match: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    raw = tmp_path / "raw"
    (raw / "labels").mkdir(parents=True)
    nib.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.int16), np.eye(4)), raw / "case_001.nii")
    build(raw / "labels" / "l.xlsx")
    spec_path = tmp_path / "delivery.toml"
    spec_path.write_text(f'[delivery]\nname = "x"\nraw = "{raw}"\nstore = "{tmp_path / "x.zarr"}"\n\n'
                         f'[labels]\nworkbook = "labels/l.xlsx"\nid_column = "A"\n{keys}')
    with pytest.raises(UsageError, match=match) as info:
        convert_delivery(spec_path, workers=1)
    assert str(info.value).startswith(f"{spec_path}: [labels] ") and info.value.hint
    assert not (tmp_path / "x.zarr").exists() and not (tmp_path / "manifest.csv").exists()
    assert main(["convert", str(spec_path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("labzarr: error: ") and err[1].startswith("  hint: ")


def test_load_labels_without_labels_section(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    p = tmp_path / "d.toml"
    p.write_text(f'[delivery]\nname = "x"\nraw = "{tmp_path / "raw"}"\nstore = "{tmp_path / "x.zarr"}"\n')
    assert load_labels(load_spec(p, root=tmp_path)) is None
