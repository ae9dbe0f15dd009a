"""Path-level bad inputs: symlinks leaving raw, loops, dangling links, FIFOs, Unicode name collisions."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from labzarr.readers import Reason

from ._util import canonical, gz, nifti, put, volume


def _outside(raw: Path) -> Path:
    secret = raw.parent / "outside_raw"
    secret.mkdir(exist_ok=True)
    return secret


def symlink_file_out(raw: Path, slot: str, seed: int) -> str:
    target = _outside(raw) / f"secret_{seed}.nii.gz"
    target.write_bytes(gz(nifti(volume(seed))))
    (raw / slot).mkdir(parents=True)
    os.symlink(target, raw / slot / "scan.nii.gz")
    return f"{slot}/scan.nii.gz"


def symlink_dir_out(raw: Path, slot: str, seed: int) -> str:
    target = _outside(raw) / f"folder_{seed}"
    target.mkdir()
    (target / "scan.nii").write_bytes(nifti(volume(seed)))
    (raw / slot).mkdir(parents=True)
    os.symlink(target, raw / slot / "linked")
    return f"{slot}/linked"


def dotdot_symlink(raw: Path, slot: str, seed: int) -> str:
    (_outside(raw) / f"up_{seed}.nii").write_bytes(nifti(volume(seed)))
    (raw / slot).mkdir(parents=True)
    os.symlink(f"../../outside_raw/up_{seed}.nii", raw / slot / "scan.nii")
    return f"{slot}/scan.nii"


def dangling(raw: Path, slot: str, seed: int) -> str:
    (raw / slot).mkdir(parents=True)
    os.symlink(f"gone_{seed}.nii", raw / slot / "scan.nii")
    return f"{slot}/scan.nii"


def loop(raw: Path, slot: str, seed: int) -> str:
    (raw / slot).mkdir(parents=True)
    os.symlink("b.nii", raw / slot / "a.nii")
    os.symlink("a.nii", raw / slot / "b.nii")
    return f"{slot}/a.nii"


def fifo(raw: Path, slot: str, seed: int) -> str:
    (raw / slot).mkdir(parents=True)
    os.mkfifo(raw / slot / "scan.nii")  # opening it to read would block the run forever
    return f"{slot}/scan.nii"


def nfd_twin(raw: Path, slot: str, seed: int) -> str:
    """The same name twice, NFC and NFD (a macOS copy beside a Linux one), same bytes: one file, not two."""
    blob = gz(nifti(volume(seed)))
    put(raw, f"{slot}/r\u00e9sum\u00e9.nii.gz", blob)
    return put(raw, f"{slot}/re\u0301sume\u0301.nii.gz", blob)


PATHS = [
    pytest.param(symlink_file_out, Reason.PATH_OUTSIDE_RAW, id="symlink-file-leaves-raw"),
    pytest.param(symlink_dir_out, Reason.PATH_OUTSIDE_RAW, id="symlink-folder-leaves-raw"),
    pytest.param(dotdot_symlink, Reason.PATH_OUTSIDE_RAW, id="dotdot-symlink-leaves-raw"),
    pytest.param(dangling, Reason.UNSUPPORTED_FORMAT, id="dangling-symlink"),
    pytest.param(loop, Reason.UNSUPPORTED_FORMAT, id="symlink-loop"),
    pytest.param(fifo, Reason.UNSUPPORTED_FORMAT, id="fifo-named-nii"),
    pytest.param(nfd_twin, Reason.DUPLICATE_CONTENT, id="nfc-nfd-twins"),
]


def _nfd_only(raw: Path) -> str:
    put(raw, "good_020/caf\u0065\u0301.nii.gz", gz(nifti(volume(920))))  # written in NFD ...
    return "good_020/caf\u00e9.nii.gz"  # ... reported in NFC


PATHS_GOOD = [(_nfd_only, lambda raw, source: canonical(raw / unicodedata.normalize("NFD", source)))]
