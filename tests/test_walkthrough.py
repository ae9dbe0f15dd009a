"""The README's "Your first delivery", run literally as a newcomer would, on a delivery of nibabel's and pydicom's
real files, in a project folder that is not the repository, then the rough edges a newcomer hits on the way.

The project is a scratch folder holding a copy of the Makefile, a `.venv` link to this environment and a git
repository; the README's shell blocks of that section run there in order, as written, except the one that
writes the demo delivery (this test brings its own). Between them: a misspelled key, an ID collision, a Ctrl-C
(SIGINT to the process group on a pty) and its resume, a no-op rerun leaving `git status` clean, a flipped
byte and a deleted chunk repaired by the documented command, and `make inspect/verify/report` on a store
outside `data/`."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import termios
import time
from pathlib import Path

from .ptys import readable
from .walkthrough import NAME, SPEC, env, new_project, section, sh

BLOCK = re.compile(r"^```(sh|console)\n(.*?)^```", re.M | re.S)


def _commands(block: str, lang: str) -> list[str]:
    """A block's commands: every line of a sh block (comments dropped), the `$ ` lines of a console block."""
    if lang == "console":
        return [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _interrupted_on_pty(cmd: str, cwd: Path, *, once: bytes) -> tuple[int, bytes]:
    """Run `cmd` on a pty; once its output holds `once`, SIGINT its process group (a terminal's Ctrl-C)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execve("/bin/bash", ["bash", "-c", cmd], env())
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    out, sent, deadline = b"", False, time.monotonic() + 120
    while time.monotonic() < deadline:
        if not sent and once in out:
            os.killpg(pid, signal.SIGINT)
            sent = True
        if readable(fd, 0.05):
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert sent, out.decode(errors="replace")
    return os.waitstatus_to_exitcode(status), out


def _first_delivery_blocks() -> list[tuple[str, list[str]]]:
    blocks = [(lang, _commands(body, lang)) for lang, body in BLOCK.findall(section("Your first delivery"))]
    # The one block a user with a real delivery skips: it writes the demo delivery to follow along.
    demo = [b for b in blocks if any("labzarr demo" in c for c in b[1])]
    assert len(demo) == 1 and len(demo[0][1]) == 1, demo
    return [b for b in blocks if b is not demo[0]]


def _flip_and_delete(store: Path) -> tuple[str, str]:
    """Flip one byte inside one array's chunk data and delete another array's chunk file."""
    chunks = sorted(p for p in (store / "volumes").rglob("*") if p.is_file() and "c" in p.relative_to(store).parts)
    by_array = {}
    for p in chunks:
        by_array.setdefault(p.relative_to(store / "volumes").parts[0], p)
    (flip_at, flipped), (gone_at, gone) = list(by_array.items())[:2]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 3] ^= 0xFF
    flipped.write_bytes(bytes(data))
    gone.unlink()
    return flip_at, gone_at


def test_a_first_delivery_as_the_readme_says(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    spec = project / SPEC
    blocks = _first_delivery_blocks()
    assert [c for _, cmds in blocks for c in cmds][:1] == [f"make init NAME={NAME} RAW=data/raw/{NAME}"]

    for _, cmds in blocks:
        for cmd in cmds:
            if cmd.startswith("make check"):
                # A misspelled key first: one line naming it, a did-you-mean, exit 2 from make's labzarr.
                good = spec.read_text()
                spec.write_text(good.replace("[items]\n", "[items]\nid_patern = 'x'\n", 1))
                bad = sh(cmd, project, ok=False)
                assert bad.returncode == 2, bad.stdout + bad.stderr
                assert "[items] unknown key 'id_patern'" in bad.stderr and "did you mean 'id_pattern'?" in bad.stderr
                assert "Traceback" not in bad.stderr
                spec.write_text(good)
                out = sh(cmd, project)
                # The ID collision: sub_05's two scans, named with their files.
                assert "item ID(s) given to distinct contents" in out.stdout
                assert "'sub05': 2 contents: sub_05/scan_a.nii, sub_05/scan_b.nii.gz" in out.stdout
                assert "items with a workbook row: 6 of 6" in out.stdout
            elif cmd.startswith("make convert"):
                code, shown = _interrupted_on_pty(cmd, project, once=b"converting")
                assert b"labzarr: interrupted; rerun the same command to resume" in shown
                assert b"Traceback" not in shown, shown.decode(errors="replace")
                assert code != 0
                out = sh(cmd, project)  # the same command resumes
                assert "converted" in out.stdout
                assert "warning: 1 item ID(s) given to distinct contents" in out.stdout
            else:
                out = sh(cmd, project)
                if cmd.startswith("make init"):
                    assert f"wrote {SPEC}" in out.stdout
                    assert "# cell_type = 'F'" in spec.read_text()
                if cmd.startswith("make report"):
                    assert (project / "data" / "reports" / NAME / "index.html").is_file()
    rows = (spec.parent / "manifest.csv").read_text()
    assert rows.count(",ok,") == 6, rows  # five subjects, sub_05 twice; notes and workbook ignored
    assert sh("git log --oneline", project).stdout.count("\n") == 2  # the README's commit landed

    # A no-op rerun: nothing converted, the committed manifests byte for byte as they were.
    assert "0 converted, 6 unchanged" in sh(f"make convert DELIVERY={NAME}", project).stdout
    assert sh("git status --porcelain", project).stdout == ""

    # Damage, found by verify and repaired by the README's command.
    flipped, gone = _flip_and_delete(project / "data" / "stores" / f"{NAME}.zarr")
    damaged = sh(f"make verify DELIVERY={NAME}", project, ok=False)
    assert damaged.returncode != 0 and flipped in damaged.stdout and gone in damaged.stdout, damaged.stdout
    # make exits 2 on any failure; the target says that labzarr's own verdict was damage (its exit code 1).
    assert f"make: verify found damage in {SPEC} (labzarr verify exits 1" in damaged.stderr, damaged.stderr
    repair = [c for lang, body in BLOCK.findall(section("Checking and repairing a store"))
              for c in _commands(body, lang) if "--repair" in c]
    assert repair == [f".venv/bin/labzarr verify --repair {SPEC}"]
    out = sh(repair[0], project)
    assert "2 repaired" in out.stdout and "ok: every chunk present and intact" in out.stdout, out.stdout
    assert "ok: every chunk present" in sh(f"make verify DELIVERY={NAME}", project).stdout
    assert sh("git status --porcelain", project).stdout == ""

    # The store moved to another disk: every make target takes it from the spec.
    elsewhere = tmp_path / "other-disk" / f"{NAME}.zarr"
    spec.write_text(spec.read_text().replace(f"store = 'data/stores/{NAME}.zarr'", f"store = '{elsewhere}'"))
    assert f"store:    {elsewhere}" in sh(f"make convert DELIVERY={NAME}", project).stdout
    assert "sub01" in sh(f"make inspect DELIVERY={NAME}", project).stdout
    assert "ok: every chunk present" in sh(f"make verify DELIVERY={NAME}", project).stdout
    assert "6 ok items" in sh(f"make report DELIVERY={NAME}", project).stdout
    assert not (project / "data" / "stores" / f"{NAME}-2.zarr").exists()
    # The edited spec, and summary.json recording its new hash; manifest.csv is as committed.
    changed = {line.split()[-1] for line in sh("git status --porcelain", project).stdout.splitlines()}
    assert changed == {SPEC, f"manifests/{NAME}/summary.json"}
