"""The delivery spec (`manifests/<delivery>/delivery.toml`) parsed into frozen dataclasses.

Invariant: a `Spec` that exists is valid. Every unknown key, wrong type, out of
range value and missing path is refused here, with the file, the key, the
value and what is allowed, before any work starts.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from labzarr.readers import ColumnRef, Limits, SeriesRules, WorkbookLimits, load_reader
from labzarr.readers.dicom import ALLOWED, DESCRIPTORS, Descriptors, is_known_keyword
from labzarr.store import Location, as_location, is_url
from labzarr.store.chunks.compressors import COMPRESSORS, LEVELS, Compressor

from .errors import UsageError
from .spec_early import IN_PROCESS_BYTES, IN_PROCESS_FILES, project_root, resolve

__all__ = [
    "ANNOTATION_SPACES",
    "DELIVERY_NAME",
    "AnnotationSpace",
    "Compressor",
    "DeliverySpec",
    "AnnotationsSpec",
    "DicomSpec",
    "ItemsSpec",
    "LabelsSpec",
    "MASK_ROLE",
    "MasksSpec",
    "REFERENCE_ROLE",
    "NORMALIZERS",
    "RolePattern",
    "RunSpec",
    "SPLIT_NAMES",
    "Spec",
    "SplitsSpec",
    "StoreSpec",
    "ValidateSpec",
    "load_spec",
    "project_root",
]

NORMALIZERS: tuple[str, ...] = ("strip", "casefold", "drop_separators", "strip_leading_zeros")
_DEFAULT_ID_PATTERN = r"(?P<id>[A-Za-z]+[-_ ]?\d+)"
DELIVERY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # also a folder name under manifests/ and a store name


@dataclass(frozen=True, slots=True)
class DeliverySpec:
    name: str
    raw: Path
    store: Location  # a folder, or a URL store (`s3://bucket/x.zarr`) with `[store] storage_options`


@dataclass(frozen=True, slots=True)
class RolePattern:
    """Which files play a role in a sample: a glob (`regex` False) or a regular expression.

    A glob without `/` matches the file name (`"*_seg*"`), one with `/` the path relative
    to raw (`"labels/**"`); a regex is searched in the path relative to raw.
    """

    pattern: str
    regex: bool = False


# The role every sample is built around: its geometry is the reference, its file the row's `source`.
REFERENCE_ROLE = "image"
# The role that holds a label map: checked for integer classes, indexed by class, stored as small integers.
MASK_ROLE = "mask"


@dataclass(frozen=True, slots=True)
class ItemsSpec:
    id_pattern: str = _DEFAULT_ID_PATTERN
    id_normalize: tuple[str, ...] = ("strip", "casefold", "drop_separators")
    include: tuple[str, ...] = ("**/*",)
    exclude: tuple[str, ...] = ("**/.DS_Store", "**/Thumbs.db")
    # role name -> pattern, in spec order; empty: every file is its own item (no samples)
    roles: tuple[tuple[str, RolePattern], ...] = ()
    required_roles: tuple[str, ...] = ()  # a sample missing one of these is rejected missing_role


@dataclass(frozen=True, slots=True)
class MasksSpec:
    """How the `mask` role is checked and indexed (`[masks]`)."""

    classes: tuple[int, ...] | None = None  # the classes a mask may hold; None: any integer
    policy: Literal["reject", "warn"] = "reject"  # non-integer values or unexpected classes
    tolerance: float = 1e-3  # mm: spacing and affine entries of a role vs the image
    locations: int = 10_000  # voxel locations kept per class per sample
    # A fractional DICOM-SEG voxel is in its segment when value / MaximumFractionalValue is at least this.
    fractional_threshold: float = 0.5
    # RTSTRUCT ROI names -> classes: (class name, patterns), in spec order; class k (1-based) is the k-th entry,
    # and an ROI belongs to the first class one of whose patterns fully matches its name, case aside.
    rois: tuple[tuple[str, tuple[str, ...]], ...] = ()


AnnotationSpace = Literal["LPS", "RAS", "voxel"]
ANNOTATION_SPACES: tuple[AnnotationSpace, ...] = ("LPS", "RAS", "voxel")


@dataclass(frozen=True, slots=True)
class AnnotationsSpec:
    """`[labels] annotations`: workbook columns holding one annotation a row (convert/annotations.py).

    `center` is three columns (x, y, z); `diameter` (one column) or `size` (three, along x, y, z) makes it a
    sphere or a box, neither a point. World spaces are millimetres in LPS (DICOM, ITK) or RAS (NIfTI);
    `voxel` is voxel indices (i, j, k) of the source file as stored, extents in voxels.
    """

    center: tuple[ColumnRef, ColumnRef, ColumnRef]
    space: AnnotationSpace
    diameter: ColumnRef | None = None
    size: tuple[ColumnRef, ColumnRef, ColumnRef] | None = None

    def columns(self) -> dict[str, ColumnRef]:
        """Each column by its role ("center.x", ..., "diameter" or "size.x", ...), in that order."""
        out = {f"center.{a}": c for a, c in zip("xyz", self.center)}
        if self.diameter is not None:
            out["diameter"] = self.diameter
        if self.size is not None:
            out |= {f"size.{a}": c for a, c in zip("xyz", self.size)}
        return out


@dataclass(frozen=True, slots=True)
class LabelsSpec:
    """Where the labels are: `workbook` (under raw) > `sheet` > `header_row` > `id_column` and `columns`."""

    workbook: Path
    sheet: int | str = 1
    id_column: ColumnRef = ColumnRef(letter="A")
    columns: Mapping[str, ColumnRef] = field(default_factory=dict)  # output name -> column, in spec order
    header_row: int | Literal["auto"] = "auto"
    required: bool = True
    conflict: Literal["reject", "warn"] = "reject"  # one ID, two different values
    limits: WorkbookLimits = WorkbookLimits()
    annotations: AnnotationsSpec | None = None  # points, spheres or boxes, one a row


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """How volumes are stored; the defaults are what `make bench` measured fastest for random 64³ patch reads
    (docs/benchmarks.md, "Read path and store layout")."""

    chunks: tuple[int, int, int] = (32, 32, 32)
    shards: tuple[int, int, int] | None = (256, 256, 128)  # default: chunks x (8, 8, 4); None: a file per chunk
    compressor: Compressor = "blosc-lz4"
    level: int = 5
    checksum: bool = True
    # Per-item intensity statistics, taken from the slabs as they are written (convert/intensity.py).
    statistics: bool = True
    # Downsampled levels below each image's full resolution, for viewers (OME-Zarr multiscales; store/ngff.py).
    pyramid: int = 0


@dataclass(frozen=True, slots=True)
class ValidateSpec:
    max_bytes: int = Limits().max_bytes
    max_voxels: int = Limits().max_voxels
    max_pixels: int = Limits().max_pixels
    non_finite: Literal["reject", "warn"] = "reject"

    def limits(self) -> Limits:
        """The caps readers check before decoding."""
        return Limits(max_bytes=self.max_bytes, max_voxels=self.max_voxels, max_pixels=self.max_pixels)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """How items are run: a per-item time limit, retries after a worker dies, extra readers, big volumes in parts."""

    item_timeout: float = 600.0  # seconds from an item's start on a worker to `timeout`
    crash_retries: int = 1  # further attempts after a worker dies on an item, before `decoder_crash`
    readers: tuple[str, ...] = ()  # "module.path:Name" readers tried before the built-in ones
    # A streamed volume of more uncompressed bytes is written in parts of about this size, by
    # several workers at once (convert/plan/parts.py); 0: never. The stored bytes are the same either way.
    parts_bytes: int = 512 << 20
    # Tasks in flight at once (probe batches, then conversion jobs), the next submitted as one finishes
    # (convert/run/window.py); 0: four per worker thread, at least 32; never under twice the threads plus one.
    # Changes when work starts, never its result.
    window: int = 0
    # A delivery of at most this many files, of at most this many bytes in all, under raw is converted by the
    # `labzarr` command in processes forked from it rather than on a cluster it would first start
    # (convert/run/small_run.py); 0 files: always on a cluster. Changes where work runs, never its result.
    in_process_files: int = IN_PROCESS_FILES
    in_process_bytes: int = IN_PROCESS_BYTES


@dataclass(frozen=True, slots=True)
class DicomSpec:
    """How strict series assembly is. Defaults and where they come from:

    - min_slices 4: dicom2nifti's validate_slicecount refuses <= 3 slices as "TOO_FEW_SLICES/LOCALIZER".
    - spacing_tolerance_mm 0.1, spacing_tolerance_rel 0.05: dicom2nifti's validate_slice_increment
      (numpy.allclose(atol=0.1, rtol=0.05) between consecutive slice steps); capped at half a step.
    - orientation_tolerance 0.001: dicom2nifti's validate_orientation (allclose(atol=rtol=0.001) on the
      direction cosines); dcm2niix splits at 1e-4 but real scanners round IOP coarser than that.
    - gantry_tilt "reject": dicom2nifti's validate_orthogonal refuses tilted stacks (NON_CUBICAL_IMAGE/GANTRY_TILT)
      unless told to resample; "shear" keeps them with an exact, sheared affine (dcm2niix writes a resampled copy).
    - philips_scaling "float": dcm2niix's default (-p y), precise values through Philips' private scale slope.
    - derived "separate": dcm2niix removes trace/ADC volumes from a DWI's 4D and writes them apart (`_ADC`).
    - descriptors "drop": PS3.15's Basic Application Level Confidentiality Profile removes SeriesDescription and
      ProtocolName (free text an operator may type a patient's name into) unless its Clean Descriptors option
      applies, which only a person who has read them can vouch for; "keep" stores them (dcm2niix's sidecar does).
    """

    min_slices: int = SeriesRules().min_slices
    spacing_tolerance_mm: float = SeriesRules().spacing_tolerance_mm
    spacing_tolerance_rel: float = SeriesRules().spacing_tolerance_rel
    orientation_tolerance: float = SeriesRules().orientation_tolerance
    gantry_tilt: Literal["shear", "reject"] = SeriesRules().gantry_tilt
    philips_scaling: Literal["float", "display"] = SeriesRules().philips_scaling
    derived: Literal["separate", "drop"] = SeriesRules().derived
    # DICOM keywords read into an item's metadata besides the allow-list (readers/_dicom_meta.py): opt-in, as any
    # of them may hold what identifies a patient.
    metadata: tuple[str, ...] = ()
    descriptors: Descriptors = SeriesRules().descriptors

    def rules(self) -> SeriesRules:
        """The tolerances the DICOM series layout checks."""
        return SeriesRules(min_slices=self.min_slices, spacing_tolerance_mm=self.spacing_tolerance_mm,
                           spacing_tolerance_rel=self.spacing_tolerance_rel,
                           orientation_tolerance=self.orientation_tolerance, gantry_tilt=self.gantry_tilt,
                           philips_scaling=self.philips_scaling, derived=self.derived, metadata=self.metadata,
                           descriptors=self.descriptors)

    def kept(self) -> tuple[str, ...]:
        """Every acquisition-metadata name an item may carry under this section (allow-list, opt-ins), sorted."""
        return tuple(sorted((ALLOWED - (DESCRIPTORS if self.descriptors == "drop" else frozenset()))
                            | set(self.metadata)))


@dataclass(frozen=True, slots=True)
class ManifestSpec:
    """What the manifest shows besides its fixed columns: `metadata` names an item's acquisition metadata to list,
    each as a column `meta.<name>` (the store and the index hold all of it)."""

    metadata: tuple[str, ...] = ()


SPLIT_NAMES: tuple[str, ...] = ("train", "val", "test")  # `[splits]` fraction keys, in the order splits are listed


@dataclass(frozen=True, slots=True)
class SplitsSpec:
    """How items are assigned to train/val/test or to folds (`[splits]`, convert/plan/splits.py).

    `fractions` are the splits' shares of the groups, in `SPLIT_NAMES` order; with `folds`, the groups
    not held out as `test` are dealt into `folds` folds (their split is `train`). `group` is what is never
    split: `""` for the item ID, else a named group of `[items] id_pattern` (`group_from` "pattern") or a
    `[labels]` column (`group_from` "label").
    """

    fractions: tuple[tuple[str, float], ...] = ()
    folds: int = 0
    group: str = ""
    group_from: Literal["id", "pattern", "label"] = "id"
    stratify: str = ""  # a [labels] column; "" for none
    # A column of the [labels] workbook whose cells pin an item's split by hand, read on its own (not a label:
    # a blank cell is "not pinned"); `pinned` as the spec names it, "" for none.
    pinned: str = ""
    pinned_column: ColumnRef | None = None
    seed: int = 0
    leakage: Literal["reject", "warn"] = "reject"

    def settings(self) -> dict[str, object]:
        """What shapes the assignment, as JSON: a rerun under other settings assigns every group afresh."""
        return {"fractions": dict(self.fractions), "folds": self.folds, "group": self.group,
                "stratify": self.stratify, "seed": self.seed}


@dataclass(frozen=True, slots=True)
class Spec:
    """A validated delivery spec; `path` is the TOML file, `sha256` its bytes' hash, `root` the folder its
    relative paths start from (`project_root`)."""

    path: Path
    sha256: str
    root: Path
    delivery: DeliverySpec
    items: ItemsSpec
    store: StoreSpec
    validate: ValidateSpec
    labels: LabelsSpec | None = None
    dicom: DicomSpec = DicomSpec()
    masks: MasksSpec = MasksSpec()
    run: RunSpec = field(default_factory=RunSpec)
    splits: SplitsSpec | None = None
    manifest: ManifestSpec = ManifestSpec()

    @property
    def manifest_dir(self) -> Path:
        """Where manifest.csv and summary.json are written: beside the spec."""
        return self.path.parent


T = TypeVar("T")


class _Table:
    """One TOML table being consumed key by key, so leftovers are reported as unknown."""

    def __init__(self, where: str, section: str, data: Mapping[str, object]) -> None:
        self.where, self.section, self.data = where, section, dict(data)
        self.known: list[str] = []  # every key asked for, present or not: what a misspelt key is compared with

    def fail(self, key: str, value: object, allowed: str, hint: str) -> UsageError:
        return UsageError(f"{self.where}: [{self.section}] {key} = {value!r}: {allowed}", hint)

    def take(self, key: str, kind: type[T] | tuple[type, ...], default: T | None = None, *, what: str) -> T:
        self.known.append(key)
        if key not in self.data:
            if default is None:
                raise UsageError(
                    f"{self.where}: [{self.section}] {key} is missing", f"add `{key} = ...` ({what})"
                )
            return default
        value = self.data.pop(key)
        if isinstance(value, bool) and kind is not bool and not (isinstance(kind, tuple) and bool in kind):
            raise self.fail(key, value, f"expected {what}", f"write {key} as {what}")
        if not isinstance(value, kind):
            raise self.fail(key, value, f"expected {what}", f"write {key} as {what}")
        return cast(T, value)

    def check(self, key: str, value: T, ok: Callable[[T], bool], allowed: str, hint: str) -> T:
        if not ok(value):
            raise self.fail(key, value, allowed, hint)
        return value

    def renamed(self, old: str, new: str) -> None:
        """Refuse key `old` by its new name `new`: a spec written for an earlier labzarr says what to change."""
        if old in self.data:
            raise UsageError(f"{self.where}: [{self.section}] {old} was renamed {new}",
                             f"write `{new} = {self.data[old]!r}` instead (same meaning)")

    def done(self) -> None:
        if self.data:
            key = sorted(self.data)[0]
            raise UsageError(f"{self.where}: [{self.section}] unknown key {key!r}",
                             _did_you_mean(key, self.known, f"[{self.section}] keys"))


def _did_you_mean(name: str, known: Collection[str], what: str) -> str:
    """The hint for an unknown name: the closest known one, if any is close, then all of them."""
    close = difflib.get_close_matches(name, list(known), n=1)
    listing = f"{what}: {', '.join(sorted(set(known)))}"
    return (f"did you mean {close[0]!r}? " if close else "remove it or fix its spelling; ") + listing


def _str_list(t: _Table, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = t.take(key, list, list(default), what="a list of strings")
    if not all(isinstance(v, str) for v in value):
        raise t.fail(key, value, "expected a list of strings", f'write e.g. {key} = ["**/*"]')
    return tuple(value)


def load_spec(path: Path, *, root: Path | None = None) -> Spec:
    """Read and validate a delivery spec. Raises `UsageError`.

    Relative paths in it resolve from `root`, by default `project_root(path)`: a spec gives the same
    delivery from any working directory.
    """
    where = str(path)
    root = project_root(path) if root is None else Path(os.path.abspath(root))
    try:
        blob = path.read_bytes()
    except FileNotFoundError as exc:
        raise UsageError(f"{where}: spec file not found",
                         "pass the path of a delivery.toml, e.g. manifests/demo/delivery.toml") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{where}: is a folder, not a spec file", f"pass {path / 'delivery.toml'}") from exc
    try:
        doc = tomllib.loads(blob.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: not valid TOML: {exc}",
                         "fix the syntax; docs/spec.md has a complete example") from exc

    sections = {"delivery", "dicom", "items", "labels", "manifest", "masks", "run", "splits", "store", "validate"}
    for name, value in doc.items():
        if name not in sections:
            raise UsageError(f"{where}: unknown section [{name}]", _did_you_mean(name, sections, "allowed sections"))
        if not isinstance(value, dict):
            raise UsageError(f"{where}: {name} must be a [table]", f"write [{name}] followed by its keys")

    store_table = _Table(where, "store", doc.get("store", {}))
    delivery = _delivery(_Table(where, "delivery", doc.get("delivery", {})), root, store_table)
    labels = _labels(_Table(where, "labels", doc["labels"]), delivery.raw) if "labels" in doc else None
    items = _items(_Table(where, "items", doc.get("items", {})))
    if "masks" in doc and items.roles and MASK_ROLE not in dict(items.roles):
        # Without roles, [masks] still governs the masks DICOM SEG and RTSTRUCT objects give their series.
        raise UsageError(f"{where}: [masks] is set but [items] roles has no {MASK_ROLE!r} role",
                         'add e.g. roles = { image = "*_img*", mask = "*_seg*" } to [items], or drop [masks]')
    splits = _splits(_Table(where, "splits", doc["splits"]), items, labels) if "splits" in doc else None
    return Spec(
        path=path,
        sha256=hashlib.sha256(blob).hexdigest(),
        root=root,
        delivery=delivery,
        items=items,
        store=_store(store_table),
        validate=_validate(_Table(where, "validate", doc.get("validate", {}))),
        labels=labels,
        dicom=(dicom := _dicom(_Table(where, "dicom", doc.get("dicom", {})))),
        manifest=_manifest(_Table(where, "manifest", doc.get("manifest", {})), dicom),
        masks=_masks(_Table(where, "masks", doc.get("masks", {}))),
        run=_run(_Table(where, "run", doc.get("run", {}))),
        splits=splits,
    )


def _delivery(t: _Table, root: Path, store_table: _Table) -> DeliverySpec:
    name = t.take("name", str, what="a delivery name, e.g. \"lab-2026-11\"")
    t.check("name", name, lambda v: bool(DELIVERY_NAME.fullmatch(v)),
            "use letters, digits, '.', '_' and '-'", "rename it, e.g. name = \"lab-2026-11\"")
    raw = resolve(root, t.take("raw", str, what="a folder path, e.g. \"data/raw/lab-2026-11\""))
    if not raw.is_dir():
        raise t.fail("raw", str(raw), "folder not found" if not raw.exists() else "not a folder",
                     f"copy the delivery there or fix the path (relative paths start at {root}, "
                     "the folder holding manifests/ or else the spec's own)")
    given = t.take("store", str, what="a store path ending in .zarr, or a URL such as s3://bucket/x.zarr")
    options = store_table.take("storage_options", dict, {}, what='a table of fsspec options, e.g. '
                               '{ endpoint_url = "http://127.0.0.1:9000" }')
    store = _store_location(given, options, root)
    t.check("store", str(store), lambda v: v.endswith(".zarr"), "the store path must end in .zarr",
            f"e.g. store = \"data/stores/{name}.zarr\" or \"s3://bucket/{name}.zarr\"")
    if store.remote:
        _check_protocol(t, store)
    elif options:
        raise store_table.fail("storage_options", options, "only a URL store takes storage options",
                               "drop the key, or set [delivery] store to a URL such as s3://bucket/x.zarr")
    else:
        _check_apart(t, raw, store.local_path(), name)
    t.done()
    return DeliverySpec(name=name, raw=raw, store=store)


def _check_apart(t: _Table, raw: Path, store: Path, name: str) -> None:
    """The store and raw do not nest: a store under raw would be walked as part of the delivery (its own
    files rows of its own manifest, changing on every run), and raw under the store would be written over."""
    real_raw, real_store = raw.resolve(), store.resolve()  # symlinks and `..` followed: where the bytes are
    if real_store == real_raw or real_raw in real_store.parents:
        raise t.fail("store", str(store), f"lies inside [delivery] raw = {str(raw)!r} (as {real_store}); a store "
                     "there would be read as files of the delivery",
                     f"put the store outside the raw folder, e.g. store = \"data/stores/{name}.zarr\"")
    if real_store in real_raw.parents:
        raise t.fail("store", str(store), f"holds [delivery] raw = {str(raw)!r} (as {real_raw}) inside it; "
                     "converting would write into the delivery's own folder",
                     f"put the store and the raw folder side by side, e.g. store = \"data/stores/{name}.zarr\" "
                     f"and raw = \"data/raw/{name}\"")


def _store_location(given: str, options: Mapping[str, Any], root: Path) -> Location:
    """The store `given` names (a relative path taken from `root`)."""
    return as_location(given if is_url(given) else resolve(root, given), options)


def _check_protocol(t: _Table, store: Location) -> None:
    """The URL's protocol has an fsspec implementation installed (no I/O: the bucket is checked by the run)."""
    try:
        store.check_protocol()
    except ValueError as exc:
        raise t.fail("store", str(store), f"unknown protocol {store.protocol}:// ({exc})",
                     "use a path, or a URL fsspec knows, e.g. s3://bucket/x.zarr") from exc
    except ImportError as exc:
        raise t.fail("store", str(store), f"{store.protocol}:// needs a package that is not installed ({exc})",
                     "pip install 'labzarr[s3]' (s3fs) for s3://, or the package fsspec names") from exc


def _items(t: _Table) -> ItemsSpec:
    pattern = t.take("id_pattern", str, _DEFAULT_ID_PATTERN, what="a regular expression with a group named id")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise t.fail("id_pattern", pattern, f"not a valid regular expression ({exc})", "fix the expression") from exc
    t.check("id_pattern", compiled, lambda c: "id" in c.groupindex, "the expression needs a group (?P<id>...)",
            "wrap the ID part in (?P<id>...)")
    normalize = _str_list(t, "id_normalize", ItemsSpec().id_normalize)
    for step in normalize:
        t.check("id_normalize", step, lambda s: s in NORMALIZERS, f"allowed steps: {', '.join(NORMALIZERS)}",
                "drop or fix the unknown step")
    roles = _roles(t)
    required = _str_list(t, "required_roles", tuple(name for name, _ in roles))
    if required and not roles:
        raise t.fail("required_roles", list(required), "needs [items] roles", 'add roles = { image = "*_img*", ... }')
    for name in required:
        if name not in dict(roles):
            raise t.fail("required_roles", list(required),
                         f"{name!r} is not a role (roles: {', '.join(n for n, _ in roles)})",
                         "name roles from [items] roles")
    if roles and REFERENCE_ROLE not in required:
        raise t.fail("required_roles", list(required), f"must include {REFERENCE_ROLE!r}: a sample is built around it",
                     f'e.g. required_roles = ["{REFERENCE_ROLE}", "mask"]')
    spec = ItemsSpec(
        id_pattern=pattern,
        id_normalize=normalize,
        include=_str_list(t, "include", ItemsSpec().include),
        exclude=_str_list(t, "exclude", ItemsSpec().exclude),
        roles=roles,
        required_roles=required,
    )
    t.done()
    return spec


def _roles(t: _Table) -> tuple[tuple[str, RolePattern], ...]:
    """`roles = { image = "*_img*", mask = { regex = "_seg\\." } }`: a glob, or a table naming a regex."""
    given = t.take("roles", dict, {}, what='a table of role = glob, e.g. { image = "*_img*", mask = "*_seg*" }')
    example = 'roles = { image = "*_img*", mask = "*_seg*" } or mask = { regex = "_seg\\.nii" }'
    out: list[tuple[str, RolePattern]] = []
    for name, value in given.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise t.fail("roles", given, f"role name {name!r} is not an identifier", f"write e.g. {example}")
        if isinstance(value, str) and value:
            out.append((name, RolePattern(value)))
        elif isinstance(value, dict) and set(value) == {"regex"} and isinstance(value["regex"], str):
            try:
                re.compile(value["regex"])
            except re.error as exc:
                raise t.fail(f"roles.{name}", value, f"not a valid regular expression ({exc})", "fix it") from exc
            out.append((name, RolePattern(value["regex"], regex=True)))
        else:
            raise t.fail(f"roles.{name}", value, "expected a glob or { regex = \"...\" }", f"write e.g. {example}")
    if out and REFERENCE_ROLE not in given:
        raise t.fail("roles", given,
                     f"roles need an {REFERENCE_ROLE!r} role (the geometry every other role must match)",
                     f"write e.g. {example}")
    return tuple(out)


def _masks(t: _Table) -> MasksSpec:
    d = MasksSpec()
    classes = t.take("classes", list, [], what="a list of integer class values, e.g. [0, 1, 2]")
    t.check("classes", classes, lambda c: all(isinstance(v, int) and not isinstance(v, bool) for v in c)
            and len(set(classes)) == len(classes), "expected distinct integers", "e.g. classes = [0, 1, 2]")
    policy = t.take("policy", str, d.policy, what='"reject" or "warn"')
    t.check("policy", policy, lambda v: v in ("reject", "warn"), 'allowed: "reject" | "warn"',
            'use "reject" (default: non-integer values or unexpected classes reject the sample) or "warn"')
    tolerance = t.take("tolerance", (float, int), d.tolerance, what="a distance in mm, e.g. 0.001")
    t.check("tolerance", tolerance, lambda v: v >= 0, "must be >= 0", "e.g. tolerance = 0.001")
    locations = t.take("locations", int, d.locations, what="a count of voxel locations per class")
    t.check("locations", locations, lambda v: v >= 1, "must be >= 1", "e.g. locations = 10000")
    threshold = t.take("fractional_threshold", (float, int), d.fractional_threshold, what="a fraction, e.g. 0.5")
    t.check("fractional_threshold", threshold, lambda v: 0 < v <= 1, "must be in (0, 1]",
            "e.g. fractional_threshold = 0.5 (a voxel is in a fractional SEG's segment from half its maximum)")
    rois = _rois(t)
    t.done()
    return MasksSpec(classes=tuple(sorted(classes)) if classes else None,
                     policy=cast(Literal["reject", "warn"], policy), tolerance=float(tolerance), locations=locations,
                     fractional_threshold=float(threshold), rois=rois)


def _rois(t: _Table) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`rois = { gtv = "gtv.*", lung = ["lung.*", "pulmo.*"] }`: RTSTRUCT ROI name patterns per class."""
    example = 'rois = { gtv = "gtv.*", lung = ["lung.*", "pulmo.*"] }'
    given = t.take("rois", dict, {}, what=f"a table of class = regex or [regexes], e.g. {example}")
    out = []
    for name, value in given.items():
        patterns = [value] if isinstance(value, str) else value
        if not (isinstance(patterns, list) and patterns and all(isinstance(p, str) for p in patterns)):
            raise t.fail(f"rois.{name}", value, "expected a regex or a list of regexes", f"write e.g. {example}")
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise t.fail(f"rois.{name}", value, f"{p!r} is not a valid regular expression ({exc})",
                             "fix it") from exc
        out.append((str(name), tuple(patterns)))
    return tuple(out)


def _store(t: _Table) -> StoreSpec:
    chunks = t.take("chunks", list, list(StoreSpec().chunks), what="three positive integers, e.g. [64, 64, 64]")
    t.check("chunks", chunks,
            lambda c: len(c) == 3 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in c),
            "expected three positive integers", "e.g. chunks = [64, 64, 64]")
    compressor = t.take("compressor", str, StoreSpec().compressor, what="a compressor name")
    t.check("compressor", compressor, lambda c: c in COMPRESSORS, f"allowed: {' | '.join(COMPRESSORS)}",
            f"pick one of those or drop the key (default {StoreSpec().compressor})")
    lo, hi = LEVELS[compressor]
    default_level = 0 if compressor == "none" else min(StoreSpec().level, hi)
    level = t.take("level", int, default_level, what="an integer")
    t.check("level", level, lambda v: lo <= v <= hi, f"{compressor} levels are {lo}..{hi}",
            f"pick one in range or drop the key (default {default_level})")
    checksum = t.take("checksum", bool, StoreSpec().checksum, what="true or false")
    statistics = t.take("statistics", bool, StoreSpec().statistics, what="true or false")
    pyramid = t.take("pyramid", int, StoreSpec().pyramid, what="an integer, the number of downsampled levels")
    t.check("pyramid", pyramid, lambda n: 0 <= n <= _MAX_PYRAMID, f"0..{_MAX_PYRAMID} levels below full resolution",
            "e.g. pyramid = 3 (1/2, 1/4 and 1/8 of every axis), or drop the key for none (default 0)")
    shards = _shards(t, chunks)
    t.done()
    return StoreSpec(chunks=(chunks[0], chunks[1], chunks[2]), shards=shards, compressor=cast(Compressor, compressor),
                     level=level, checksum=checksum, statistics=statistics, pyramid=pyramid)


# Each level halves every axis: 8 levels take a 65536-voxel axis to 256, past which a viewer needs no coarser one.
_MAX_PYRAMID = 8


_CHUNKS_PER_SHARD = (8, 8, 4)  # the default shard: 256 chunks, 16 MiB of int16 at 32³ chunks


def _shards(t: _Table, chunks: list[int]) -> tuple[int, int, int] | None:
    default = [c * m for c, m in zip(chunks, _CHUNKS_PER_SHARD)]
    value: object = t.take("shards", (list, bool), default, what="three positive integers, or false")
    if value is False:
        return None
    t.check("shards", value, lambda s: isinstance(s, list) and len(s) == 3 and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in s),
        "expected three positive integers, or false for no sharding", "e.g. shards = [256, 256, 128]")
    shards = cast(list[int], value)
    t.check("shards", shards, lambda s: all(v % c == 0 for v, c in zip(s, chunks)),
            f"each shard extent must be a multiple of the chunk extent (chunks = {chunks})",
            f"e.g. shards = {default} (the default for these chunks), or false")
    return (shards[0], shards[1], shards[2])


def _validate(t: _Table) -> ValidateSpec:
    max_bytes = t.take("max_bytes", int, ValidateSpec().max_bytes, what="a byte count")
    t.check("max_bytes", max_bytes, lambda v: v > 0, "must be > 0", "e.g. max_bytes = 4294967296 (4 GiB)")
    max_voxels = t.take("max_voxels", int, ValidateSpec().max_voxels, what="a voxel count")
    t.check("max_voxels", max_voxels, lambda v: v > 0, "must be > 0", "e.g. max_voxels = 2147483648")
    max_pixels = t.take("max_pixels", int, ValidateSpec().max_pixels, what="a pixel count")
    t.check("max_pixels", max_pixels, lambda v: v > 0, "must be > 0", "e.g. max_pixels = 178956970")
    non_finite = t.take("non_finite", str, ValidateSpec().non_finite, what='"reject" or "warn"')
    t.check("non_finite", non_finite, lambda v: v in ("reject", "warn"), 'allowed: "reject" | "warn"',
            'use "reject" (default) or "warn"')
    t.done()
    return ValidateSpec(max_bytes=max_bytes, max_voxels=max_voxels, max_pixels=max_pixels,
                        non_finite=cast(Literal["reject", "warn"], non_finite))


def _run(t: _Table) -> RunSpec:
    timeout = t.take("item_timeout", (int, float), RunSpec().item_timeout, what="a number of seconds")
    t.check("item_timeout", timeout, lambda v: v > 0, "must be > 0 seconds", "e.g. item_timeout = 600")
    retries = t.take("crash_retries", int, RunSpec().crash_retries, what="a whole number")
    t.check("crash_retries", retries, lambda v: 0 <= v <= 10, "allowed: 0..10", "e.g. crash_retries = 1")
    readers = _str_list(t, "readers", RunSpec().readers)
    for ref in readers:
        try:
            load_reader(ref)
        except (ImportError, ValueError) as exc:
            raise t.fail("readers", list(readers), f"cannot load {ref!r}: {exc}",
                         "name readers as 'module.path:ClassName', importable here and on every worker") from exc
    t.renamed("split_bytes", "parts_bytes")
    parts = t.take("parts_bytes", int, RunSpec().parts_bytes, what="a byte count")
    t.check("parts_bytes", parts, lambda v: v >= 0, "must be >= 0 (0: every volume in one part)",
            "e.g. parts_bytes = 536870912 (512 MiB)")
    window = t.take("window", int, RunSpec().window, what="a whole number")
    t.check("window", window, lambda v: v >= 0, "must be >= 0 (0: four tasks per worker thread, at least 32)",
            "e.g. window = 64, or drop the key")
    files = t.take("in_process_files", int, RunSpec().in_process_files, what="a whole number")
    t.check("in_process_files", files, lambda v: v >= 0, "must be >= 0 (0: always on a cluster)",
            "e.g. in_process_files = 5000, or 0 to always start a cluster")
    size = t.take("in_process_bytes", int, RunSpec().in_process_bytes, what="a byte count")
    t.check("in_process_bytes", size, lambda v: v >= 0, "must be >= 0",
            "e.g. in_process_bytes = 268435456 (256 MiB)")
    t.done()
    return RunSpec(item_timeout=float(timeout), crash_retries=retries, readers=readers, parts_bytes=parts,
                   window=window, in_process_files=files, in_process_bytes=size)


def _column(t: _Table, key: str, value: object) -> ColumnRef:
    """A column letter or header text; a table `{ header = "ID" }` / `{ letter = "F" }` says which explicitly."""
    example = f'{key} = "F", {key} = "Cell type" or {key} = {{ header = "ID" }}'
    if isinstance(value, str) and value.strip():
        return ColumnRef.parse(value)
    if isinstance(value, dict) and len(value) == 1:
        (kind, text), = value.items()
        if kind == "header" and isinstance(text, str) and text.strip():
            return ColumnRef(header=text)
        if kind == "letter" and isinstance(text, str) and ColumnRef.parse(text).letter:
            return ColumnRef(letter=text)
    raise t.fail(key, value, "expected a column letter (A..XFD) or a header text", f"write e.g. {example}")


def _dicom(t: _Table) -> DicomSpec:
    d = DicomSpec()
    min_slices = t.take("min_slices", int, d.min_slices, what="an integer >= 1")
    t.check("min_slices", min_slices, lambda v: v >= 1, "must be >= 1",
            f"e.g. min_slices = {d.min_slices} (dicom2nifti refuses 3 or fewer as localizers)")
    mm = float(t.take("spacing_tolerance_mm", (int, float), d.spacing_tolerance_mm, what="millimetres, e.g. 0.1"))
    t.check("spacing_tolerance_mm", mm, lambda v: 0 <= v <= 10, "must be 0..10 mm",
            f"e.g. spacing_tolerance_mm = {d.spacing_tolerance_mm}")
    rel = float(t.take("spacing_tolerance_rel", (int, float), d.spacing_tolerance_rel, what="a fraction, e.g. 0.05"))
    t.check("spacing_tolerance_rel", rel, lambda v: 0 <= v < 0.5, "must be 0 <= value < 0.5 (a fraction of the step)",
            f"e.g. spacing_tolerance_rel = {d.spacing_tolerance_rel}")
    orient = float(t.take("orientation_tolerance", (int, float), d.orientation_tolerance,
                          what="a direction-cosine difference, e.g. 0.001"))
    t.check("orientation_tolerance", orient, lambda v: 0 < v < 0.05,
            "must be > 0 and < 0.05 (larger differences are different planes, split into parts)",
            f"e.g. orientation_tolerance = {d.orientation_tolerance}")
    tilt = t.take("gantry_tilt", str, d.gantry_tilt, what='"shear" or "reject"')
    t.check("gantry_tilt", tilt, lambda v: v in ("shear", "reject"), 'allowed: "shear" | "reject"',
            'use "reject" (default, as dicom2nifti) or "shear" (exact sheared affine)')
    philips = t.take("philips_scaling", str, d.philips_scaling, what='"float" or "display"')
    t.check("philips_scaling", philips, lambda v: v in ("float", "display"), 'allowed: "float" | "display"',
            'use "float" (default: precise values, as dcm2niix) or "display" (the public rescale, as dcm2niix -p n)')
    derived = t.take("derived", str, d.derived, what='"separate" or "drop"')
    t.check("derived", derived, lambda v: v in ("separate", "drop"), 'allowed: "separate" | "drop"',
            'use "separate" (default: trace/ADC volumes become their own item, <id>~trace) or "drop"')
    descriptors = t.take("descriptors", str, d.descriptors, what='"keep" or "drop"')
    t.check("descriptors", descriptors, lambda v: v in ("keep", "drop"), 'allowed: "keep" | "drop"',
            'use "drop" (default: SeriesDescription and ProtocolName stay in the raw files, as PS3.15\'s '
            'confidentiality profile) or "keep" once you know they hold no names')
    extra = t.take("metadata", list, [], what='a list of DICOM keywords, e.g. ["BodyPartExamined"]')
    unknown = [n for n in extra if not (isinstance(n, str) and is_known_keyword(n))]
    t.check("metadata", extra, lambda _: not unknown, f"{unknown[0]!r} is not a DICOM keyword" if unknown else "",
            'name tags by their DICOM keyword, e.g. metadata = ["BodyPartExamined"] (pydicom\'s dictionary)')
    named = sorted(DESCRIPTORS.intersection(extra)) if descriptors == "drop" else []
    t.check("metadata", extra, lambda _: not named,
            f"{named[0]!r} is a descriptor, and descriptors = \"drop\"" if named else "",
            'set descriptors = "keep" in [dicom] to store SeriesDescription and ProtocolName')
    t.done()
    return DicomSpec(min_slices=min_slices, spacing_tolerance_mm=mm, spacing_tolerance_rel=rel,
                     orientation_tolerance=orient, gantry_tilt=cast(Literal["shear", "reject"], tilt),
                     philips_scaling=cast(Literal["float", "display"], philips),
                     derived=cast(Literal["separate", "drop"], derived),
                     metadata=tuple(str(n) for n in extra if str(n) not in ALLOWED),
                     descriptors=cast(Descriptors, descriptors))


_SCALING_KEYS = ("PhilipsRescaleIntercept", "PhilipsRescaleSlope", "PhilipsScaleSlope",
                 "UsePhilipsFloatNotDisplayScaling")


def _manifest(t: _Table, dicom: DicomSpec) -> ManifestSpec:
    names = t.take("metadata", list, [], what='a list of metadata names, e.g. ["Modality", "EchoTime"]')
    known = sorted({*dicom.kept(), *_SCALING_KEYS})
    unknown = [n for n in names if not (isinstance(n, str) and n in known)]
    dropped = " ([dicom] descriptors = \"drop\" leaves it out)" if unknown and unknown[0] in DESCRIPTORS else ""
    t.check("metadata", names, lambda _: not unknown,
            f"{unknown[0]!r} is not an item metadata name{dropped}" if unknown else "",
            f"use names from {', '.join(known)}; other DICOM tags need [dicom] metadata = [...] first"
            + ('; descriptors need [dicom] descriptors = "keep"' if dropped else ""))
    t.done()
    return ManifestSpec(metadata=tuple(dict.fromkeys(str(n) for n in names)))


def _labels(t: _Table, raw: Path) -> LabelsSpec:
    given = t.take("workbook", str, what="a workbook path relative to raw")
    workbook = Path(os.path.normpath(resolve(raw, given)))
    if not workbook.is_file():
        raise t.fail("workbook", str(workbook), "file not found", "fix the path; it is relative to [delivery] raw")
    if raw.resolve() not in workbook.resolve().parents:
        raise t.fail("workbook", str(workbook), f"resolves to {workbook.resolve()}, outside raw {raw}",
                     "copy the workbook into the delivery folder; `..` and symlinks may not leave raw")
    sheet = t.take("sheet", (int, str), 1, what="a 1-based sheet index or a sheet name")
    if isinstance(sheet, int):
        t.check("sheet", sheet, lambda v: v >= 1, "sheet indexes start at 1", "use 1 for the first tab")
    id_column = _column(t, "id_column", t.take("id_column", (str, dict), "A", what="a column letter or header text"))
    given_columns = t.take("columns", dict, {}, what="a table of output name = column letter or header text")
    columns: dict[str, ColumnRef] = {}
    for name, col in given_columns.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise t.fail("columns", given_columns, f"label name {name!r} is not an identifier",
                         'use letters, digits and _, e.g. columns = { cell_type = "F" }')
        columns[name] = _column(t, f"columns.{name}", col)
    header_row = t.take("header_row", (int, str), "auto", what='"auto" or a 1-based row number')
    t.check("header_row", header_row, lambda v: v == "auto" or (isinstance(v, int) and v >= 1),
            'expected "auto" or a row number >= 1', 'use "auto" or e.g. header_row = 3')
    required = t.take("required", bool, True, what="true or false")
    conflict = t.take("conflict", str, "reject", what='"reject" or "warn"')
    t.check("conflict", conflict, lambda v: v in ("reject", "warn"), 'allowed: "reject" | "warn"',
            'use "reject" (default: the item is rejected label_conflict) or "warn" (kept, label empty)')
    defaults = WorkbookLimits()
    max_unzipped = t.take("max_unzipped_bytes", int, defaults.max_unzipped_bytes, what="a byte count")
    t.check("max_unzipped_bytes", max_unzipped, lambda v: v > 0, "must be > 0", "e.g. max_unzipped_bytes = 268435456")
    max_ratio = t.take("max_compression_ratio", int, defaults.max_compression_ratio, what="an integer ratio")
    t.check("max_compression_ratio", max_ratio, lambda v: v >= 1, "must be >= 1", "e.g. max_compression_ratio = 200")
    given_annotations = t.take("annotations", dict, {},
                               what='a table, e.g. { center = ["X", "Y", "Z"], space = "LPS" }')
    annotations = _annotations(_Table(t.where, "labels.annotations", given_annotations)) if given_annotations else None
    t.done()
    return LabelsSpec(workbook=workbook, sheet=sheet, id_column=id_column, columns=columns, annotations=annotations,
                      header_row=cast("int | Literal['auto']", header_row), required=required,
                      conflict=cast(Literal["reject", "warn"], conflict),
                      limits=WorkbookLimits(max_unzipped_bytes=max_unzipped, max_compression_ratio=max_ratio,
                                            max_members=defaults.max_members))


def _annotations(t: _Table) -> AnnotationsSpec:
    """`[labels] annotations`: `center` (3 columns), `space`, and at most one of `diameter` and `size`."""
    example = 'center = ["coordX", "coordY", "coordZ"]'
    center = _three(t, "center", t.take("center", list, what=f"three columns (x, y, z), e.g. {example}"))
    space = t.take("space", str, what='"LPS" (DICOM, ITK), "RAS" (NIfTI) or "voxel"')
    t.check("space", space, lambda v: v in ANNOTATION_SPACES, 'allowed: "LPS" | "RAS" | "voxel"',
            'world millimetres as DICOM and ITK (LUNA16) write them are "LPS"; as nibabel writes them "RAS"; '
            'voxel indices of the source file "voxel"')
    diameter_given = t.take("diameter", (str, dict), "", what="a column letter or header text")
    diameter = _column(t, "diameter", diameter_given) if diameter_given else None
    size_given = t.take("size", list, [], what='three columns (x, y, z), e.g. size = ["w", "h", "d"]')
    size = _three(t, "size", size_given) if size_given else None
    if diameter is not None and size is not None:
        raise t.fail("size", size_given, "a diameter and a size both given",
                     "give diameter (a sphere) or size (a box), not both")
    t.done()
    return AnnotationsSpec(center=center, space=cast(AnnotationSpace, space), diameter=diameter, size=size)


def _three(t: _Table, key: str, value: list[object]) -> tuple[ColumnRef, ColumnRef, ColumnRef]:
    if len(value) != 3:
        raise t.fail(key, value, f"expected three columns (x, y, z), got {len(value)}",
                     f'write e.g. {key} = ["X", "Y", "Z"]')
    a, b, c = (_column(t, f"{key}[{i}]", v) for i, v in enumerate(value))
    return a, b, c


def _splits(t: _Table, items: ItemsSpec, labels: LabelsSpec | None) -> SplitsSpec:
    """`[splits]`: fractions (`train`, `val`, `test`) summing to 1, or `folds` (with an optional `test`)."""
    given: dict[str, float] = {}
    for name in SPLIT_NAMES:
        if name in t.data:
            value = float(t.take(name, (int, float), what="a fraction, e.g. 0.8"))
            t.check(name, value, lambda v: 0 < v <= 1, "must be > 0 and <= 1", f"e.g. {name} = 0.1, or drop the key")
            given[name] = value
        else:
            t.known.append(name)
    folds = t.take("folds", int, 0, what="a number of folds >= 2, e.g. 5")
    if folds:
        t.check("folds", folds, lambda v: v >= 2, "must be >= 2", "e.g. folds = 5, or drop it for train/val/test")
        extra = sorted(set(given) - {"test"})
        if extra:
            raise t.fail(extra[0], given[extra[0]], "with folds, every fold is in turn the validation set",
                         "drop train and val; keep test = ... to hold a test set out of the folds")
        if given.get("test", 0) >= 1:
            raise t.fail("test", given["test"], "with folds, must be < 1", "e.g. test = 0.2")
    elif not given:
        raise UsageError(f"{t.where}: [splits] has neither fractions nor folds",
                         "add e.g. train = 0.8, val = 0.1, test = 0.1, or folds = 5")
    elif abs(sum(given.values()) - 1) > 1e-9:
        raise t.fail(" + ".join(given), round(sum(given.values()), 9), "the fractions must sum to 1",
                     "e.g. train = 0.8, val = 0.1, test = 0.1")
    columns = tuple(labels.columns) if labels is not None else ()
    where_columns = f"[labels] columns: {', '.join(columns)}" if columns else "no [labels] columns"
    group = t.take("group", str, "", what="a named group of [items] id_pattern or a [labels] column")
    pattern_groups = [g for g in re.compile(items.id_pattern).groupindex if g != "id"]
    group_from: Literal["id", "pattern", "label"] = "id"
    if group in ("", "id"):
        group = ""
    elif group in pattern_groups:
        group_from = "pattern"
    elif group in columns:
        group_from = "label"
    else:
        groups = f"its groups: {', '.join(pattern_groups)}" if pattern_groups else "it has no group besides id"
        raise t.fail("group", group, f"neither a named group of [items] id_pattern ({groups}) nor a column "
                     f"({where_columns})",
                     "name a group of id_pattern, e.g. '(?P<patient>P\\d+)_(?P<id>.+)', or a [labels] column")
    stratify = t.take("stratify", str, "", what="a [labels] column")
    if stratify and stratify not in columns:
        raise t.fail("stratify", stratify, f"not a [labels] column ({where_columns})",
                     "add the column to [labels] columns, or name one of those")
    pinned, pinned_column = _pinned(t, labels)
    seed = t.take("seed", int, 0, what="an integer >= 0")
    t.check("seed", seed, lambda v: v >= 0, "must be >= 0", "e.g. seed = 0")
    leakage = t.take("leakage", str, "reject", what='"reject" or "warn"')
    t.check("leakage", leakage, lambda v: v in ("reject", "warn"), 'allowed: "reject" | "warn"',
            'use "reject" (default: a leaking copy is rejected split_leakage) or "warn"')
    t.done()
    return SplitsSpec(fractions=tuple(given.items()), folds=folds, group=group, group_from=group_from,
                      stratify=stratify, pinned=pinned, pinned_column=pinned_column, seed=seed,
                      leakage=cast(Literal["reject", "warn"], leakage))


def _pinned(t: _Table, labels: LabelsSpec | None) -> tuple[str, ColumnRef | None]:
    """`[splits] pinned`: a column of the [labels] workbook, by letter or header text, or by the name of a
    `[labels] columns` entry (its column; the pins are still read apart from the label)."""
    given = t.take("pinned", (str, dict), "", what="a column of the [labels] workbook holding train/val/test")
    if given == "":
        return "", None
    if labels is None:
        raise t.fail("pinned", given, "needs a [labels] workbook to read the pins from",
                     'add [labels] with workbook = "..." and id_column, or drop pinned')
    if isinstance(given, str) and given in labels.columns:
        return given, labels.columns[given]
    column = _column(t, "pinned", given)
    return (given if isinstance(given, str) else column.letter or column.header), column
