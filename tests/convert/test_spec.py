from __future__ import annotations

from pathlib import Path

import pytest

from labzarr.convert import UsageError, load_spec
from labzarr.convert.cli import main
from labzarr.readers import ColumnRef

GOOD = """[delivery]
name = "lab-1"
raw = "raw"
store = "out/lab-1.zarr"
"""


def write(tmp: Path, text: str) -> Path:
    (tmp / "raw").mkdir(exist_ok=True)
    (tmp / "raw" / "w.xlsx").write_bytes(b"")  # [labels] checks only that the workbook exists
    p = tmp / "delivery.toml"
    p.write_text(text)
    return p


def test_minimal_spec_gets_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD), root=tmp_path)
    assert spec.delivery.raw == tmp_path / "raw"
    assert spec.store.compressor == "blosc-lz4" and spec.store.level == 5 and spec.store.checksum
    assert spec.store.chunks == (32, 32, 32) and spec.store.shards == (256, 256, 128)
    assert spec.items.id_normalize == ("strip", "casefold", "drop_separators")
    assert spec.manifest_dir == tmp_path
    assert spec.run.parts_bytes == 512 << 20
    assert load_spec(write(tmp_path, GOOD + "[run]\nparts_bytes = 0\n"), root=tmp_path).run.parts_bytes == 0
    assert spec.run.window == 0  # automatic: convert/run/window.py
    assert load_spec(write(tmp_path, GOOD + "[run]\nwindow = 64\n"), root=tmp_path).run.window == 64


def test_dicom_section_sets_the_series_rules(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path,
                           GOOD + '[dicom]\nmin_slices = 2\nspacing_tolerance_mm = 0.5\ngantry_tilt = "shear"\n'),
                     root=tmp_path)
    rules = spec.dicom.rules()
    assert (rules.min_slices, rules.spacing_tolerance_mm, rules.gantry_tilt) == (2, 0.5, "shear")
    assert rules.spacing_tolerance_rel == 0.05 and rules.orientation_tolerance == 0.001  # defaults kept
    assert load_spec(write(tmp_path, GOOD), root=tmp_path).dicom.rules().min_slices == 4


def test_descriptors_are_dropped_unless_kept(tmp_path: Path) -> None:
    default = load_spec(write(tmp_path, GOOD), root=tmp_path).dicom
    assert default.rules().descriptors == "drop"
    assert not {"SeriesDescription", "ProtocolName"} & set(default.kept()) and "Modality" in default.kept()
    keep = load_spec(write(tmp_path, GOOD + '[dicom]\ndescriptors = "keep"\n[manifest]\n'
                                            'metadata = ["SeriesDescription"]\n'), root=tmp_path)
    assert keep.dicom.rules().descriptors == "keep" and keep.manifest.metadata == ("SeriesDescription",)


BAD = [
    pytest.param(GOOD + "[store]\ncompressor = \"zstd\"\nlevel = 40\n",
                 r"\[store\] level = 40: zstd levels are 1\.\.22", id="level-range"),
    pytest.param(GOOD + "[store]\nlevel = 10\n", r"\[store\] level = 10: blosc-lz4 levels are 1\.\.9",
                 id="level-default"),
    pytest.param(GOOD + "[store]\nshards = [100, 256, 128]\n",
                 r"shards = \[100, 256, 128\]: each shard extent must be a "
                 r"multiple of the chunk extent", id="shards-not-multiple"),
    pytest.param(GOOD + "[store]\nshards = true\n", r"shards = True: expected three positive integers, or false",
                 id="shards-true"),
    pytest.param(GOOD + "[store]\ncompressor = \"lzma\"\n", r"compressor = 'lzma': allowed: zstd", id="compressor"),
    pytest.param(GOOD + "[store]\nchunks = [64, 64]\n", r"chunks = \[64, 64\]: expected three", id="chunks"),
    pytest.param(GOOD + "[store]\nchecksum = \"yes\"\n", r"checksum = 'yes': expected true or false", id="type"),
    pytest.param(GOOD + "[store]\nlevle = 3\n", r"\[store\] unknown key 'levle'", id="unknown-key"),
    pytest.param(GOOD + "[stores]\n", r"unknown section \[stores\]", id="unknown-section"),
    pytest.param(GOOD.replace('raw = "raw"', 'raw = "nowhere"'), r"raw = '.*nowhere': folder not found",
                 id="raw-missing"),
    pytest.param(GOOD.replace('name = "lab-1"\n', ""), r"\[delivery\] name is missing", id="name-missing"),
    pytest.param(GOOD + "[items]\nid_pattern = '(\\d+'\n", r"id_pattern = .*not a valid regular expression",
                 id="bad-regex"),
    pytest.param(GOOD + "[items]\nid_pattern = '\\d+'\n", r"needs a group \(\?P<id>", id="regex-no-group"),
    pytest.param(GOOD + "[items]\nid_normalize = [\"upper\"]\n", r"allowed steps", id="normalize-step"),
    pytest.param(GOOD + "[validate]\nnon_finite = \"ignore\"\n", r"non_finite = 'ignore'", id="non-finite-policy"),
    pytest.param(GOOD + "[labels]\nworkbook = \"nope.xlsx\"\n", r"workbook = '.*nope.xlsx': file not found",
                 id="workbook"),
    pytest.param(GOOD + "[labels]\nworkbook = \"w.xlsx\"\nconflict = \"keep\"\n", r"conflict = 'keep': allowed",
                 id="conflict"),
    pytest.param(GOOD + "[labels]\nworkbook = \"w.xlsx\"\nid_column = 3\n", r"id_column = 3: expected a column",
                 id="column-type"),
    pytest.param(GOOD + "[labels]\nworkbook = \"w.xlsx\"\ncolumns = { x = { name = \"F\" } }\n",
                 r"columns\.x = \{'name': 'F'\}: expected a column letter", id="column-table"),
    pytest.param(GOOD + "[labels]\nworkbook = \"w.xlsx\"\ncolumns = { \"cell type\" = \"F\" }\n",
                 r"label name 'cell type' is not an identifier", id="label-name"),
    pytest.param(GOOD + "[labels]\nworkbook = \"w.xlsx\"\nmax_compression_ratio = 0\n", r"max_compression_ratio = 0",
                 id="ratio"),
    pytest.param(GOOD + "[store\n", r"not valid TOML", id="toml-syntax"),
    pytest.param(GOOD.replace("out/lab-1.zarr", "out/lab-1"), r"must end in \.zarr", id="store-suffix"),
    pytest.param(GOOD + "[dicom]\nmin_slices = 0\n", r"\[dicom\] min_slices = 0: must be >= 1", id="dicom-min-slices"),
    pytest.param(GOOD + "[dicom]\nspacing_tolerance_rel = 0.6\n", r"spacing_tolerance_rel = 0\.6: must be 0 <=",
                 id="dicom-spacing-rel"),
    pytest.param(GOOD + "[dicom]\norientation_tolerance = 0.1\n", r"larger differences are different planes",
                 id="dicom-orientation"),
    pytest.param(GOOD + "[dicom]\ngantry_tilt = \"resample\"\n", r"gantry_tilt = 'resample': allowed: \"shear\"",
                 id="dicom-tilt-policy"),
    pytest.param(GOOD + "[dicom]\nphilips_scaling = \"precise\"\n",
                 r"\[dicom\] philips_scaling = 'precise': allowed: \"float\" \| \"display\"",
                 id="dicom-philips-scaling"),
    pytest.param(GOOD + "[dicom]\nphilips_scaling = true\n",
                 r"philips_scaling = True: expected \"float\" or \"display\"", id="dicom-philips-scaling-type"),
    pytest.param(GOOD + "[dicom]\nmin_slice = 2\n", r"\[dicom\] unknown key 'min_slice'", id="dicom-unknown-key"),
    pytest.param(GOOD + "[dicom]\ndescriptors = \"clean\"\n",
                 r"\[dicom\] descriptors = 'clean': allowed: \"keep\" \| \"drop\"", id="dicom-descriptors"),
    pytest.param(GOOD + "[dicom]\nmetadata = [\"ProtocolName\"]\n",
                 r"'ProtocolName' is a descriptor, and descriptors = \"drop\"", id="dicom-descriptor-opt-in-dropped"),
    pytest.param(GOOD + "[manifest]\nmetadata = [\"SeriesDescription\"]\n",
                 r"'SeriesDescription' is not an item metadata name \(\[dicom\] descriptors = \"drop\" leaves it out\)",
                 id="manifest-descriptor-dropped"),
    pytest.param(GOOD + "[run]\nparts_bytes = -1\n", r"\[run\] parts_bytes = -1: must be >= 0", id="parts-negative"),
    pytest.param(GOOD + "[run]\nwindow = -1\n", r"\[run\] window = -1: must be >= 0", id="window-negative"),
    pytest.param(GOOD + "[run]\nparts_bytes = \"512 MiB\"\n", r"parts_bytes = '512 MiB': expected a byte count",
                 id="parts-type"),
    # The key's name before "split" was kept for train/val/test: the error names the new key.
    pytest.param(GOOD + "[run]\nsplit_bytes = 0\n", r"\[run\] split_bytes was renamed parts_bytes",
                 id="parts-old-name"),
]


@pytest.mark.parametrize(("text", "match"), BAD)
def test_bad_spec_is_one_clear_error(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match) as info:
        load_spec(write(tmp_path, text), root=tmp_path)
    assert str(tmp_path / "delivery.toml") in str(info.value)
    assert info.value.hint


def test_cli_bad_spec_prints_one_line_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path, GOOD + "[store]\ncompressor = \"zstd\"\nlevel = 40\n")
    assert main(["convert", str(spec), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("labzarr: error: ") and lines[1].startswith("  hint: ")
    assert "zstd levels are 1..22" in lines[0]


def test_the_old_name_of_parts_bytes_hints_the_new_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        load_spec(write(tmp_path, GOOD + "[run]\nsplit_bytes = 1048576\n"), root=tmp_path)
    assert info.value.hint == "write `parts_bytes = 1048576` instead (same meaning)"


def test_shards_false_turns_sharding_off(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD + "[store]\nchunks = [64, 64, 64]\nshards = false\n"), root=tmp_path)
    assert spec.store.shards is None and spec.store.chunks == (64, 64, 64)


def test_cli_missing_spec_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(tmp_path / "none.toml")]) == 2
    assert "spec file not found" in capsys.readouterr().err


def test_labels_section_columns_by_letter_header_or_table(tmp_path: Path) -> None:
    text = GOOD + ('[labels]\nworkbook = "sub/../w.xlsx"\nsheet = "Annotations v2"\nid_column = { header = "ID" }\n'
                   'columns = { cell_type = "F", grade = "Grade (1-4)", b = { letter = "B" } }\nconflict = "warn"\n')
    labels = load_spec(write(tmp_path, text), root=tmp_path).labels
    assert labels is not None
    assert labels.workbook == tmp_path / "raw" / "w.xlsx"
    assert labels.id_column == ColumnRef(header="ID")
    assert dict(labels.columns) == {"cell_type": ColumnRef(letter="F"), "grade": ColumnRef(header="Grade (1-4)"),
                                    "b": ColumnRef(letter="B")}
    assert (labels.sheet, labels.header_row, labels.required, labels.conflict) == (
        "Annotations v2", "auto", True, "warn")
    assert ColumnRef.parse("XFD").letter and ColumnRef.parse("XFE").header and ColumnRef.parse("f").header


@pytest.mark.parametrize(("text", "match", "hint"), [
    pytest.param(GOOD + "[items]\nid_patern = '(?P<id>\\d+)'\n", r"\[items\] unknown key 'id_patern'",
                 "did you mean 'id_pattern'? [items] keys: exclude, id_normalize, id_pattern, include, "
                 "required_roles, roles", id="items-id_patern"),
    pytest.param(GOOD + "[dicom]\nmin_slice = 2\n", r"\[dicom\] unknown key 'min_slice'",
                 "did you mean 'min_slices'?", id="dicom-min_slice"),
    pytest.param(GOOD + "[delivery2]\n", r"unknown section \[delivery2\]", "did you mean 'delivery'? allowed sections:",
                 id="section"),
    pytest.param(GOOD + "[store]\nzzz = 1\n", r"\[store\] unknown key 'zzz'",
                 "remove it or fix its spelling; [store] keys: checksum, chunks, compressor, level, pyramid, shards, "
                 "statistics, "
                 "storage_options", id="nothing-close"),
])
def test_unknown_key_names_the_closest_known_one(tmp_path: Path, text: str, match: str, hint: str) -> None:
    with pytest.raises(UsageError, match=match) as info:
        load_spec(write(tmp_path, text), root=tmp_path)
    assert info.value.hint.startswith(hint), info.value.hint


def _link_into_raw(tmp: Path) -> None:
    (tmp / "out").symlink_to(tmp / "raw")  # `out/lab-1.zarr` is then raw/lab-1.zarr


def _raw_under_store(tmp: Path) -> None:
    (tmp / "d.zarr" / "raw").mkdir(parents=True)


@pytest.mark.parametrize(("setup", "raw", "store", "match"), [
    pytest.param(None, "raw", "raw/mylab/inside.zarr", r"store = '.*raw/mylab/inside\.zarr': lies inside "
                 r"\[delivery\] raw = '.*raw'", id="store-in-raw"),
    pytest.param(None, "raw", "raw/../raw/x.zarr", r"lies inside \[delivery\] raw", id="store-in-raw-by-dotdot"),
    pytest.param(_link_into_raw, "raw", "out/lab-1.zarr", r"lies inside \[delivery\] raw", id="store-in-raw-by-link"),
    pytest.param(_raw_under_store, "d.zarr/raw", "d.zarr", r"store = '.*d\.zarr': holds \[delivery\] raw = "
                 r"'.*d\.zarr/raw'", id="raw-in-store"),
])
def test_a_store_and_raw_that_nest_are_refused_before_any_work(tmp_path: Path, setup: object, raw: str, store: str,
                                                               match: str, capsys: pytest.CaptureFixture[str]) -> None:
    if callable(setup):
        setup(tmp_path)
    text = GOOD.replace('raw = "raw"', f'raw = "{raw}"').replace('"out/lab-1.zarr"', f'"{store}"')
    spec = write(tmp_path, text)
    with pytest.raises(UsageError, match=match) as info:
        load_spec(spec, root=tmp_path)
    assert "outside the raw folder" in info.value.hint or "side by side" in info.value.hint
    # `labzarr check` refuses the same way, and nothing was created: no store, no manifest.
    assert main(["check", str(spec)]) == 2
    assert "labzarr: error: " in capsys.readouterr().err
    assert not (tmp_path / "manifest.csv").exists() and not (tmp_path / "raw" / "mylab").exists()


def test_a_store_beside_raw_with_a_common_name_prefix_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "raw2").mkdir()
    text = GOOD.replace('"out/lab-1.zarr"', '"raw2/lab-1.zarr"')  # raw2 is not inside raw
    assert load_spec(write(tmp_path, text), root=tmp_path).delivery.store.local_path() == tmp_path / "raw2/lab-1.zarr"
