"""No PHI by default: identifying values planted in 40+ DICOM tags never reach anything labzarr writes.

A delivery of real files (pydicom's CT slices, nibabel's Philips enhanced MPRAGE, Siemens-style mosaics and a
Philips DWI with its trace volume) gets a unique marker in every identifying tag: names, IDs, birth, study and
acquisition dates and times, institutions, devices, comments, UIDs, inside sequences, inside an enhanced file's
per-frame functional groups and in private tags. It is converted with every acquisition-metadata name as a
manifest column, its QC page written and `labzarr inspect` (with `--stats`) run; then every byte of the store
(bookkeeping included), the manifest, `summary.json`, the report and the printed output is searched for every
marker, in the spellings a writer might give it. Opting one tag in by name (`[dicom] metadata`) brings exactly
that value in. The free-text descriptors (SeriesDescription, ProtocolName, where operators type names) are
planted too: left out by default, stored with `[dicom] descriptors = "keep"`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pydicom
import pytest
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence as DicomSequence

from labzarr.convert import RunResult, convert_delivery, read_manifest
from labzarr.convert.demo import write_spec
from labzarr.convert.qc.report import write_report
from labzarr.readers.dicom import ALLOWED, DESCRIPTORS
from labzarr.store import open_store

from ..dicom_data import ct_series, mosaic
from ..dicom_vendors import philips_dwi, philips_enhanced

UID_ROOT = "1.2.826.0.1.3680043.2.1337.7"  # every planted UID starts here; no real UID does

# keyword -> marker, by VR. Person names, then other text, dates, times, a date-time.
PN = ["PatientName", "ReferringPhysicianName", "PerformingPhysicianName", "OperatorsName", "PhysiciansOfRecord",
      "NameOfPhysiciansReadingStudy", "RequestingPhysician", "PatientMotherBirthName", "PatientBirthName"]
TEXT = ["PatientID", "IssuerOfPatientID", "OtherPatientIDs", "PatientAddress", "PatientTelephoneNumbers",
        "EthnicGroup", "MilitaryRank", "InstitutionName", "InstitutionAddress", "InstitutionalDepartmentName",
        "StationName", "AccessionNumber", "StudyID", "DeviceSerialNumber", "PatientComments",
        "AdditionalPatientHistory", "StudyDescription", "RequestedProcedureDescription", "Occupation",
        "PerformedProcedureStepID", "PerformedProcedureStepDescription", "ImageComments"]
DATES = {"PatientBirthDate": "19370612", "StudyDate": "19410723", "SeriesDate": "19430214",
         "AcquisitionDate": "19470918", "ContentDate": "19510305", "PerformedProcedureStepStartDate": "19530811"}
TIMES = {"StudyTime": "031337.271828", "SeriesTime": "041337.314159", "AcquisitionTime": "051337.161803",
         "ContentTime": "061337.141421", "PatientBirthTime": "071337.173205"}
DATETIME = {"AcquisitionDateTime": "19570402081337.223606"}
# Free text the allow-list names, kept only with [dicom] descriptors = "keep": an operator's typing
DESCRIPTIVE = {"SeriesDescription": "PHIMARK series of Zqxwdesc", "ProtocolName": "PHIMARK protocol Zqxwproto"}


def _name(tag: str) -> str:
    return f"Zqxw{tag[:6]}^Phimark{len(tag):02d}"


def _text(tag: str) -> str:
    return f"PHIMARK{tag[:10].upper()}"[:16]  # fits SH (16 characters)


def markers() -> dict[str, str]:
    """Every planted value, by where it was planted."""
    out = {t: _name(t) for t in PN} | {t: _text(t) for t in TEXT} | DATES | TIMES | DATETIME | DESCRIPTIVE
    out |= {"OtherPatientIDsSequence/PatientID": "PHIMARKNESTEDID1",
            "RequestAttributesSequence/RequestedProcedureID": "PHIMARKREQPROC01",
            "RequestAttributesSequence/ScheduledProcedureStepID": "PHIMARKSCHEDSTEP",
            "ScheduledProcedureStepSequence/ScheduledPerformingPhysicianName": "Zqxwsched^Phimarknested",
            "private 0009,1010 (ACME 1.0)": "PHIMARKPRIVATELO",
            "private 0009,1011 (ACME 1.0)": "PHIMARK private note of the patient's history",
            "private 0029,1010 (OTHERCO)": "PHIMARKPRIVATE29",
            "per-frame FrameComments": "PHIMARK per-frame comment",
            "per-frame FrameAcquisitionDateTime": "19610527091337.5",
            "UIDs": UID_ROOT}
    return out


def spellings(value: str) -> set[str]:
    """The forms a value might be written in: as is, a name with spaces, a date or time with separators."""
    out = {value}
    if "^" in value:
        out |= {value.replace("^", " "), value.split("^")[0]}
    if len(value) >= 8 and value[:8].isdigit() and value.startswith("19"):
        out.add(f"{value[:4]}-{value[4:6]}-{value[6:8]}")
    if len(value) >= 6 and value[:6].isdigit() and "." in value and not value.startswith("19"):
        out.add(f"{value[:2]}:{value[2:4]}:{value[4:6]}")
        out.add(value.split(".")[1])  # the fraction alone is unique too
    return out


def plant(ds: Dataset, series: int, instance: int) -> None:
    """Put every marker into `ds` (one file of series number `series`)."""
    for tag in PN:
        setattr(ds, tag, _name(tag))
    for tag in TEXT:
        setattr(ds, tag, _text(tag))
    for tag, value in (DATES | TIMES | DATETIME | DESCRIPTIVE).items():
        setattr(ds, tag, value)
    m = markers()
    nested = Dataset()
    nested.PatientID = m["OtherPatientIDsSequence/PatientID"]
    ds.OtherPatientIDsSequence = DicomSequence([nested])
    request = Dataset()
    request.RequestedProcedureID = m["RequestAttributesSequence/RequestedProcedureID"]
    request.ScheduledProcedureStepID = m["RequestAttributesSequence/ScheduledProcedureStepID"]
    ds.RequestAttributesSequence = DicomSequence([request])
    step = Dataset()
    step.ScheduledPerformingPhysicianName = m["ScheduledProcedureStepSequence/ScheduledPerformingPhysicianName"]
    ds.ScheduledProcedureStepSequence = DicomSequence([step])
    acme = ds.private_block(0x0009, "ACME 1.0", create=True)
    acme.add_new(0x10, "LO", m["private 0009,1010 (ACME 1.0)"])
    acme.add_new(0x11, "UT", m["private 0009,1011 (ACME 1.0)"])
    ds.private_block(0x0029, "OTHERCO", create=True).add_new(0x10, "LO", m["private 0029,1010 (OTHERCO)"])
    ds.StudyInstanceUID = f"{UID_ROOT}.1.{series}"
    ds.SeriesInstanceUID = f"{UID_ROOT}.2.{series}"
    ds.FrameOfReferenceUID = f"{UID_ROOT}.3.{series}"
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = f"{UID_ROOT}.4.{series}.{instance}"
    ref = Dataset()
    ref.ReferencedSOPClassUID = "1.2.840.10008.3.1.2.1.1"
    ref.ReferencedSOPInstanceUID = f"{UID_ROOT}.5.{series}"
    ds.ReferencedPatientSequence = DicomSequence([ref])
    for frame in ds.get("PerFrameFunctionalGroupsSequence") or []:
        content = frame.FrameContentSequence[0] if "FrameContentSequence" in frame else Dataset()
        content.FrameAcquisitionDateTime = m["per-frame FrameAcquisitionDateTime"]
        content.FrameComments = m["per-frame FrameComments"]
        frame.FrameContentSequence = DicomSequence([content])


def build(raw: Path) -> list[Path]:
    """The delivery, every file planted; returns its files."""
    files = ct_series(raw / "case_001" / "ct", "case_001")
    files += mosaic(raw / "case_002" / "bold", volumes=2)
    files += philips_dwi(raw / "case_003" / "dwi")
    files.append(philips_enhanced(raw / "case_004", frames=6))
    for series, folder in enumerate(sorted({p.parent for p in files}), 1):
        for instance, path in enumerate(sorted(p for p in files if p.parent == folder), 1):
            ds = pydicom.dcmread(path)
            plant(ds, series, instance)
            ds.save_as(path, enforce_file_format=True)
    assert not any(v in str(p) for p in files for v in markers().values())  # names are written on purpose
    return files


@pytest.fixture(scope="module")
def delivery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("phi")
    build(root / "raw")
    return root


def convert(root: Path, name: str, scheduler: str, extra: str = "") -> tuple[RunResult, Path, Path]:
    store = root / "stores" / f"{name}.zarr"
    keep = 'descriptors = "keep"' in extra
    columns = sorted(ALLOWED - (set() if keep else DESCRIPTORS)) + (["StationName"] if "StationName" in extra else [])
    spec = write_spec(root / "manifests" / name / "delivery.toml", raw=root / "raw", store=store, name=name,
                      labels=False, extra=f"{extra}\n[manifest]\nmetadata = {json.dumps(columns)}\n")
    return convert_delivery(spec, scheduler=scheduler), store, spec


@pytest.fixture(scope="module")
def written(delivery: Path, scheduler: str) -> Iterator[tuple[RunResult, Path, dict[str, bytes]]]:
    """The default conversion, and every byte it (and the report and inspect) wrote, by file."""
    result, store, spec = convert(delivery, "default", scheduler)
    report = write_report(spec, root=delivery, out=delivery / "report")
    cli = Path(sys.executable).parent / "labzarr"
    printed = b"".join(subprocess.run([str(cli), "inspect", *args, str(store)], capture_output=True, timeout=120,
                                      check=True).stdout for args in ([], ["--stats"]))
    files = {str(p): p.read_bytes() for folder in (store, spec.parent, report.index.parent)
             for p in sorted(Path(folder).rglob("*")) if p.is_file()}
    files |= decoded_tables(store)
    files["labzarr inspect output"] = printed
    yield result, store, files


def decoded_tables(store: Path) -> dict[str, bytes]:
    """The decoded bytes of every table in the store (the index, the statistics): their chunk files are
    compressed, so a value in them would not show in the files' own bytes."""
    from labzarr.store.format.table import TABLE, read_table
    from labzarr.store.location import FolderTransport

    transport = FolderTransport(store)
    out = {}
    for doc in sorted(store.rglob("zarr.json")):
        if TABLE in json.loads(doc.read_bytes()).get("attributes", {}):
            path = doc.parent.relative_to(store).as_posix()
            _, columns = read_table(transport, path)
            out[f"table {path}"] = b"".join(c.tobytes() for c in columns.values())
    transport.close()
    assert out, f"{store}: no table found"
    return out


def test_the_delivery_converts_with_its_metadata(written) -> None:
    result, store, _ = written
    rows = read_manifest(result.manifest)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) >= 4, [(r["source"], r["status"], r["reason"], r["detail"]) for r in rows]
    view = open_store(store)
    assert all(item.metadata.get("Modality") for item in view.items)  # the allow-list did its work
    assert any(r["meta.EchoTime"] for r in ok)


def test_no_planted_value_reaches_any_byte_written(written) -> None:
    _, _, files = written
    assert len(markers()) >= 40
    for kind in ("manifest.csv", "summary.json", "index.html", "zarr.json", "last-run.json"):
        assert any(name.endswith(kind) for name in files), kind
    assert any("/c/" in name for name in files)  # chunks are searched too, not only metadata
    leaks = [f"{where} ({form!r}) in {name}" for where, value in markers().items() for form in spellings(value)
             for name, data in files.items() if form.encode() in data]
    assert not leaks, "\n".join(leaks[:40])


def test_a_tag_named_in_dicom_metadata_is_brought_in_and_nothing_else(delivery: Path, scheduler: str) -> None:
    result, store, _ = convert(delivery, "optin", scheduler, extra='[dicom]\nmetadata = ["StationName"]\n')
    station = _text("StationName")
    view = open_store(store)
    assert {item.metadata.get("StationName") for item in view.items} == {station}
    rows = [r for r in read_manifest(result.manifest) if r["status"] == "ok"]
    assert rows and {r["meta.StationName"] for r in rows} == {station}
    written = b"".join(p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()) + result.manifest.read_bytes()
    others = [where for where, value in markers().items() if where != "StationName"
              for form in spellings(value) if form.encode() in written]
    assert not others, others


def test_descriptors_are_stored_only_when_kept(delivery: Path, scheduler: str) -> None:
    """With [dicom] descriptors = "keep" the descriptors reach every item's metadata, the store's index and the
    manifest's columns; every other marker still reaches nothing (the default leaving them out is the test above)."""
    assert set(DESCRIPTIVE) == DESCRIPTORS
    result, store, _ = convert(delivery, "keep", scheduler, extra='[dicom]\ndescriptors = "keep"\n')
    view = open_store(store)
    for name, value in DESCRIPTIVE.items():
        assert {item.metadata.get(name) for item in view.items} == {value}
        assert any(value.encode() in data for data in decoded_tables(store).values())  # the store's index of items
        assert all(value.encode() in (store / item.array / "zarr.json").read_bytes() for item in view.items)
    rows = [r for r in read_manifest(result.manifest) if r["status"] == "ok"]
    assert rows and all((r["meta.SeriesDescription"], r["meta.ProtocolName"]) == tuple(DESCRIPTIVE.values())
                        for r in rows)
    written = b"".join(p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()) + result.manifest.read_bytes()
    others = [where for where, value in markers().items() if where not in DESCRIPTIVE
              for form in spellings(value) if form.encode() in written]
    assert not others, others
