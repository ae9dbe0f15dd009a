"""Grouping DICOM files into items (pure): series by UID, splits by echo/plane/size, naming, accounting."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from labzarr.convert.discover import Candidate, FileEntry
from labzarr.convert.plan.series import group_series, series_of
from labzarr.convert.probe import Probe
from labzarr.readers import Reason, SeriesRules, read_dicom_header, read_head

from ..dicom_data import CT5N, DICOMDIR_TESTS, four_d, multi_echo


def probe(path: Path, rel: str, item_id: str | None = "case1") -> tuple[Candidate, Probe]:
    head = read_head(path)
    return (Candidate(FileEntry(rel, str(path), path.stat().st_size), item_id),
            Probe(rel=rel, size=head.size, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), kind="dicom",
                  text=False, gzipped=False, gzip_error=None, magic=head.data[:16],
                  dicom=read_dicom_header(path, head)))


def files(paths: list[Path], folder: str, item_id: str | None = "case1") -> list[tuple[Candidate, Probe]]:
    return [probe(p, f"{folder}/{p.name}", item_id) for p in paths]


def group(found: list[tuple[Candidate, Probe]], rules: SeriesRules = SeriesRules()):
    items, rows = group_series(found, rules, id_pattern="(?P<id>case_?\\d+)")
    members = [m for i in items for m in i.members] + [m for r in rows for m in (r.members or (r.source,))]
    # Every file in exactly one item or row; a multi-frame file split frame by frame is in each of its parts.
    assert sorted(set(members)) == sorted(c.rel for c, _ in found)
    assert all(members.count(m) == 1 or _frames_of(found, m) > 1 for m in members)
    return items, rows


def _frames_of(found: list[tuple[Candidate, Probe]], rel: str) -> int:
    return next(len(p.dicom.frames) for c, p in found if c.rel == rel and p.dicom is not None)


def test_two_series_in_one_folder_are_two_items(tmp_path: Path) -> None:
    found = files(CT5N, "case_1/dicom") + files(four_d(tmp_path / "fmri", volumes=2), "case_1/dicom")
    items, rows = group(found)
    assert not rows
    assert sorted((len(i.members), i.stack.n_volumes) for i in items) == [(5, 1), (10, 2)]
    ct = next(i for i in items if len(i.members) == 5)
    assert ct.members == tuple(sorted(f"case_1/dicom/{p.name}" for p in CT5N))


def test_same_series_number_twice_in_a_folder_is_told_apart_by_uid(tmp_path: Path) -> None:
    found = files(CT5N, "case_1") + files(four_d(tmp_path / "fmri", volumes=2), "case_1")  # both series number 5
    names = sorted(i.source for i in group(found)[0])
    assert len(set(names)) == 2 and all(n.startswith("case_1/ (series 5 ") for n in names)


def test_multi_echo_series_splits_per_echo_like_dcm2niix(tmp_path: Path) -> None:
    items, rows = group(files(multi_echo(tmp_path / "me", echoes=2), "case_1/me"))
    assert not rows
    assert [i.source for i in items] == ["case_1/me/ (series 5, echo 1)", "case_1/me/ (series 5, echo 2)"]
    assert all("series split into 2 parts by echo (as dcm2niix)" in i.stack.warnings for i in items)
    assert [sorted(Path(m).name for m in i.members) for i in items] == [
        [f"echo1_{k}.dcm" for k in range(1, 6)], [f"echo2_{k}.dcm" for k in range(1, 6)]]


def test_localizer_planes_are_separate_parts() -> None:
    tri = sorted((DICOMDIR_TESTS / "98892003" / "MR2").iterdir())
    found = [f for f in files(tri, "case_1/loc") if f[1].dicom.series_uid.endswith(".136")]
    items, rows = group(found, SeriesRules(min_slices=1))
    assert not rows
    assert sorted(i.source for i in items) == [f"case_1/loc/ (series 2, plane {k} of 3)" for k in (1, 2, 3)]
    _, rows = group(found)  # one slice per plane is too short under the default rules: one row, not three
    (row,) = rows
    assert (row.reason, row.source, row.n_files) == (Reason.SERIES_TOO_SHORT, "case_1/loc/ (series 2)", 3)
    assert row.detail == ("split by image plane into 3 parts of 1, 1, 1 slice position(s), each fewer than "
                          "[dicom] min_slices = 4: a localizer or scout, not a volume")


def test_three_localizer_folders_are_three_rows_that_say_where() -> None:
    tri = sorted((DICOMDIR_TESTS / "98892003" / "MR2").iterdir())
    one = [f for f in files(tri, "x") if f[1].dicom.series_uid.endswith(".136")]
    scouts = []
    for k in (1, 2, 3):  # three sessions' scouts: one series each, in a folder each
        for c, p in one:
            rel = f"case_1/scout{k}/{c.rel.rsplit('/', 1)[1]}"
            scouts.append((replace(c, entry=replace(c.entry, rel=rel)),
                           replace(p, rel=rel, dicom=replace(p.dicom, series_uid=f"{p.dicom.series_uid}.{k}"))))
    items, rows = group(scouts)
    assert not items
    assert [(r.source, r.reason, r.n_files) for r in rows] == [
        (f"case_1/scout{k}/ (series 2)", Reason.SERIES_TOO_SHORT, 3) for k in (1, 2, 3)]
    assert all("[dicom] min_slices = 4: a localizer or scout" in r.detail for r in rows)


def _at(paths: list[Path], rels: list[str], ids: list[str]) -> list[tuple[Candidate, Probe]]:
    return [probe(p, rel, item_id) for p, rel, item_id in zip(paths, rels, ids, strict=True)]


# Issue 33: a source must name its files, unambiguously across the delivery (a report, an email to the lab).
# (found, the sources expected: exact strings, or a prefix each of the distinct sources starts with)
NAMING = [
    pytest.param(lambda tmp: _at(CT5N[:2], ["ct003.dcm", "mr002.dcm"], ["ct3", "mr2"]),
                 ["ct003.dcm (series 5)", "mr002.dcm (series 5)"], id="one-file-series-at-the-root"),
    pytest.param(lambda tmp: _at(CT5N[:1], ["case_1/ct/a.dcm"], ["case1"]) + files(CT5N[1:], "case_1/ct", "case2"),
                 ["case_1/ct/ (series 5)", "case_1/ct/a.dcm (series 5)"], id="one-file-beside-its-series"),
    pytest.param(lambda tmp: files(CT5N, "scans", "ct3") + files(four_d(tmp / "fmri", volumes=2), "scans", "mr2"),
                 "scans/ (series 5 ", id="two-ids-two-series-one-folder"),
    pytest.param(lambda tmp: files(CT5N[:3], "s", "a1") + files(CT5N[3:], "s", "b2"),
                 "s/ (series 5 ", id="one-series-given-two-ids"),
]


@pytest.mark.parametrize(("build", "want"), NAMING)
def test_every_series_source_names_its_files_once(tmp_path: Path, build, want: list[str] | str) -> None:
    items, rows = group(build(tmp_path))
    sources = [i.source for i in items] + [r.source for r in rows]
    assert len(set(sources)) == len(sources) == (len(want) if isinstance(want, list) else 2)
    if isinstance(want, list):
        assert sorted(sources) == want
    else:
        assert all(s.startswith(want) for s in sources)
    assert all(series_of(s) == s for s in sources)  # a source names its whole series, so collisions count it once


def test_split_parts_name_their_series() -> None:
    assert series_of("case_1/me/ (series 5, echo 2)") == "case_1/me/ (series 5)"
    assert series_of("a/ (series 2 1.2.3, plane 1 of 3)") == "a/ (series 2 1.2.3)"
    assert series_of("a/ (series 5)") == "a/ (series 5)"
    assert series_of("case_1/x.dcm") == ""
    assert series_of("case_1/x.dcm (series 5, echo 2)") == "case_1/x.dcm (series 5)"


def test_a_file_holding_two_planes_is_split_frame_by_frame() -> None:
    """The split is by frame: a file whose frames lie in two planes is a member of both parts."""
    found = files(CT5N, "case_1/ct")
    c, p = found[0]
    f0 = p.dicom.frames[0]
    sagittal = replace(f0, index=1, orientation=(0.0, 1.0, 0.0, 0.0, 0.0, -1.0))
    found[0] = (c, replace(p, dicom=replace(p.dicom, frames=(f0, sagittal))))
    (item,), (row,) = group(found)
    assert (item.source, len(item.members), item.stack.n_slices) == ("case_1/ct/ (series 5, plane 1 of 2)", 5, 5)
    assert [f.frame for f in item.stack.frames if f.source == c.rel] == [0]
    assert (row.source, row.reason, row.members) == ("case_1/ct/ (series 5, plane 2 of 2)", Reason.SERIES_TOO_SHORT,
                                                     (c.rel,))
    assert row.sha256 not in (item.sha256, p.sha256), "the parts of one file do not share a content hash"


def test_series_without_item_id_is_one_rejected_row() -> None:
    _, (row,) = group(files(CT5N, "scans/ct", item_id=None))
    assert (row.status, row.reason, row.n_files, row.source) == ("rejected", Reason.ID_UNMATCHED, 5,
                                                                 "scans/ct/ (series 5)")
    assert "id_pattern" in row.detail


def test_a_series_spread_over_folders_is_one_item() -> None:
    found = files(CT5N[:2], "case_1/a") + files(CT5N[2:], "case_1/b")
    (item,), _ = group(found)
    assert item.source == "case_1/ (series 5)" and len(item.members) == 5


def test_images_without_geometry_are_one_item_per_file() -> None:
    crs = [next((DICOMDIR_TESTS / "77654033" / f"CR{k}").iterdir()) for k in (1, 2, 3)]
    items, _ = group(files(crs, "case_1/xr"))
    assert sorted(i.source for i in items) == sorted(f"case_1/xr/{p.name}" for p in crs)
    assert all(i.stack.layout == "image" for i in items)


def test_series_hash_is_content_not_names_or_order() -> None:
    a = group(files(CT5N, "case_1/x"))[0][0].sha256
    b = group(files(list(reversed(CT5N)), "case_1/y"))[0][0].sha256
    assert a == b
    assert a == hashlib.sha256("\n".join(sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in CT5N))
                                .encode()).hexdigest()


@pytest.mark.parametrize("drop", [1, 2, 3])
def test_missing_interior_slice_rejects_the_series_with_every_member(drop: int) -> None:
    _, (row,) = group(files([p for k, p in enumerate(CT5N) if k != drop], "case_1/ct"), SeriesRules(min_slices=3))
    assert (row.reason, row.n_files) == (Reason.SERIES_MISSING_SLICES, 4)


def _typed(found: list[tuple[Candidate, Probe]], image_type: tuple[str, ...], **frame: object
           ) -> list[tuple[Candidate, Probe]]:
    return [(c, replace(p, dicom=replace(p.dicom, frames=tuple(replace(f, image_type=image_type, **frame)
                                                                for f in p.dicom.frames))))
            for c, p in found]


@pytest.mark.parametrize("image_type, item_id", [
    pytest.param(("DERIVED", "PRIMARY", "DIFFUSION", "ADC"), "case1~adc", id="siemens-adc-series"),
    pytest.param(("DERIVED", "PRIMARY", "DIFFUSION", "TRACEW"), "case1~trace", id="siemens-trace-series"),
    pytest.param(("DERIVED", "SECONDARY", "AXIAL"), "case1", id="ct-reconstruction-is-the-series"),
])
def test_a_whole_derived_series_is_named_for_what_it_is(image_type: tuple[str, ...], item_id: str) -> None:
    (item,), _ = group(_typed(files(CT5N, "case_1/ct"), image_type))
    assert item.item_id == item_id
    _, rows = group(_typed(files(CT5N, "case_1/ct"), image_type), SeriesRules(derived="drop"))
    if item_id != "case1":
        (row,) = rows
        assert (row.status, row.n_files) == ("ignored", 5) and 'left out ([dicom] derived = "drop")' in row.detail


def test_a_b0_and_trace_pair_is_kept_whole(tmp_path: Path) -> None:
    """dcm2niix disables the trace removal when fewer than two other volumes would remain."""
    found = files(four_d(tmp_path / "pair", volumes=2), "case_1/dwi")
    philips = [(c, replace(p, dicom=replace(p.dicom, manufacturer="Philips", frames=tuple(
        replace(f, bvalue=0.0 if "vol1" in c.rel else 1000.0, gradient=(0.0, 0.0, 0.0)) for f in p.dicom.frames))))
        for c, p in found]
    (item,), _ = group(philips)
    assert (item.item_id, item.stack.n_volumes) == ("case1", 2)
