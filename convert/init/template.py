"""The text of a new delivery.toml: every key written out with its default and a comment (pure).

Values come from the spec module's own dataclasses (`ItemsSpec()`, `StoreSpec()`, ... and the
field defaults of `LabelsSpec`), so the file cannot drift from what `load_spec` assumes: loading it
gives the same `Spec` as a minimal spec holding only what init chose. A key the spec module grows
without a comment here is a `KeyError` (tests/convert/test_init.py writes every section).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import cast

from labzarr.readers import ColumnRef, WorkbookLimits

from ..spec import (
    NORMALIZERS,
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

__all__ = ["Key", "LabelsChoice", "render", "toml_value"]

_COLUMN = 40  # where a value's comment starts

_COMMENTS: Mapping[tuple[str, str], str] = {
    ("items", "id_pattern"): "searched in each file's path relative to raw; group `id` is the item ID",
    ("items", "id_normalize"): f"applied to file and workbook IDs alike; steps: {', '.join(NORMALIZERS)}",
    ("items", "include"): "globs on the path relative to raw; ** spans folders",
    ("items", "exclude"): "excluded files are listed as ignored",
    ("items", "roles"): 'samples of several files, e.g. { image = "*_img*", mask = "*_seg*" }',
    ("items", "required_roles"): "roles a sample must have (default: all of them)",
    ("labels", "workbook"): "relative to raw; must be a real .xlsx",
    ("labels", "sheet"): "a sheet name, or its 1-based tab index (hidden tabs count)",
    ("labels", "id_column"): "a column letter, or header text such as \"Case\"",
    ("labels", "columns"): "label name = column letter or header text; uncomment the labels to keep",
    ("labels", "header_row"): "\"auto\" or the header's 1-based row number",
    ("labels", "required"): "ok items with no workbook row (or a blank label) are rejected no_label",
    ("labels", "conflict"): "reject | warn: one ID, different values",
    ("labels", "max_unzipped_bytes"): "zip-bomb caps, checked before any XML is inflated",
    ("labels", "max_compression_ratio"): "inflated / compressed size of any member",
    ("labels", "annotations"): "lesion points, spheres or boxes, one a workbook row (docs/spec.md#annotations)",
    ("labels.annotations", "space"): "LPS (DICOM, ITK) | RAS (NIfTI) | voxel (the source's i, j, k)",
    ("labels.annotations", "diameter"): "a sphere's diameter (mm; voxels in voxel space); neither it nor size: a point",
    ("labels.annotations", "size"): "or a box's full extents along x, y, z; not both",
    ("store", "chunks"): "spatial chunk shape; one channel per chunk",
    ("store", "shards"): "chunks grouped into shard files (default: chunks x [8, 8, 4]); false: a file per chunk",
    ("store", "compressor"): "blosc-lz4 | blosc-zstd | zstd | none",
    ("store", "level"): "blosc 1..9, zstd 1..22",
    ("store", "checksum"): "crc32c over every compressed chunk",
    ("store", "statistics"): "intensity statistics per item, taken while writing (docs/outputs.md#statistics)",
    ("store", "pyramid"): "downsampled levels below full resolution, for viewers (OME-Zarr multiscales)",
    ("store", "storage_options"): "only for a URL store (s3://...), e.g. { endpoint_url = \"http://...\" }",
    ("validate", "max_bytes"): "decoded size cap per item -> too_large",
    ("validate", "max_voxels"): "element cap per item (all channels) -> too_large",
    ("validate", "max_pixels"): "H x W cap per 2D image, read from the header before decoding -> too_large",
    ("validate", "non_finite"): "reject | warn (NaN/Inf voxels)",
    ("dicom", "min_slices"): "fewer slice positions -> series_too_short (a localizer or scout)",
    ("dicom", "spacing_tolerance_mm"): "slice steps may differ by this + spacing_tolerance_rel (dicom2nifti)",
    ("dicom", "spacing_tolerance_rel"): "a fraction of the step, never more than half a step",
    ("dicom", "orientation_tolerance"): "direction cosines may drift this much (dicom2nifti)",
    ("dicom", "gantry_tilt"): "reject (dicom2nifti) | shear: keep tilted CT with an exact, sheared affine",
    ("dicom", "philips_scaling"): "float (precise, as dcm2niix) | display (public rescale, dcm2niix -p n)",
    ("dicom", "derived"): "separate: trace/ADC volumes become item <id>~trace (as dcm2niix's _ADC) | drop",
    ("dicom", "metadata"): "opt-in DICOM keywords besides the PHI-free allow-list, e.g. [\"BodyPartExamined\"]",
    ("dicom", "descriptors"): "drop: SeriesDescription, ProtocolName (free text, may hold names) stay out | keep",
    ("manifest", "metadata"): "metadata shown as columns meta.<name>, e.g. [\"Modality\", \"EchoTime\"]",
    ("masks", "classes"): "the classes a mask may hold; [] for any integer",
    ("masks", "policy"): "reject | warn: non-integer values or unexpected classes",
    ("masks", "tolerance"): "mm: spacing and affine entries of a role vs the image",
    ("masks", "locations"): "voxel locations kept per class per sample",
    ("masks", "fractional_threshold"): "a fractional DICOM-SEG voxel is in its segment from this fraction",
    ("masks", "rois"): "RTSTRUCT ROI names to classes (regexes, case aside)",
    ("splits", "train"): "shares of the groups (train + val + test = 1); docs/spec.md#splits",
    ("splits", "val"): "not with folds",
    ("splits", "test"): "with folds: held out before the folds are dealt",
    ("splits", "folds"): "instead of train/val: deal the groups into this many folds",
    ("splits", "group"): "never split: a named group of id_pattern or a [labels] column; \"\": the item ID",
    ("splits", "stratify"): "a [labels] column to balance across the splits",
    ("splits", "pinned"): "a [labels] workbook column (letter or header) pinning items by hand (train, val, "
                          "test, or a fold number); blank: not pinned",
    ("splits", "seed"): "keys the hash that orders new groups",
    ("splits", "leakage"): "reject | warn: a copy or group member that would sit in two splits",
    ("run", "item_timeout"): "seconds one item may take on a worker -> timeout",
    ("run", "crash_retries"): "further attempts after a worker dies on an item -> decoder_crash",
    ("run", "readers"): "extra readers \"module.path:Class\", tried before the built-in ones",
    ("run", "parts_bytes"): "a bigger streamed volume is written by several workers at once; 0: never",
    ("run", "window"): "tasks in flight at once, the next sent as one finishes; 0: 4 per worker thread",
    ("run", "in_process_files"): "at most this many files under raw: converted without a cluster; 0: never",
    ("run", "in_process_bytes"): "and at most this many bytes in all (converted without a cluster)",
}


@dataclass(frozen=True, slots=True)
class Key:
    """One `key = value` line; `active` False writes it commented out (a key whose default is not writable)."""

    name: str
    value: object
    active: bool = True


@dataclass(frozen=True, slots=True)
class LabelsChoice:
    """What init found for `[labels]`; `workbook` "" writes the section commented out."""

    workbook: str = ""  # relative to raw
    sheet: str = ""
    id_column: str = ""
    notes: tuple[str, ...] = ()  # comment lines above the section
    columns: tuple[tuple[str, str, str], ...] = ()  # (name, letter, comment): suggested labels, commented out


def toml_value(value: object) -> str:
    """`value` as TOML: strings literal where they can be ('...', no escapes), else basic."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if "'" not in value and value.isprintable():
            return f"'{value}'"
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")  # TOML escapes DEL, JSON does not
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, ColumnRef):
        return toml_value(value.letter) if value.letter else "{ header = " + toml_value(value.header) + " }"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"no TOML form for {value!r}")


def _line(section: str, key: Key) -> str:
    text = f"{'' if key.active else '# '}{key.name} = {toml_value(key.value)}"
    return f"{text:<{_COLUMN}}# {_COMMENTS[(section, key.name)]}" if len(text) < _COLUMN else (
        f"# {_COMMENTS[(section, key.name)]}\n{text}")


def _section(name: str, keys: Sequence[Key], *, header: str = "", active: bool = True,
             notes: Sequence[str] = ()) -> list[str]:
    """`[name]` and its keys; `notes` are comment lines under the header, what init measured."""
    head = f"{'' if active else '# '}[{name}]"
    out = [f"{head:<{_COLUMN}}# {header}" if header else head, *(f"# {n}" for n in notes)]
    return out + [_line(name, k if active else Key(k.name, k.value, active=False)) for k in keys]


def _defaults(instance: object, *, skip: Sequence[str] = ()) -> list[Key]:
    return [Key(f.name, _plain(getattr(instance, f.name))) for f in fields(cast("type", type(instance)))
            if f.name not in skip]


def _plain(value: object) -> object:
    """A default as the spec file spells it (None, "no such thing", is each key's own: see `render`)."""
    return list(value) if isinstance(value, tuple) else value


def render(*, name: str, raw: str, store: str, id_pattern: str, id_normalize: Sequence[str],
           labels: LabelsChoice, preamble: Sequence[str] = (), items_notes: Sequence[str] = ()) -> str:
    """The whole delivery.toml; `preamble` and `items_notes` are comment lines init measured."""
    items = ItemsSpec()
    store_spec = StoreSpec()
    masks = MasksSpec()
    lines = [*(f"# {p}" if p else "#" for p in preamble), "",
             "[delivery]", f"name = {toml_value(name)}",
             f"{'raw = ' + toml_value(raw):<{_COLUMN}}# relative paths start at the project root (the folder "
             "holding manifests/)",
             f"store = {toml_value(store)}", ""]
    item_keys = [Key("id_pattern", id_pattern), Key("id_normalize", list(id_normalize)),
                 *_defaults(items, skip=("id_pattern", "id_normalize", "roles", "required_roles")),
                 # No roles: every file is its own item. Roles are per delivery; a written default would not be one.
                 Key("roles", {"image": "*_img*", "mask": "*_seg*"}, active=False),
                 Key("required_roles", ["image", "mask"], active=False)]
    lines += [*_section("items", item_keys, notes=items_notes), ""]
    lines += [*_labels(labels), ""]
    store_keys = [Key(k.name, False if k.name == "shards" and k.value is None else k.value)
                  for k in _defaults(store_spec)]
    store_keys.append(Key("storage_options", {"endpoint_url": "http://127.0.0.1:9000"}, active=False))
    lines += [*_section("store", store_keys, header="the defaults `make bench` measured fastest for patch reads"), ""]
    lines += [*_section("validate", _defaults(ValidateSpec())), ""]
    lines += [*_section("dicom", _defaults(DicomSpec()), header="how strict DICOM series assembly is"), ""]
    lines += [*_section("manifest", _defaults(ManifestSpec()), header="what the manifest lists besides its columns"),
              ""]
    # rois: an example, as for roles (the default, none, leaves each ROI name its own class).
    mask_keys = [Key(k.name, [] if k.name == "classes" and k.value is None else k.value)
                 for k in _defaults(masks, skip=("rois",))]
    mask_keys.append(Key("rois", {"gtv": ["gtv.*", "gross.?tumou?r.*"]}, active=False))
    lines += [*_section("masks", mask_keys, active=False,
                        header="with a mask role in [items] roles, or DICOM SEG/RTSTRUCT masks"), ""]
    split_keys = [Key("train", 0.8), Key("val", 0.1), Key("test", 0.1),
                  *_defaults(SplitsSpec(), skip=("fractions", "group_from", "pinned_column"))]
    lines += [*_section("splits", split_keys, active=False, header="train/val/test or folds, per patient"), ""]
    lines += _section("run", _defaults(RunSpec()))
    return "\n".join(lines) + "\n"


def _labels(choice: LabelsChoice) -> list[str]:
    # LabelsSpec needs a workbook, so its defaults are read off its fields rather than an instance.
    defaults = {f.name: f.default for f in fields(LabelsSpec) if f.default is not MISSING}
    limits = WorkbookLimits()
    active = bool(choice.workbook)
    keys = [Key("workbook", choice.workbook or "labels/annotations.xlsx"),
            Key("sheet", choice.sheet or defaults["sheet"]),
            Key("id_column", choice.id_column or defaults["id_column"]),
            *(Key(n, defaults[n]) for n in ("header_row", "required", "conflict")),
            *(Key(f.name, getattr(limits, f.name)) for f in fields(WorkbookLimits) if f.name != "max_members")]
    out = _section("labels", keys, active=active, notes=choice.notes)
    # `columns` last, as its own table, so each suggested label is a line to uncomment.
    out.append(f"{'' if active else '# '}[labels.columns]".ljust(_COLUMN) + f"# {_COMMENTS[('labels', 'columns')]}")
    out += [f"# {n} = {toml_value(letter)}".ljust(_COLUMN) + f"# {why}" for n, letter, why in choice.columns]
    # Coordinates are never guessed (a space read wrongly moves every point), so the table is only shown.
    out += ["", "# [labels.annotations]".ljust(_COLUMN) + f"# {_COMMENTS[('labels', 'annotations')]}",
            '# center = ["coordX", "coordY", "coordZ"]',
            '# space = "LPS"'.ljust(_COLUMN) + f"# {_COMMENTS[('labels.annotations', 'space')]}",
            '# diameter = "diameter_mm"'.ljust(_COLUMN) + f"# {_COMMENTS[('labels.annotations', 'diameter')]}",
            '# size = ["w_mm", "h_mm", "d_mm"]'.ljust(_COLUMN) + f"# {_COMMENTS[('labels.annotations', 'size')]}"]
    return out
