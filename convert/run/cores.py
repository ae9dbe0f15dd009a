"""How many worker processes a run starts by default, wherever they run: light enough for the `labzarr` command to
ask before it imports anything heavy (`cli._converted_without_cluster`)."""

from __future__ import annotations

__all__ = ["default_workers"]


def default_workers() -> int:
    """About three quarters of the physical cores, at least one."""
    import psutil

    cores = psutil.cpu_count(logical=False) or 1
    return max(1, round(0.75 * cores))
