"""Progress events a run reports while it works: one per probed batch of files and one per finished item.

Library code only emits these; the CLI decides how a person sees them (a bar on
a terminal, periodic lines in a log, nothing with `--quiet`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .manifest import Row

__all__ = ["Phase", "Progress", "ProgressEvent"]

Phase = Literal["probe", "convert"]
"""`probe`: hashing and sniffing every file; `convert`: decoding and writing the items."""


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Where a phase stands after one more unit finished; `done == total` ends the phase."""

    phase: Phase
    done: int  # files probed / items converted so far
    total: int
    bytes_done: int  # source bytes of those files / items
    bytes_total: int
    row: Row | None = None  # the item just converted (convert phase only)


Progress = Callable[[ProgressEvent], None]
"""Called in the driver process, in completion order; must be quick (it runs between futures)."""
