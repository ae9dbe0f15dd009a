"""Stacks of 2D images: which stack and slot each image gets, and which task writes which shard. Pure.

Invariants:
- 2D items of one (C, H, W, dtype) share one array `stacks/<C>x<H>x<W>_<dtype>` of
  shape (N, C, H, W): one image per chunk, `per_shard` images per shard file.
- Slots follow manifest order (item_id, then source): the same delivery gives
  the same slots whatever the worker count or the order files were probed in.
- Each shard is written by exactly one `ShardTask`, so no two tasks ever write
  the same shard file (zarr-python #3682: concurrent partial writes to one
  shard lose data). A slot whose image is rejected stays empty (zeros).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from labzarr.readers import Plane

from ..manifest import Row

__all__ = ["MAX_IMAGES_PER_SHARD", "SHARD_BYTES", "STACKS", "ShardTask", "SlotItem", "Stack", "StackEntry",
           "images_per_shard", "plan_stacks", "stack_name"]

STACKS = "stacks"
# Decoded bytes per shard: a shard task holds one shard in memory before writing it in one piece, and
# 100 000 RGB 256x256 tiles make ~300 shard files. Tiny images are capped so a shard index stays small
# and a delivery still splits into enough tasks to keep every worker busy.
SHARD_BYTES = 64 << 20
MAX_IMAGES_PER_SHARD = 1024


@dataclass(frozen=True, slots=True)
class StackEntry:
    """A 2D item to place: who it is and what its header says it decodes to."""

    item_id: str
    source: str
    path: str
    kind: str
    sha256: str
    plane: Plane
    warnings: tuple[str, ...] = ()
    size: int = 0  # bytes of the source file: progress and throughput, never a decision


@dataclass(frozen=True, slots=True)
class SlotItem:
    """One image's place in its stack; `slot` is its row, and the manifest's `slot`."""

    item_id: str
    source: str
    path: str
    kind: str
    sha256: str
    slot: int
    warnings: tuple[str, ...] = ()
    size: int = 0

    def base_row(self) -> Row:
        """The row every outcome of this image starts from: what the plan knows about it."""
        return Row(item_id=self.item_id, status="ok", source=self.source, kind=self.kind, sha256=self.sha256)


@dataclass(frozen=True, slots=True)
class Stack:
    """One stack array: `n` images of `plane`'s shape, `per_shard` of them to a shard file."""

    array: str
    plane: Plane
    n: int
    per_shard: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.n, *self.plane.shape)

    @property
    def chunks(self) -> tuple[int, int, int, int]:
        return (1, *self.plane.shape)

    @property
    def shards(self) -> tuple[int, int, int, int]:
        return (self.per_shard, *self.plane.shape)

    @property
    def n_shards(self) -> int:
        return -(-self.n // self.per_shard)


@dataclass(frozen=True, slots=True)
class ShardTask:
    """Decode `items` and write them into shard `shard` of `stack`; items are sorted by slot, all in that shard."""

    stack: Stack
    shard: int
    items: tuple[SlotItem, ...]

    @property
    def first(self) -> int:
        """The first slot this task writes."""
        return self.items[0].slot

    @property
    def stop(self) -> int:
        """One past the last slot this task writes."""
        return self.items[-1].slot + 1


def stack_name(plane: Plane) -> str:
    """The stack array for images of `plane`'s shape and dtype, e.g. `stacks/3x256x256_uint8`."""
    return f"{STACKS}/{'x'.join(map(str, plane.shape))}_{plane.dtype}"


def images_per_shard(plane: Plane, n: int) -> int:
    """How many of `n` images of `plane` go in one shard: SHARD_BYTES' worth, 1..MAX_IMAGES_PER_SHARD, at most n.

    At most n because a shard's index has a slot per image whether stored or not.
    """
    return max(1, min(MAX_IMAGES_PER_SHARD, SHARD_BYTES // max(int(plane.nbytes), 1), n))


def plan_stacks(entries: Sequence[StackEntry]) -> tuple[tuple[Stack, ...], tuple[ShardTask, ...]]:
    """Group entries into stacks by plane, give slots in manifest order, and one task per shard."""
    by_plane: dict[Plane, list[StackEntry]] = defaultdict(list)
    for e in entries:
        by_plane[e.plane].append(e)
    stacks: list[Stack] = []
    tasks: list[ShardTask] = []
    for plane in sorted(by_plane, key=stack_name):
        members = sorted(by_plane[plane], key=lambda e: (e.item_id, e.source))
        stack = Stack(array=stack_name(plane), plane=plane, n=len(members),
                      per_shard=images_per_shard(plane, len(members)))
        stacks.append(stack)
        slots = [SlotItem(item_id=e.item_id, source=e.source, path=e.path, kind=e.kind, sha256=e.sha256, slot=i,
                          warnings=e.warnings, size=e.size) for i, e in enumerate(members)]
        for shard in range(stack.n_shards):
            lo = shard * stack.per_shard
            tasks.append(ShardTask(stack=stack, shard=shard, items=tuple(slots[lo : lo + stack.per_shard])))
    return tuple(stacks), tuple(tasks)
