"""Real filesystems for tests: a small tmpfs whose disk fills up or turns read-only, a folder that cannot be listed
(root only)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's -o size=, e.g. "3m") at `mount`, unmounted afterwards; skips without root."""
    mount.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


UNLISTABLE = Path("/proc/1/map_files")  # listing it needs CAP_SYS_ADMIN in the initial namespace: EACCES even as root


@contextmanager
def unlistable_folder(mount: Path) -> Iterator[Path]:
    """A real folder at `mount` whose listing fails with EACCES, even for root (a bind mount of UNLISTABLE);
    skips where that cannot be made."""
    mount.mkdir(parents=True, exist_ok=True)
    try:
        os.listdir(UNLISTABLE)
        pytest.skip(f"{UNLISTABLE} is listable here")
    except PermissionError:
        pass
    except OSError as exc:
        pytest.skip(f"{UNLISTABLE}: {exc}")
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    done = subprocess.run(["mount", "--bind", str(UNLISTABLE), str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
