"""`labzarr check`: items per ID, ID collisions, the label join and the paths, before anything is decoded; the
same collision warning in convert's summary table and summary.json."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labzarr.convert import convert_delivery
from labzarr.convert.check import check_delivery
from labzarr.convert.cli import main
from labzarr.convert.console import summary_table
from labzarr.convert.demo import EXPECTED, write_spec
from labzarr.readers import Reason

from ..conftest import make_delivery
from ..dicom_data import DICOMDIR_TESTS
from .test_init import BATCHES, batches

ROOT = Path(__file__).resolve().parents[2]


def collided(tmp_path: Path) -> Path:
    """Five volumes in two batch folders, with the default id_pattern: it takes the folder names as IDs."""
    raw = batches(tmp_path / "raw" / "lab")
    return write_spec(tmp_path / "manifests" / "lab" / "delivery.toml", raw=raw, store=tmp_path / "stores" / "lab.zarr",
                      name="lab", labels=False)


def test_check_warns_of_an_id_given_to_distinct_files_and_names_them(tmp_path: Path) -> None:
    report = check_delivery(collided(tmp_path))
    assert [(c.item_id, c.contents, [r.source for r in c.rows]) for c in report.collisions] == [
        ("batch2", 3, sorted(s for s in BATCHES if s.startswith("batch2"))),
        ("batch3", 2, sorted(s for s in BATCHES if s.startswith("batch3")))]
    text = report.describe()
    assert ("warning: 2 item ID(s) given to distinct contents (stored as <id>~1, <id>~2 with one label between "
            "them); fix [items] id_pattern, or ask the lab which is which:") in text
    assert "  'batch2': 3 contents: batch2/case001.nii, batch2/case002.nii, batch2/case003.nii.gz" in text
    assert "  batch2           convert   nifti  batch2/case002.nii -> volumes/batch2~2" in text
    for line in (f"  raw:       {tmp_path / 'raw' / 'lab'}\n", f"  store:     {tmp_path / 'stores' / 'lab.zarr'}\n",
                 f"  manifest:  {tmp_path / 'manifests' / 'lab' / 'manifest.csv'}", "  workbook:  none"):
        assert line in text
    assert not (tmp_path / "stores" / "lab.zarr").exists()


def test_check_and_convert_dry_run_print_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = collided(tmp_path)
    assert main(["check", str(spec)]) == 0
    checked = capsys.readouterr().out
    assert main(["convert", str(spec), "--dry-run"]) == 0
    assert capsys.readouterr().out == checked
    assert main(["check", str(spec), "--limit", "2"]) == 0
    assert "  ... 3 more rows (--limit 0 lists all)" in capsys.readouterr().out
    assert main(["check", str(spec), "--limit", "-1"]) == 2


def test_convert_summary_and_summary_json_carry_the_collision(tmp_path: Path, scheduler: str) -> None:
    spec = collided(tmp_path)
    first = convert_delivery(spec, scheduler=scheduler)
    (batch2, batch3) = first.summary["id_collisions"]
    assert (batch2["id"], batch2["contents"], [i["source"] for i in batch2["items"]]) == (
        "batch2", 3, ["batch2/case001.nii", "batch2/case002.nii", "batch2/case003.nii.gz"])
    assert [i["array"] for i in batch3["items"]] == ["volumes/batch3~1/0", "volumes/batch3~2/0"]
    assert all(i["status"] == "ok" and len(i["sha256"]) == 64 and i["n_files"] == 1 for i in batch2["items"])
    table = summary_table(first.summary, first.run_log)
    assert "warning: 2 item ID(s) given to distinct contents" in table
    assert "'batch3': 2 contents: batch3/case004.nii.gz, batch3/case005.nii" in table
    committed = first.summary_path.read_bytes()
    again = convert_delivery(spec, scheduler=scheduler)
    assert again.unchanged == 5 and again.summary_path.read_bytes() == committed  # byte-stable on a no-op rerun


def test_check_lists_the_label_join_and_the_paths(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    report = check_delivery(d.spec)
    assert report.headline == "18 to convert, 0 unchanged, 9 decided without decoding"
    assert sorted(p.row.source for p in report.planned) == sorted(EXPECTED)
    assert not report.collisions
    text = report.describe()
    assert "files: 34 under raw: nifti 19, dicom 10, other (no reader) 2, text 2, excluded 1" in text
    assert ('dicom: SeriesDescription, ProtocolName left in the raw files ([dicom] descriptors = "drop"; "keep" '
            'stores them)\n') in text
    assert "decoding may reject more, or for another reason than shown here: a truncated, corrupt or too large" in text
    assert f"  workbook:  {d.raw / 'labels' / 'annotations.xlsx'}\n" in text
    assert ("labels: labels/annotations.xlsx sheet 3 'Annotations v2' (header row 3, IDs in column A, 19 ID rows)"
            in text)
    assert "  workbook IDs matching no item (1): 'case_099' (Annotations v2!A20)" in text
    # Before decoding: case_019 has no row, case_018 a formula without a value, case_020 two cell types; case_013
    # and case_015 (no row) are to convert (decoding finds them corrupt and too large), so no_label here.
    assert "  items with a workbook row: 16 of 22; rejected for their labels: label_conflict 1, no_label 4" in text
    assert "  items without a label (7): case11, case13, case14, case15, case18, case19, case20" in text
    by_source = {p.row.source: p.row for p in report.planned}
    assert by_source["case_019.nii.gz"].reason is Reason.NO_LABEL
    assert by_source["case_001/anatomical.nii"].label_source == "Annotations v2!F4"


def test_check_says_which_dicom_descriptors_a_run_keeps(tmp_path: Path) -> None:
    d = make_delivery(tmp_path, extra='[dicom]\ndescriptors = "keep"\nmetadata = ["BodyPartExamined"]\n')
    text = check_delivery(d.spec).describe()
    assert ('dicom: SeriesDescription, ProtocolName kept ([dicom] descriptors = "keep"): free text typed at the '
            "scanner, stored in the store's attributes and index; make sure it holds no names; opted in by [dicom] "
            "metadata: BodyPartExamined\n") in text
    nifti_only = collided(tmp_path / "n")
    assert "dicom:" not in check_delivery(nifti_only).describe()  # no DICOM file, nothing to say


def test_a_localizer_is_one_row_that_names_min_slices(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(DICOMDIR_TESTS / "98892003" / "MR700", raw / "case_001" / "scout")  # a 7-plane localizer
    shutil.copytree(DICOMDIR_TESTS / "98892001" / "CT2N", raw / "case_002" / "scout")  # a 2-plane one
    spec = write_spec(tmp_path / "manifests" / "loc" / "delivery.toml", raw=raw, store=tmp_path / "loc.zarr",
                      name="loc", labels=False)
    rows = [p.row for p in check_delivery(spec).planned]
    assert [(r.source, r.reason, r.n_files) for r in rows] == [
        ("case_001/scout/ (series 700)", Reason.SERIES_TOO_SHORT, 7),
        ("case_002/scout/ (series 4)", Reason.SERIES_TOO_SHORT, 2)]
    assert rows[0].detail == ("split by image plane into 7 parts of 1, 1, 1, 1, 1, 1, 1 slice position(s), each "
                              "fewer than [dicom] min_slices = 4: a localizer or scout, not a volume")
    assert sorted(m for r in rows for m in r.members) == sorted(p.relative_to(raw).as_posix()
                                                                 for p in raw.rglob("*") if p.is_file())


def test_make_check_runs_every_spec_or_one(tmp_path: Path) -> None:
    spec = collided(tmp_path)
    (tmp_path / "manifests" / "other").mkdir()
    shutil.copy(spec, tmp_path / "manifests" / "other" / "delivery.toml")

    def make(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-o", ".venv/.stamp-install",
                               f"BIN={ROOT / '.venv' / 'bin'}", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)

    out = make("check")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("check: lab (nothing decoded)") == 2 and "== manifests/other/delivery.toml" in out.stdout
    out = make("check", "DELIVERY=lba")
    assert out.returncode == 2 and "no delivery 'lba'" in out.stderr
    out = make("init")
    assert out.returncode == 2 and "make: init needs NAME and RAW" in out.stderr
