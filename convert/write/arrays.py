"""Writing the zarr v3 store: one array per ok volume, codecs from the spec, `complete` last.

Invariant: an array at its final path is whole. It is written in a private
staging folder (`.labzarr/staging/`), every chunk file is written (also
all-fill ones, so a missing file is always damage) and checked present,
`content_sha256` and `complete` are set, the whole folder is fsynced, and only
then is it renamed into place (`install`). A run killed at any point leaves at most
a staged folder or a zarr `*.partial` file, which the next run sweeps. A volume
is staged by its task (`writer.py`); a stack of 2D images (see `stacks`) is
staged by the driver, filled by the shard tasks (each writes whole slot ranges
of the shards it owns) and by shards carried over from the installed stack,
then installed by the driver. The root's `labzarr` attr is the store's own
index of ok items, written once the run's rows are final, so a Dataset needs
nothing but the store's path.

A store at a URL (an object store) has no rename: it commits by the protocol
in this package's docstring (`convert/write/__init__.py`). Every write goes through the store's location
(`labzarr.store.Folder` or `UrlStore`), whose methods do each step the way
their kind of store can.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.codec import BytesBytesCodec

from labzarr.store import COMPLETE, INDEX, INDEX_KEY, ClassInfo, IndexItem, ItemStats, Location, StoreIndex
from labzarr.store.chunks.codecs import zarr_codecs
from labzarr.store.content import missing_chunk_files
from labzarr.store.format import nodes
from labzarr.store.format.stats_table import write_records
from labzarr.store.format.table import remove_tables
from labzarr.store.format.written import STORED, StoredFiles

from ..manifest import Row
from ..plan.build import VOLUMES, item_unit
from ..plan.stacks import STACKS, Stack
from ..spec import StoreSpec
from .lock import lock_owner
from .state import STATE, staging_dir, trash_dir

__all__ = ["STACK_AXES", "Staged", "StoreWriteError", "Superseded", "array_nodes", "begin_array",
           "carry_shard", "codecs", "compact_metadata", "create_stack", "discard", "fill_missing_shards",
           "index_entries", "index_items", "install", "item_statistics", "open_root", "publish", "remove_array",
           "remove_stale", "sealed_record", "set_array_labels", "staging_folder", "worker_metadata", "write_index",
           "write_slots", "write_statistics"]

log = logging.getLogger(__name__)

STACK_AXES = ("n", "c", "y", "x")


@contextmanager
def compact_metadata() -> Iterator[None]:
    """Have zarr write its metadata documents (`zarr.json`) unindented while the block runs.

    zarr indents them by default, and an indented `json.dumps` runs Python's pure-Python encoder: an item's
    attributes hold every channel's histogram, so on a 100-volume DWI each write of its `zarr.json` took
    several times longer, and 3.7x the bytes (bench/dicom.py; docs/benchmarks.md). Readers do not care.
    zarr's config is process-wide: the setting is restored on leaving, and only changes whitespace meanwhile.
    """
    with zarr.config.set({"json_indent": None}):
        yield


@contextmanager
def worker_metadata() -> Iterator[None]:
    """Have zarr write its metadata documents as in a worker process while the block runs: with zarr's own default
    layout, where a task has not set `compact_metadata` for itself (a worker never runs inside the driver's). A
    job run in the driver's process (`convert/run/in_process.py`) then writes the same bytes as on a worker."""
    (indent,) = [d["json_indent"] for d in zarr.config.defaults if "json_indent" in d]
    with zarr.config.set({"json_indent": indent}):
        yield


def codecs(spec: StoreSpec) -> tuple[BytesBytesCodec, ...]:
    """The bytes-to-bytes codecs for `spec`: the compressor, then crc32c over the compressed bytes."""
    return zarr_codecs(spec.compressor, level=spec.level, checksum=spec.checksum)


def open_root(store: Location, *, mode: str = "a") -> zarr.Group:
    """Open (or create) the store's root group."""
    return zarr.open_group(store.zarr(), mode=mode, zarr_format=3)  # type: ignore[arg-type]


class StoreWriteError(Exception):
    """The store could not be written (disk full, read-only, I/O error): the run stops, the item is not to blame."""

    def __init__(self, store: str, detail: str) -> None:
        super().__init__(f"{store}: {detail}")
        self.store, self.detail = store, detail

    def __reduce__(self) -> tuple[type[StoreWriteError], tuple[str, str]]:
        return (StoreWriteError, (self.store, self.detail))  # crosses process boundaries (dask workers)


class Superseded(Exception):
    """Another run took over the store while this task ran (its own run died); the work is dropped."""


def staging_folder(store: Location, name: str) -> Location:
    """A fresh private folder (key prefix) to write array `name` in before it is installed."""
    return staging_dir(store) / f"{name.replace('/', '~')}.{uuid.uuid4().hex}"


def begin_array(store: Location, name: str) -> Location:
    """Where a volume array `name` is written: a staging folder, or where nothing renames (a URL store) its final
    path, emptied first."""
    if store.writes_in_place:
        dest = store / name
        dest.remove_tree()  # an older version's keys would otherwise survive where the new one has none
        return dest
    folder = staging_folder(store, name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder


def discard(folder: Location) -> None:
    """Remove an array that was begun but not installed."""
    try:
        folder.remove_tree()
    except OSError as exc:  # what is left has no `complete` and is replaced later
        log.warning("%s: could not remove the unfinished array: %s", folder, exc)


@dataclass(frozen=True, slots=True)
class Staged:
    """A sealed staging folder (`complete` recorded) that `publish` makes durable and moves to `name`."""

    store: Location
    name: str
    folder: Location
    run_id: str


def install(store: Location, name: str, folder: Location, array: zarr.Array[Any], *, complete: str,
            run_id: str, at: str = "", attrs: Mapping[str, Any] | None = None,
            defer: list[Staged] | None = None, never_written: Collection[str] = ()) -> None:
    """Seal the staged `array` (chunk files checked, `attrs` and `complete` recorded, all of it fsynced) and move
    it to `name`; with `defer`, the sealed folder is appended there instead, for one `publish` of many.

    With `at`, `folder` is a whole staged group (a volume's image group) and `array` lies at `at` inside it.
    Raises `Superseded` when `run_id` no longer holds the store (a task of a dead run): the folder is not moved
    and is left for the next sweep. A volume of a URL store is sealed where it was written, `complete` written
    last, after its chunks (never deferred); a staged stack there is copied into place with its `zarr.json` last
    (`labzarr.store.location.url`).
    """
    node = folder / at if at else folder
    record = sealed_record(node, array, allowed=never_written)
    sealed = {**(attrs or {}), STORED: record.encode(), COMPLETE: complete}
    if store.writes_in_place:  # readers may look here already: `complete` only once the voxels are durable
        folder.fsync_tree()
        _check_holder(store, name, run_id)
        nodes.update_attributes(node, array, sealed)
        folder.fsync_tree(files=(f"{at}/{nodes.ZARR_JSON}" if at else nodes.ZARR_JSON,))
        folder.move_into_place(store / name, trash_dir(store))  # type: ignore[arg-type]  # both of the store's kind
        return
    # Nothing reads a staging folder before the rename publishes it, so `complete` is written with the rest
    # and one fsync makes the whole folder durable before the rename: one journal commit, not two.
    nodes.update_attributes(node, array, sealed)
    staged = Staged(store, name, folder, run_id)
    if defer is not None:
        defer.append(staged)
    else:
        publish([staged])


def sealed_record(folder: Location, array: zarr.Array[Any], *, allowed: Collection[str] = ()) -> StoredFiles:
    """The record of which storage files `array` (written at `folder`, every chunk stored) holds, for its
    `STORED` attr; raises RuntimeError when one is missing but for `allowed` (all-fill shards zarr did not store:
    the record says they were never written, and they read as fill value)."""
    record = StoredFiles.of_array(array, folder.sizes())
    missing = record.missing(array, allowed=allowed)
    if missing:
        raise RuntimeError(f"{folder}: {len(missing)} chunk file(s) missing after writing, first {missing[0]}")
    return record


def publish(staged: Sequence[Staged]) -> None:
    """Make sealed staging folders durable and move each to its name: every file of all of them fsynced in one
    pass (concurrent fsyncs share the filesystem's commits: many small items cost a few, not one each), each
    renamed once the store's holder is checked, then each destination folder synced once. Raises `Superseded`
    as `install` does: the folders not yet moved stay staged, for the next sweep."""
    if not staged:
        return
    staged[0].folder.fsync_tree(also=[s.folder for s in staged[1:]])  # type: ignore[misc]  # one kind
    for s in staged:
        _check_holder(s.store, s.name, s.run_id)
        s.folder.move_into_place(s.store / s.name, trash_dir(s.store), sync=False)  # type: ignore[arg-type]
    parents = {str(p): p for p in ((s.store / s.name).parent for s in staged)}
    for parent in parents.values():
        parent.fsync_tree(files=())


def _check_holder(store: Location, name: str, run_id: str) -> None:
    if run_id and lock_owner(store) != run_id:
        raise Superseded(f"{name}: the store is now held by another run")


def create_stack(folder: Location, stack: Stack, *, spec: StoreSpec) -> zarr.Array[Any]:
    """Create the empty stack array in `folder` (a staging folder); done once, by the driver, before any task."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return zarr.create_array(
        folder.zarr(),
        shape=stack.shape,
        dtype=stack.plane.dtype,
        chunks=stack.chunks,
        shards=stack.shards,
        compressors=codecs(spec),
        fill_value=np.zeros((), dtype=stack.plane.dtype).item(),
        dimension_names=STACK_AXES,
        attributes={"kind": "stack", "axes": list(STACK_AXES), "per_shard": stack.per_shard},
        config={"write_empty_chunks": True},  # every slot is stored, even an all-zero one
    )


def open_stack(folder: Location) -> zarr.Array[Any]:
    """The (staged) stack array at `folder`, for writing whole slot ranges."""
    arr = zarr.open_array(folder.zarr(), mode="r+", zarr_format=3,
                          config={"write_empty_chunks": True})
    assert isinstance(arr, zarr.Array)
    return arr


def write_slots(folder: Location, first: int, images: np.ndarray) -> None:
    """Write `images` (n, C, H, W) into slots first..first+n-1 in one call: a whole shard is written, not patched.

    Every chunk is stored, even an all-zero one, so an ok image is never a missing chunk.
    """
    open_stack(folder)[first : first + len(images)] = images


def carry_shard(old: Location, new: Location, array: zarr.Array[Any], shard: int) -> None:
    """Link shard `shard` of the installed stack at `old` into the staged stack at `new` (same layout): no copy.

    Installed arrays are never written again (a new version is staged and swapped in), so the two names
    may share one file. An object store has no links: the shard is copied server-side.
    """
    key = array.metadata.encode_chunk_key((shard, *(0 for _ in array.shape[1:])))
    (old / key).share_as(new / key)  # type: ignore[arg-type]  # both of the store's kind


def fill_missing_shards(folder: Location, array: zarr.Array[Any]) -> list[str]:
    """Write zeros where no task wrote a shard (all its images failed); returns the keys still absent.

    Slot by slot, since zarr skips a whole-shard write of fill values. A shard of one slot is then still
    absent (zarr never stores an all-fill shard in one write): the caller passes those keys to `install` as
    never written, so the stack's record of stored files says so and they read as zeros.
    """
    per_shard = (array.shards or array.chunks)[0]
    for key in missing_chunk_files(folder.keys(), array):
        shard = int(key.split("/")[1])
        for slot in range(shard * per_shard, min(array.shape[0], (shard + 1) * per_shard)):
            array[slot : slot + 1] = np.zeros((1, *array.shape[1:]), dtype=array.dtype)
    return missing_chunk_files(folder.keys(), array)


def array_nodes(store: Location) -> list[tuple[str, dict[str, Any]]]:
    """(array path, metadata) of every array in the hierarchy, by path; never descends into chunk folders, nor
    into the bookkeeping folder."""
    return store.array_nodes(skip=STATE)


def remove_array(store: Location, path: str) -> None:
    """Delete one item's array and its chunks: a volume's whole image group (levels, labels), a sample group, a
    stack; renamed out of the hierarchy first, so it vanishes at once.

    On a URL store its `zarr.json` is deleted first, which takes it out of the hierarchy as well.
    """
    (store / item_unit(path)).remove_tree(trash=trash_dir(store))  # type: ignore[arg-type]  # both of the store's kind


def set_array_labels(store: Location, items: Sequence[tuple[str, Mapping[str, str]]]) -> int:
    """Set each array's `labels` attr (array path, labels) where it differs; returns how many changed.

    Labels are joined once the run's rows are final, so they are written after `complete`; a
    rerun with an edited workbook updates them here even for arrays it did not convert again.
    """
    changed = 0
    for path, labels in items:
        arr = zarr.open_array(store.zarr(), path=path, mode="r+", zarr_format=3)
        if arr.attrs.get("labels") != dict(labels):
            arr.attrs["labels"] = dict(labels)
            changed += 1
    return changed


def index_items(rows: Sequence[Row]) -> tuple[IndexItem, ...]:
    """The ok rows, in manifest order, as the store index's items (a sample with its roles, classes, locations)."""
    return tuple(index_entries(rows))


def index_entries(rows: Iterable[Row]) -> Iterator[IndexItem]:
    """`index_items`, one item at a time (for `IndexColumns`: the items are never all held)."""
    return (
        IndexItem(item_id=r.item_id, array=r.array, slot=r.slot, kind=r.kind, source=r.source, shape=tuple(r.shape),
                  dtype=r.dtype, spacing=tuple(r.spacing), labels=dict(r.labels),
                  roles={x.role: x.array for x in r.roles},
                  classes=({c.value: ClassInfo(voxels=c.voxels, start=c.start, stop=c.stop) for c in r.classes}
                           if r.roles else {}),
                  locations=f"{r.group}/locations" if r.roles and r.classes else None,
                  split=r.split, fold=r.fold, group=r.split_group,
                  metadata=dict(r.metadata), orientation=r.orientation,
                  stats=None if r.stats is None else r.stats.moments(), annotations=r.annotations)
        for r in rows if r.status == "ok"
    )


def item_statistics(items: Sequence[IndexItem], rows: Sequence[Row]) -> dict[str, ItemStats]:
    """Every ok item's statistics by `IndexItem.key`, `items` being `index_items(rows)` (one per ok row, in order)."""
    ok = [r for r in rows if r.status == "ok"]
    return {i.key: r.stats for i, r in zip(items, ok, strict=True) if r.stats is not None}


def write_statistics(store: Location, records: Mapping[str, ItemStats] | Iterable[tuple[str, ItemStats]]) -> None:
    """Record `records` (`item_statistics`: histograms too; or (key, record) pairs, in the order given) as the
    table of the root group `STATISTICS`: what `labzarr inspect --stats`, the report and `PatchDataset.stats`
    merge, in any selection."""
    write_records(store, records)


def write_index(store: Location, index: StoreIndex) -> None:
    """Record `index` as the store's own index: written once the run's rows are final, as a new table under
    `INDEX`, then named by the root attr `INDEX_KEY` (the root's other attributes kept), then the earlier tables
    removed. `index.items` may be any sequence (an `IndexItems` too)."""
    value = index.write(store)
    try:
        root = nodes.read_node_at(store)
    except FileNotFoundError:
        root = {}
    attrs = root.get("attributes", {})
    nodes.create_group(store, {**attrs, INDEX_KEY: value}, atomic=True)
    remove_tables(store / INDEX, keep=value["table"].rsplit("/", 1)[1])


def remove_stale(store: Location, keep: set[str]) -> None:
    """Remove every volume, sample group and stack not in `keep` (array or group paths, any path below an item
    keeping its whole group): what no row names."""
    units = {item_unit(path) for path in keep}
    # One listing of each folder, not zarr's members (which opens every node): a kept name is never read, and
    # only the others' nodes say what they are.
    kinds: dict[str, set[str | None]] = {VOLUMES: {"array", "group"}, STACKS: {"array"}}
    for group, removable in kinds.items():
        folder = store / group
        names = sorted(child.name for child in folder.iterdir()) if folder.is_dir() else []
        for name in names:
            path = f"{group}/{name}"
            if path not in units and nodes.node_type(store / path) in removable:
                remove_array(store, path)
