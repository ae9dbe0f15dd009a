"""An item's NGFF image group: staged whole (level 0, the pyramid, the `ome` attributes), then installed in one move.

Invariant: a volume's unit of staging, sealing and installing is its image group `volumes/<item>/`, not its
level-0 array: the downsampled levels and the group's `ome` attributes are written into the staged group after
level 0 is whole and before level 0's `complete` (the group's node, with those attributes, is written then,
in one write), so an installed image always has every level its metadata names, and a rerun that trusts
`complete` trusts the whole group. On a URL store (no rename) the group is
written at its final path, emptied first, and `complete` on level 0 is still the last write.

A sample's group (`sample_task`) holds its image at `0`, its mask as the label image `labels/mask/`; its roles
are installed one by one under the group, created in place, whose own `complete` comes last (`finish_sample`
writes each role's levels and `ome` attributes before it). Samples are decoded again on every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import zarr

from labzarr.store import COMPLETE, Location, VolumeAttrs
from labzarr.store.format import nodes
from labzarr.store.format.ngff import (
    LABELS,
    LEVEL0,
    MASK,
    Pyramid,
    image_attrs,
    image_of,
    label_attrs,
    labels_attrs,
    multiscales,
    role_path,
)

from .arrays import Staged, begin_array, install
from .pyramid import write_levels

__all__ = ["begin_image", "create_role_groups", "finish_sample", "install_image", "ome_of", "seal_levels"]


def begin_image(store: Location, name: str) -> Location:
    """Stage the image group of level-0 array `name` (`volumes/case1/0`); returns where level 0 is written."""
    return begin_array(store, image_of(name)) / LEVEL0  # the group's node is written whole when installed


def ome_of(level0: zarr.Array[Any], pyramid: Pyramid) -> list[dict[str, Any]]:
    """The `multiscales` of the image whose level 0 is `level0`, from the canonical grid its attrs record."""
    attrs = VolumeAttrs.decode(level0.attrs.asdict(), where=str(level0.path))
    return multiscales(name=attrs.item_id, axes=attrs.axes, shape=level0.shape, spacing=attrs.spacing,
                       affine=attrs.affine, pyramid=pyramid)


def seal_levels(group: Location, level0: zarr.Array[Any], pyramid: Pyramid, *, complete: str) -> None:
    """Write the pyramid of the image group at `group` from its whole level 0 (each level sealed with `complete`)."""
    write_levels(group, level0, pyramid, attrs={"item_id": level0.attrs.get("item_id", ""), COMPLETE: complete,
                                                **({"role": level0.attrs["role"]} if "role" in level0.attrs else {})})


def install_image(store: Location, name: str, folder: Location, level0: zarr.Array[Any], *, complete: str,
                  run_id: str, pyramid: Pyramid, attrs: Mapping[str, Any] | None = None,
                  defer: list[Staged] | None = None) -> None:
    """Finish the staged image group holding level 0 at `folder` (its levels, the group's node with its `ome`
    attributes), then record level 0's `attrs` and `complete` and move the group to `name`'s image group.
    Raises `Superseded` like `install`; `defer` as `install`'s."""
    group = folder.parent
    seal_levels(group, level0, pyramid, complete=complete)
    nodes.create_group(group, image_attrs(ome_of(level0, pyramid)))
    install(store, image_of(name), group, level0, complete=complete, run_id=run_id, at=LEVEL0, attrs=attrs,
            defer=defer)


def create_role_groups(store: Location, group: str, roles: Sequence[str]) -> None:
    """Create, below the sample group `group` (already in place), the group each role's levels go in: the mask's
    `labels/mask/`, another role's `roles/<role>/` (the image's levels lie in `group` itself)."""
    for role in roles:
        image = image_of(role_path(group, role))
        parts = image.removeprefix(f"{group}/").split("/") if image != group else []
        for depth in range(1, len(parts) + 1):  # every folder of the hierarchy is a node, or listings stop there
            zarr.open_group(store.zarr(), path="/".join([group, *parts[:depth]]), mode="a", zarr_format=3)


def finish_sample(store: Location, group: str, roles: Mapping[str, str], pyramid: Pyramid,
                  classes: Sequence[int], names: Mapping[int, tuple[str, tuple[int, int, int] | None]] | None = None
                  ) -> None:
    """Give each installed role of the sample group `group` (role -> level-0 path) its pyramid and `ome`
    attributes: the group is the image's NGFF image, `labels/` names the mask, whose group is a label image with
    one colour per class. Done before the sample's own `complete`, which still comes last."""
    root = zarr.open_group(store.zarr(), mode="r+", zarr_format=3)
    for role, path in roles.items():
        level0 = root[path]
        image = root[image_of(path)]
        assert isinstance(level0, zarr.Array) and isinstance(image, zarr.Group)
        how = Pyramid(levels=pyramid.levels, method="mode" if role == MASK else "mean")
        seal_levels(store / image_of(path), level0, how, complete=str(level0.attrs[COMPLETE]))
        ms = ome_of(level0, how)
        image.attrs.update(label_attrs(ms, classes, names) if role == MASK else image_attrs(ms))
    if MASK in roles:
        labels = root[f"{group}/{LABELS}"]
        assert isinstance(labels, zarr.Group)
        labels.attrs.update(labels_attrs([MASK]))
