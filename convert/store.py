"""Writing the zarr v3 store: one array per ok volume, codecs from the spec, `complete` last.

Invariant: an array at its final path is whole. It is written in a private
staging folder (`.labzarr/staging/`), every chunk file is written (also
all-fill ones, so a missing file is always damage), checked present and
fsynced, `content_sha256` and then `complete` are set, and only then is the
folder renamed into place (`install`). A run killed at any point leaves at most
a staged folder or a zarr `*.partial` file, which the next run sweeps. A volume
is staged by its task (`writer.py`); a stack of 2D images (see `stacks`) is
staged by the driver, filled by the shard tasks (each writes whole slot ranges
of the shards it owns) and by shards carried over from the installed stack,
then installed by the driver. The root's `labzarr` attr is the store's own
index of ok items, written once the run's rows are final, so a Dataset needs
nothing but the store's path.

A store at a URL (an object store) has no rename: it commits by the protocol
in `objstore.py`, and each function here that renames, links or fsyncs says
what it does there instead.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import zarr
import zarr.codecs
from zarr.abc.codec import BytesBytesCodec

from labzarr.readers import MemorySource, Volume

from .chunks import chunk_grid, plan_chunks, plan_shards
from .lock import lock_owner
from .manifest import Row
from .objstore import StoreRef, UrlStore, copy_object, copy_tree, remove_tree, zarr_store
from .spec import StoreSpec
from .stacks import Stack
from .state import STATE, staging_dir, trash_dir

__all__ = ["FORMAT_VERSION", "INDEX_KEY", "STACK_AXES", "StoreWriteError", "Superseded", "array_nodes", "array_paths",
           "begin_array", "carry_shard", "codecs", "create_stack", "discard", "fill_missing_shards", "group_paths",
           "install", "missing_chunk_files", "open_root", "remove_array", "set_array_labels", "staging_folder",
           "write_index", "write_slots", "write_volume"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
INDEX_KEY = "labzarr"
STACK_AXES = ("n", "c", "y", "x")


def codecs(spec: StoreSpec) -> tuple[BytesBytesCodec, ...]:
    """The bytes-to-bytes codecs for `spec`: the compressor, then crc32c over the compressed bytes."""
    out: list[BytesBytesCodec] = []
    if spec.compressor == "zstd":
        out.append(zarr.codecs.ZstdCodec(level=spec.level))
    elif spec.compressor in ("blosc-zstd", "blosc-lz4"):
        out.append(zarr.codecs.BloscCodec(cname=zarr.codecs.BloscCname(spec.compressor.removeprefix("blosc-")), clevel=spec.level,
                                          shuffle=zarr.codecs.BloscShuffle.shuffle))
    if spec.checksum:
        out.append(zarr.codecs.Crc32cCodec())
    return tuple(out)


def open_root(store: StoreRef, *, mode: str = "a") -> zarr.Group:
    """Open (or create) the store's root group."""
    return zarr.open_group(zarr_store(store), mode=mode, zarr_format=3)  # type: ignore[arg-type]


class StoreWriteError(Exception):
    """The store could not be written (disk full, read-only, I/O error): the run stops, the item is not to blame."""

    def __init__(self, store: str, detail: str) -> None:
        super().__init__(f"{store}: {detail}")
        self.store, self.detail = store, detail

    def __reduce__(self) -> tuple[type[StoreWriteError], tuple[str, str]]:
        return (StoreWriteError, (self.store, self.detail))  # crosses process boundaries (dask workers)


class Superseded(Exception):
    """Another run took over the store while this task ran (its own run died); the work is dropped."""


def staging_folder(store: StoreRef, name: str) -> StoreRef:
    """A fresh private folder (key prefix) to write array `name` in before it is installed."""
    return staging_dir(store) / f"{name.replace('/', '~')}.{uuid.uuid4().hex}"


def begin_array(store: StoreRef, name: str) -> StoreRef:
    """Where a volume array `name` is written: a staging folder, or on a URL store its final path, emptied."""
    if isinstance(store, UrlStore):
        dest = store / name
        remove_tree(dest)  # an older version's keys would otherwise survive where the new one has none
        return dest
    folder = staging_folder(store, name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder


def discard(folder: StoreRef) -> None:
    """Remove an array that was begun but not installed."""
    if isinstance(folder, UrlStore):
        try:
            remove_tree(folder)
        except OSError as exc:  # as rmtree(ignore_errors=True): what is left has no `complete` and is replaced later
            log.warning("%s: could not remove the unfinished array: %s", folder, exc)
    else:
        shutil.rmtree(folder, ignore_errors=True)


def install(store: StoreRef, name: str, folder: StoreRef, array: zarr.Array[Any], *, complete: str, run_id: str) -> None:
    """Seal the staged `array` (chunk files checked, fsynced, `complete` set last) and move it to `name`.

    Raises `Superseded` when `run_id` no longer holds the store (a task of a dead run), and the folder
    is left for the next sweep. On a URL store, see `objstore.py`: a volume is sealed where it was written,
    a staged stack is copied into place with its `zarr.json` last.
    """
    if isinstance(store, UrlStore):
        assert isinstance(folder, UrlStore)
        _install_url(store, name, folder, array, complete=complete, run_id=run_id)
        return
    assert isinstance(folder, Path)
    missing = missing_chunk_files(folder, array)
    if missing:
        raise RuntimeError(f"{name}: {len(missing)} chunk file(s) missing after writing, first {missing[0]}")
    _fsync_tree(folder)
    array.update_attributes({"complete": complete})  # last: the array is whole
    _fsync_tree(folder, files=("zarr.json",))
    if run_id and lock_owner(store) != run_id:
        raise Superseded(f"{name}: the store is now held by another run")
    _move_into_place(folder, store / name, trash_dir(store))


def _install_url(store: UrlStore, name: str, folder: UrlStore, array: zarr.Array[Any], *, complete: str,
                 run_id: str) -> None:
    missing = missing_chunk_files(folder, array)
    if missing:
        raise RuntimeError(f"{name}: {len(missing)} chunk object(s) missing after writing, first {missing[0]}")
    if run_id and lock_owner(store) != run_id:
        raise Superseded(f"{name}: the store is now held by another run")
    dest = store / name
    if folder.url == dest.url:  # written in place
        array.update_attributes({"complete": complete})  # last: the array is whole
        return
    remove_tree(dest)
    copy_tree(folder, dest, skip=frozenset({"zarr.json"}))
    missing = missing_chunk_files(dest, array)
    if missing:
        raise RuntimeError(f"{name}: {len(missing)} chunk object(s) missing after copying, first {missing[0]}")
    array.update_attributes({"complete": complete})
    copy_object(folder / "zarr.json", dest / "zarr.json")  # last: the array appears whole
    remove_tree(folder)


def write_volume(store: StoreRef, name: str, volume: Volume, *, spec: StoreSpec, attrs: Mapping[str, Any],
                 complete: str, run_id: str = "") -> None:
    """Write an in-memory `volume` as array `name`, replacing any earlier one, whole or not at all."""
    from .writer import VolumeWriter  # writer.py builds on this module

    source = MemorySource(volume)
    chunks = plan_chunks(volume.data.shape, spec.chunks, voxel_bytes=volume.data.dtype.itemsize, stream_axis=None)
    shards = plan_shards(volume.data.shape, chunks, spec.shards, voxel_bytes=volume.data.dtype.itemsize,
                         stream_axis=None)
    writer = VolumeWriter(store, name, source.header, chunks=chunks, shards=shards, codecs=codecs(spec), attrs=attrs,
                          run_id=run_id)
    try:
        for slab in source.slabs(chunks):
            writer.write(slab)
        writer.finish(complete=complete)
    finally:
        writer.close()


def create_stack(folder: StoreRef, stack: Stack, *, spec: StoreSpec) -> zarr.Array[Any]:
    """Create the empty stack array in `folder` (a staging folder); done once, by the driver, before any task."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return zarr.create_array(
        zarr_store(folder),
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


def open_stack(folder: StoreRef) -> zarr.Array[Any]:
    """The (staged) stack array at `folder`, for writing whole slot ranges."""
    arr = zarr.open_array(zarr_store(folder), mode="r+", zarr_format=3,
                          config={"write_empty_chunks": True})
    assert isinstance(arr, zarr.Array)
    return arr


def write_slots(folder: StoreRef, first: int, images: np.ndarray) -> None:
    """Write `images` (n, C, H, W) into slots first..first+n-1 in one call: a whole shard is written, not patched.

    Every chunk is stored, even an all-zero one, so an ok image is never a missing chunk.
    """
    open_stack(folder)[first : first + len(images)] = images


def carry_shard(old: StoreRef, new: StoreRef, array: zarr.Array[Any], shard: int) -> None:
    """Link shard `shard` of the installed stack at `old` into the staged stack at `new` (same layout): no copy.

    Installed arrays are never written again (a new version is staged and swapped in), so the two names
    may share one file. An object store has no links: the shard is copied server-side.
    """
    key = array.metadata.encode_chunk_key((shard, *(0 for _ in array.shape[1:])))
    if isinstance(old, UrlStore) and isinstance(new, UrlStore):
        copy_object(old / key, new / key)
        return
    assert isinstance(old, Path) and isinstance(new, Path)
    (new / key).parent.mkdir(parents=True, exist_ok=True)
    os.link(old / key, new / key)


def fill_missing_shards(folder: StoreRef, array: zarr.Array[Any]) -> list[str]:
    """Write zeros where no task wrote a shard (all its images failed); returns the keys still absent.

    Slot by slot, since zarr skips a whole-shard write of fill values. A shard of one slot is then still
    absent (zarr never stores an all-fill shard in one write): the caller records those keys in the
    stack's `empty_shards` attr, so `verify` knows they are absent on purpose.
    """
    per_shard = (array.shards or array.chunks)[0]
    for key in missing_chunk_files(folder, array):
        shard = int(key.split("/")[1])
        for slot in range(shard * per_shard, min(array.shape[0], (shard + 1) * per_shard)):
            array[slot : slot + 1] = np.zeros((1, *array.shape[1:]), dtype=array.dtype)
    return missing_chunk_files(folder, array)


def missing_chunk_files(folder: StoreRef, array: zarr.Array[Any]) -> list[str]:
    """Storage keys (chunk or shard files) of `array`, stored at `folder`, that do not exist.

    Keys the array's `empty_shards` attr lists (all-zero shards zarr will not store) do not count.
    A URL store is listed once rather than asked key by key.
    """
    storage = array.shards or array.chunks
    allowed = set(cast(list[str], array.attrs.get("empty_shards", [])))
    listed = folder.keys() if isinstance(folder, UrlStore) else None
    return [key for key in (array.metadata.encode_chunk_key(coords)
                            for coords in itertools.product(*(range(n) for n in chunk_grid(array.shape, storage))))
            if key not in allowed and not (key in listed if listed is not None else (folder / key).is_file())]


def _fsync_tree(folder: Path, files: Sequence[str] | None = None) -> None:
    """fsync files (all under `folder`, or just `files`) and their folders: zarr never fsyncs."""
    paths = [folder / f for f in files] if files is not None else [p for p in folder.rglob("*") if p.is_file()]
    dirs = {folder} | {p.parent for p in paths}
    for path in [*paths, *sorted(dirs, key=lambda d: len(d.parts), reverse=True)]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _move_into_place(src: Path, dest: Path, trash: Path) -> None:
    """Rename `src` to `dest`, first moving any existing `dest` aside (a rename onto a full folder fails)."""
    trash.mkdir(parents=True, exist_ok=True)
    for _ in range(10):  # a retried task of this run may be installing the same array at the same moment
        aside = trash / f"{dest.name}.{uuid.uuid4().hex}"
        try:
            dest.rename(aside)
        except FileNotFoundError:
            pass
        else:
            shutil.rmtree(aside, ignore_errors=True)
        try:
            src.rename(dest)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                continue
            raise
        _fsync_tree(dest.parent, files=())
        return
    raise RuntimeError(f"{dest}: could not move the staged array into place (another writer keeps replacing it)")


def array_paths(store: StoreRef, group: str) -> list[str]:
    """Paths (`group/name`) of the arrays under `group`, sorted; empty when there is none."""
    root = open_root(store)
    if group not in root:
        return []
    sub = root[group]
    assert isinstance(sub, zarr.Group)
    return sorted(f"{group}/{name}" for name, _ in sub.arrays())


def group_paths(store: StoreRef, group: str) -> list[str]:
    """Paths (`group/name`) of the groups under `group` (samples), sorted; empty when there is none."""
    root = open_root(store)
    if group not in root:
        return []
    sub = root[group]
    assert isinstance(sub, zarr.Group)
    return sorted(f"{group}/{name}" for name, _ in sub.groups())


def array_nodes(store: StoreRef) -> list[tuple[str, dict[str, Any]]]:
    """(array path, metadata) of every array in the hierarchy; never descends into chunk folders."""
    if isinstance(store, UrlStore):
        return _url_array_nodes(store)
    return [(p.parent.relative_to(store).as_posix(), meta) for p, meta in _array_files(store)]


def _url_array_nodes(store: UrlStore) -> list[tuple[str, dict[str, Any]]]:
    """As `array_nodes`, by listing one prefix per group (never the chunk keys below an array)."""
    fs = store.fs()
    out: list[tuple[str, dict[str, Any]]] = []
    todo = [""]
    while todo:
        rel = todo.pop()
        here = store / rel
        try:
            entries = fs.ls(here.path, detail=True)
        except FileNotFoundError:
            continue
        names = {e["name"].rsplit("/", 1)[-1]: e["type"] for e in entries}
        if "zarr.json" not in names:
            continue
        try:
            meta = json.loads((here / "zarr.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("node_type") == "array":
            out.append((rel, meta))
            continue
        todo += [f"{rel}/{n}".lstrip("/") for n, kind in names.items()
                 if kind == "directory" and not (rel == "" and n == STATE)]
    return sorted(out, key=lambda node: node[0])


def _array_files(store: Path) -> list[tuple[Path, dict[str, Any]]]:
    out: list[tuple[Path, dict[str, Any]]] = []
    for here, dirs, files in os.walk(store):
        dirs[:] = sorted(d for d in dirs if d != STATE or Path(here) != store)
        if "zarr.json" not in files:
            if Path(here) != store:
                dirs.clear()  # not a zarr node: nothing of the hierarchy below
            continue
        try:
            meta = json.loads((Path(here) / "zarr.json").read_bytes())
        except (OSError, ValueError):
            dirs.clear()
            continue
        if isinstance(meta, dict) and meta.get("node_type") == "array":
            dirs.clear()
            out.append((Path(here) / "zarr.json", meta))
    return out


def remove_array(store: StoreRef, path: str) -> None:
    """Delete one array and its chunks: renamed out of the hierarchy first, so it vanishes at once.

    On a URL store its `zarr.json` is deleted first, which takes it out of the hierarchy as well.
    """
    if isinstance(store, UrlStore):
        remove_tree(store / path)
        return
    target = store / path
    if not target.exists():
        return
    aside = trash_dir(store) / f"{target.name}.{uuid.uuid4().hex}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    target.rename(aside)
    shutil.rmtree(aside)


def set_array_labels(store: str | StoreRef, items: Sequence[tuple[str, Mapping[str, str]]]) -> int:
    """Set each array's `labels` attr (array path, labels) where it differs; returns how many changed.

    Labels are joined once the run's rows are final, so they are written after `complete`; a
    rerun with an edited workbook updates them here even for arrays it did not convert again.
    """
    changed = 0
    for path, labels in items:
        arr = zarr.open_array(zarr_store(Path(store) if isinstance(store, str) else store), path=path, mode="r+",
                              zarr_format=3)
        if arr.attrs.get("labels") != dict(labels):
            arr.attrs["labels"] = dict(labels)
            changed += 1
    return changed


def _sample_entry(r: Row) -> dict[str, Any]:
    """A sample's role arrays, mask classes (voxels, rows of `locations`) and its locations array."""
    if not r.roles:
        return {}
    entry: dict[str, Any] = {"roles": {x.role: x.array for x in r.roles}}
    if r.classes:
        entry["classes"] = {str(c.value): {"voxels": c.voxels, "locations": [c.start, c.stop]} for c in r.classes}
        entry["locations"] = f"{r.group}/locations"
    return entry


def write_index(store: StoreRef, *, rows: Sequence[Row], root_attrs: Mapping[str, Any]) -> None:
    """Record the ok rows, in manifest order, as the store's own index (root attr `labzarr`)."""
    items = [
        {
            "item_id": r.item_id, "array": r.array, "slot": r.slot, "kind": r.kind, "source": r.source,
            "shape": list(r.shape), "dtype": r.dtype, "spacing": list(r.spacing), "labels": dict(r.labels),
            **_sample_entry(r),
        }
        for r in rows if r.status == "ok"
    ]
    root = open_root(store)
    root.attrs[INDEX_KEY] = {**root_attrs, "format_version": FORMAT_VERSION, "items": items}
