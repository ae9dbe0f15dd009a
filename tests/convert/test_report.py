from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image

from labzarr.convert import UsageError, convert_delivery, read_manifest
from labzarr.convert.demo import write_spec
from labzarr.convert.qc.report import sample_evenly, write_report

from .._chromium import Chromium
from ..conftest import make_delivery


def _png(path: Path) -> Image.Image:
    """A PNG read into memory, its file closed."""
    with Image.open(path) as img:
        img.load()
        return img.copy()


def _copy_converted(converted_demo, root: Path) -> Path:
    """A private copy of the converted demo (spec, manifest, summary, store) that a test may damage."""
    d, _ = converted_demo
    store = shutil.copytree(d.store, root / "demo.zarr")
    spec = write_spec(root / "manifests" / "demo" / "delivery.toml", raw=d.raw, store=store)
    for name in ("manifest.csv", "summary.json"):
        shutil.copyfile(d.spec.parent / name, spec.parent / name)
    return spec


# What a cell shows when the template printed an object instead of its value (a dict's method for `x.items`,
# a missing value, a repr): no table cell on the page may read like this.
_NOT_A_VALUE = re.compile(r"<built-in method|<bound method|object at 0x|Undefined|\bNone\b")
_TABLES_JS = ("Object.fromEntries(Array.from(document.querySelectorAll('table')).map((t, i) => "
              "[t.id || t.dataset.label || `table ${i}`, Array.from(t.rows).map(tr => "
              "Array.from(tr.cells).map(c => c.innerText))]))")


def _rendered_tables(page: Chromium) -> dict[str, list[list[str]]]:
    """Every table on the open page as the browser renders it: {id: rows of cell texts}, header row first."""
    tables: dict[str, list[list[str]]] = page.eval(_TABLES_JS)
    assert tables, "the page has no table"
    bad = [(name, cell) for name, rows in tables.items() for row in rows for cell in row if _NOT_A_VALUE.search(cell)]
    assert bad == [], bad
    return tables


def test_report_loads_in_headless_chromium(converted_demo, tmp_path: Path) -> None:
    d, result = converted_demo
    summary = json.loads(result.summary_path.read_text())
    out = write_report(d.spec, root=tmp_path, out=tmp_path / "report")
    assert out.index == tmp_path / "report" / "index.html"
    assert (out.ok, out.thumbnails, out.failed) == (summary["counts"]["ok"], summary["counts"]["ok"], 0)

    with Chromium() as page:
        page.open(out.index.as_uri())
        images = page.eval("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
        counts = page.eval("Object.fromEntries(Array.from(document.querySelectorAll('[data-count]'))"
                           ".map(e => [e.dataset.count, Number(e.innerText)]))")
        reasons = page.eval("Array.from(document.querySelectorAll('#reasons tbody tr'))"
                            ".map(tr => [tr.cells[0].innerText, Number(tr.cells[1].innerText)])")
        rejected = page.eval("Array.from(document.querySelectorAll('#rejected tbody tr'))"
                             ".map(tr => [tr.cells[2].innerText, tr.cells[4].innerText])")
        sheet = page.eval("document.querySelectorAll('#contact-sheet img').length")
        labels = page.eval("Object.fromEntries(Array.from(document.querySelectorAll('table.label-counts')).map(t => "
                           "[t.dataset.label, Object.fromEntries(Array.from(t.tBodies[0].rows)"
                           ".map(tr => [tr.cells[0].innerText, Number(tr.cells[1].innerText)]))]))")
        unmatched = page.eval("Array.from(document.querySelectorAll('#unmatched li')).map(li => li.innerText)")
        text = page.eval("document.body.innerText")
        tables = _rendered_tables(page)
        shot = page.screenshot(tmp_path / "report.png")
        assert page.errors == []

    assert images and all(ok and width > 0 for _, ok, width in images), images
    charts = {f"label_{i}.png" for i in range(len(summary["labels"]))}
    thumbs = {f"thumbs/{p.name}" for p in (out.index.parent / "thumbs").iterdir()}
    assert {src for src, _, _ in images} == {"reasons.png", "intensity.png", *charts, *thumbs}
    assert counts == {k: summary["counts"][k] for k in ("items", "ok", "rejected", "ignored")}
    assert dict(reasons) == summary["reasons"]
    rows = read_manifest(result.manifest)
    # a series row shows its file count after the source
    assert sorted(map(tuple, rejected)) == sorted(
        (r["reason"], r["source"] + (f' ({r["n_files"]} files)' if r["n_files"] != "1" else ""))
        for r in rows if r["status"] == "rejected")
    assert sheet == summary["counts"]["ok"]
    assert {"reasons", "rejected", "ignored", "intensity", "geometry"} <= tables.keys()
    assert labels == summary["labels"] and summary["labels"]  # the demo carries a workbook
    assert unmatched == [f"{u['id'].strip()} ({u['cell']})" for u in summary["unmatched_workbook_ids"]]
    assert f"Rejected items ({summary['counts']['rejected']})" in text
    assert "demo: QC report" in text and "notes.txt" in text
    assert f"Items without a label ({len(summary['unlabelled_items'])})" in text

    img = np.asarray(_png(shot).convert("L"))
    assert img.shape[1] == 1280 and img.shape[0] > 1500  # the whole page, not the viewport
    assert img.std() > 20 and len(np.unique(img)) > 50  # text, tables and thumbnails, not a blank page


def test_report_cli_writes_under_data_reports(converted_demo, tmp_path: Path) -> None:
    d, result = converted_demo
    c = result.summary["counts"]
    project = d.spec.parents[2]  # the folder holding manifests/: where data/reports/ goes, from any folder
    out = subprocess.run([sys.executable, "-m", "labzarr", "report", str(d.spec), "--max-thumbs", "4"], cwd=project,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    index = project / "data" / "reports" / "demo" / "index.html"
    assert out.stdout.strip() == (f"report: data/reports/demo/index.html ({c['ok']} ok items, 4 thumbnails, "
                                  f"{c['rejected']} rejected)")
    html = index.read_text()
    assert f"Showing 4 of {c['ok']} ok items" in html
    assert len(list(index.parent.glob("thumbs/*.png"))) == 4
    # a rerun replaces the folder: no thumbnail of the earlier run is left behind
    write_report(d.spec, max_thumbs=2)
    assert len(list(index.parent.glob("thumbs/*.png"))) == 2
    assert not [p for p in index.parent.parent.iterdir() if p.name.startswith(".")]


def test_report_shows_labels_and_unmatched_workbook_ids(converted_demo, tmp_path: Path) -> None:
    spec = _copy_converted(converted_demo, tmp_path)
    summary_path = spec.parent / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["labels"] = {"cell_type": {"T": 6, "B": 3, "": 1}, "grade": {str(g): 1 for g in range(40)}}
    summary["unmatched_workbook_ids"] = [{"id": " case_099", "cell": "Sheet3!A17", "normalized": "case99"},
                                         "case-100<script>alert(1)</script>"]
    summary_path.write_text(json.dumps(summary))
    out = write_report(spec, root=tmp_path, out=tmp_path / "r")
    html = out.index.read_text()
    assert (tmp_path / "r" / "label_0.png").is_file() and (tmp_path / "r" / "label_1.png").is_file()
    assert '<table class="label-counts" data-label="cell_type">' in html
    assert "<tr><td>T</td><td class=\"num\">6</td></tr>" in html and "(empty)" in html
    assert "<li><code>case_099 (Sheet3!A17)</code></li>" in html
    assert "<li><code>case-100&lt;script&gt;alert(1)&lt;/script&gt;</code></li>" in html  # workbook text is escaped
    chart = _png(tmp_path / "r" / "label_1.png")
    assert chart.height < 1200  # 40 values: the top 25 and one "other" bar


def test_report_survives_a_damaged_chunk(converted_demo, tmp_path: Path) -> None:
    spec = _copy_converted(converted_demo, tmp_path)
    chunks = (tmp_path / "demo.zarr" / "volumes" / "case1" / "0" / "c").rglob("*")
    chunk = next(p for p in sorted(chunks) if p.is_file())
    blob = bytearray(chunk.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    chunk.write_bytes(bytes(blob))
    out = write_report(spec, root=tmp_path, out=tmp_path / "r")
    assert (out.thumbnails, out.failed) == (converted_demo[1].summary["counts"]["ok"] - 1, 1)
    assert "cannot read from the store" in out.index.read_text()


def _edit_manifest(spec: Path) -> None:
    p = spec.parent / "manifest.csv"
    p.write_text(p.read_text().replace("case_011.nii.gz", "case_011_renamed.nii.gz"))


def _other_store(spec: Path) -> None:
    root = zarr.open_group(spec.parent.parent.parent / "demo.zarr", mode="a")
    root.attrs["labzarr"] = {**root.attrs["labzarr"], "manifest_sha256": "0" * 64}


def _no_store(spec: Path) -> None:
    shutil.rmtree(spec.parent.parent.parent / "demo.zarr")


@pytest.mark.parametrize("damage, match", [
    pytest.param(_edit_manifest, r"manifest.csv: its sha256 differs from the one summary.json records",
                 id="edited-manifest"),
    pytest.param(_other_store, r"demo.zarr: written by another run than", id="store-from-another-run"),
    pytest.param(_no_store, r"demo.zarr: no such store", id="store-missing"),
])
def test_report_refuses_a_record_out_of_step(converted_demo, tmp_path: Path, damage, match: str) -> None:
    spec = _copy_converted(converted_demo, tmp_path)
    damage(spec)
    with pytest.raises(UsageError, match=match) as err:
        write_report(spec, root=tmp_path, out=tmp_path / "r")
    assert "labzarr convert" in err.value.hint
    assert not (tmp_path / "r").exists()


def test_report_before_convert_says_what_to_do(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    with pytest.raises(UsageError, match=r"summary.json: not found; delivery 'demo' is not converted yet") as err:
        write_report(d.spec, root=tmp_path)
    assert err.value.hint == f"run `labzarr convert {d.spec}` first"


@pytest.mark.parametrize("n, k, want", [
    (5, 200, [0, 1, 2, 3, 4]), (10, 1, [0]), (10, 2, [0, 9]), (10, 4, [0, 3, 6, 9]), (1000, 3, [0, 500, 999]),
    (0, 5, []),
])
def test_sample_evenly(n: int, k: int, want: list[int]) -> None:
    assert sample_evenly(n, k) == want


def test_report_draws_2d_images_from_their_stacks(tmp_path: Path, scheduler: str) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):  # RGB photos with a red square in the middle
        img = (rng.random((300, 400, 3)) * 60).astype(np.uint8)
        img[100:200, 150:250] = (220, 20, 20)
        Image.fromarray(img).save(raw / f"case_{i:03d}.jpg", quality=95)
    Image.fromarray(np.tile(np.linspace(0, 255, 500).astype(np.uint8), (200, 1))).save(raw / "case_003.png")
    spec = write_spec(tmp_path / "manifests" / "tiles" / "delivery.toml", raw=raw, store=tmp_path / "tiles.zarr",
                      name="tiles", labels=False)
    result = convert_delivery(spec, scheduler=scheduler)
    rows = {r["source"]: r for r in read_manifest(result.manifest)}
    assert all(r["status"] == "ok" and r["slot"] for r in rows.values())  # every image sits in a stack slot
    out = write_report(spec, root=tmp_path, out=tmp_path / "r")
    assert (out.thumbnails, out.failed) == (4, 0)
    for i in range(3):
        thumb = _png(out.index.parent / f"thumbs/{int(rows[f'case_{i:03d}.jpg']['index']):06d}.png")
        assert thumb.mode == "RGB" and thumb.size == (256, 192)  # downscaled, aspect kept
        r, g, b = thumb.getpixel((128, 96))
        assert r > 180 and g < 60 and b < 60  # the red square, where it was
    gray = _png(out.index.parent / f"thumbs/{int(rows['case_003.png']['index']):06d}.png")
    assert gray.mode == "L" and gray.getpixel((0, 50)) < 10 and gray.getpixel((gray.width - 1, 50)) > 245


def test_report_tables_are_capped(converted_demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from labzarr.convert.qc import report

    monkeypatch.setattr(report, "_MAX_ROWS", 3)
    spec = _copy_converted(converted_demo, tmp_path)
    html = write_report(spec, root=tmp_path, out=tmp_path / "r").index.read_text()
    n = converted_demo[1].summary["counts"]["rejected"]
    body = html.split('<table id="rejected">')[1].split("</table>")[0]
    assert body.count("<tr>") == 1 + 3  # header and three rows
    assert f"The first 3 of {n}; all are in <code>manifest.csv</code>." in html


def test_report_lays_each_mask_over_its_image(converted_seg, tmp_path: Path) -> None:
    d, result, _ = converted_seg
    out = write_report(d.spec, root=tmp_path, out=tmp_path / "r")
    html = out.index.read_text()
    classes = result.summary["classes"]
    rows = html.split('<table id="mask-classes">')[1].split("</table>")[0].split("<tr>")[2:]
    assert [r.split("<td>")[1].split("</td>")[0] for r in rows] == sorted(classes, key=int)
    assert html.count('<span class="swatch"') == sum(1 for k in classes if int(k) > 0)
    ok = [r for r in read_manifest(result.manifest) if r["status"] == "ok"]
    assert out.thumbnails == len(ok) > 0
    for row in ok:
        assert f"mask classes: {row['classes']}" in html
        img = np.asarray(_png(out.index.parent / f"thumbs/{int(row['index']):06d}.png"))
        assert img.ndim == 3  # colour: the classes are drawn
        tinted = (img.max(axis=2).astype(int) - img.min(axis=2)) > 40
        assert 0.05 < tinted.mean() < 0.9  # some of the anatomy is labelled, not all of it


def test_report_shows_the_delivery_statistics(converted_seg, tmp_path: Path) -> None:
    """Intensity per kind and over the mask foreground, from the store's records, with their histogram."""
    from labzarr.store import open_store

    d, _, _ = converted_seg
    out = write_report(d.spec, root=tmp_path, out=tmp_path / "r")
    body = out.index.read_text().split('<table id="intensity">')[1].split("</table>")[0]
    stats = open_store(d.store).stats()
    for name, (s,) in (("nifti", stats.kinds["nifti"].channels), ("foreground", stats.foreground())):
        row = body.split(f"<td>{name}</td>")[1].split("</tr>")[0]
        assert f"{s.count:,}" in row and f"{s.percentile(99.5):.5g}" in row and f"{s.mean:.5g}" in row
    chart = _png(out.index.parent / "intensity.png")
    assert chart.size == (640, 260)


def test_report_splits_table_shows_the_summary_counts(converted_cohort: Path, tmp_path: Path) -> None:
    """Each split's groups and items, as the browser renders them, are the counts summary.json holds."""
    summary = json.loads((converted_cohort.parent / "summary.json").read_text())
    out = write_report(converted_cohort, out=tmp_path / "r")
    with Chromium() as page:
        page.open(out.index.as_uri())
        tables = _rendered_tables(page)
        assert page.errors == []
    header, *rows = tables["split-sizes"]
    assert header == ["split", "groups", "items"]
    sizes = summary["splits"]["sizes"]
    assert {name: (int(g), int(n)) for name, g, n in rows} == {
        name: (s["groups"], s["items"]) for name, s in sizes.items()}
    assert sum(s["items"] for s in sizes.values()) > 0
