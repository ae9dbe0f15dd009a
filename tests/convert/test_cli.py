"""What a person sees from `labzarr`: progress on a terminal, lines in a log, one-line errors with a hint, examples."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import pty
import re
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labzarr.convert.cli import build_parser, main
from labzarr.convert.console import LineProgress
from labzarr.convert.demo import write_spec
from labzarr.convert.progress import ProgressEvent

from ..conftest import Delivery, make_delivery
from ..ptys import readable

_ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def _convert_argv(spec: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "labzarr", "convert", str(spec), "--workers", "1", *extra]


def _run_on_pty(argv: list[str], timeout: float = 240) -> tuple[int, str]:
    """Run `argv` with stdin, stdout and stderr on a fresh pseudo-terminal; return its exit code and output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 rows, 120 columns
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=_ENV, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if readable(master, 0.5):
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not data:
                    break
                out += data
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.wait(timeout=30), out.decode("utf-8", "replace")


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    code, out = _run_on_pty(_convert_argv(d.spec))
    assert code == 0, out
    assert "\r" in out  # a bar redrawn in place, not lines
    assert "probing: 100%" in out and "converting: 100%" in out and "B/s" in out
    # the bar follows bytes (they move inside a big item); the items done are counted beside it
    assert re.search(r"converting: 100%\|[^|]+\| ([\d.]+[kMGT]?)/\1 \[[^]]*, (\d+)/\2 items\]", out), out
    assert "labzarr: converting" not in out  # no plain log lines on a terminal
    assert "status" in out and "truncated" in out and "MB/s" in out and "manifest:" in out


def test_progress_lines_without_a_terminal(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    out = subprocess.run(_convert_argv(d.spec), capture_output=True, text=True, env=_ENV, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr and "\x1b" not in out.stderr
    lines = out.stderr.splitlines()
    assert lines and all(line.startswith("labzarr: ") for line in lines), lines
    assert any(re.match(r"labzarr: probing (\d+)/\1 files \(100%\)", line) for line in lines), lines
    assert any(re.match(r"labzarr: converting (\d+)/\1 items \(100%\).* done in ", line) for line in lines), lines
    summary = json.loads((d.spec.parent / "summary.json").read_text())
    c = summary["counts"]
    table = out.stdout.splitlines()
    assert table[0] == f"demo: {c['items']} items from {c['files']} files"
    cells = [line.split() for line in table]
    assert all([s, str(c[s])] in cells for s in ("ok", "rejected", "ignored"))
    assert all([r, str(n)] in cells for r, n in summary["reasons"].items())
    assert any(line.startswith("  time ") for line in table)
    assert any(line.startswith("  read ") and line.endswith(" MB/s)") for line in table)


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    d = make_delivery(tmp_path)
    with socket.socket() as busy:
        # dask's default HTTP port taken (another run on this machine) must not make a --quiet run talk
        with contextlib.suppress(OSError):  # already taken by someone else: the same situation
            busy.bind(("127.0.0.1", 8787))
            busy.listen()
        out = subprocess.run(_convert_argv(d.spec, "--quiet"), capture_output=True, text=True, env=_ENV, timeout=240)
    assert out.returncode == 0, out.stderr
    assert (out.stdout, out.stderr) == ("", "")
    assert (d.spec.parent / "manifest.csv").is_file()


def test_line_progress_is_periodic() -> None:
    now = [0.0]
    stream = io.StringIO()
    show = LineProgress(stream, interval=10.0, clock=lambda: now[0])
    mb = 1_000_000
    for i in range(0, 101):
        now[0] = i * 0.5  # an item every 0.5 s: 50 s in all
        show(ProgressEvent("convert", i, 100, i * mb, 100 * mb))
    lines = stream.getvalue().splitlines()
    # the phase's start, one line per 10 s, and its end
    assert [line.split(" items")[0] for line in lines] == [f"labzarr: converting {n}/100"
                                                           for n in (0, 20, 40, 60, 80, 100)]
    assert lines[2] == "labzarr: converting 40/100 items (40%), 40.0MB/100MB, 2.00MB/s, ETA 00:30"
    assert lines[-1].endswith("done in 00:50")


def _spec(d: Delivery, name: str, body: str) -> str:
    """A spec file of its own beside the delivery's, holding `body`."""
    p = d.spec.parent.parent / name / "delivery.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)
    return str(p)


def _bad_workbook(d: Delivery) -> str:
    (d.raw / "labels" / "annotations.xlsx").write_text("case_001,neuron\n")  # a CSV saved under the xlsx name
    return str(d.spec)


def _no_workbook(d: Delivery) -> str:
    return str(write_spec(d.spec.parent.parent / "w" / "delivery.toml", raw=d.raw, store=d.store, labels=False,
                          extra='\n[labels]\nworkbook = "labels.xlsx"\n'))


def _locked(d: Delivery) -> str:
    """The spec of a store that another run (this process, for the test's duration) holds the lock of."""
    from labzarr.convert.write.lock import store_lock

    _HELD.enter_context(store_lock(d.store))
    return str(d.spec)


_HELD = contextlib.ExitStack()  # locks taken by _locked, released after each test


@pytest.fixture(autouse=True)
def _release_locks() -> Iterator[None]:
    yield
    _HELD.close()


def _free_port() -> int:
    """A port nothing listens on: a well-formed scheduler address that cannot be reached."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# (build argv from a fresh demo delivery, what the error line must say)
_USAGE = [
    pytest.param(lambda d: [], r"^labzarr: error: the following arguments are required: COMMAND$", id="no-command"),
    pytest.param(lambda d: ["frobnicate"], r"^labzarr: error: argument COMMAND: invalid choice: 'frobnicate'",
                 id="unknown-command"),
    pytest.param(lambda d: ["convert", str(d.spec), "--workers", "two"],
                 r"^labzarr convert: error: argument --workers: invalid int value", id="workers-not-a-number"),
    pytest.param(lambda d: ["convert", "nope/delivery.toml"],
                 r"^labzarr: error: nope/delivery.toml: spec file not found$", id="spec-missing"),
    pytest.param(lambda d: ["convert", str(d.spec.parent)], r"is a folder, not a spec file$", id="spec-is-a-folder"),
    pytest.param(lambda d: ["convert", _spec(d, "a", "[delivery\n")], r"delivery.toml: not valid TOML",
                 id="spec-not-toml"),
    pytest.param(lambda d: ["convert", _spec(d, "b", d.spec.read_text().replace("level = 5", "level = 40"))],
                 r"delivery.toml: \[store\] level = 40: blosc-lz4 levels are 1..9$", id="spec-bad-value"),
    pytest.param(lambda d: ["convert", _spec(d, "c",
                                             f'[delivery]\nname = "x"\nraw = "{d.raw}-gone"\nstore = "s.zarr"\n')],
                 r"\[delivery\] raw = '.*-gone': folder not found$", id="raw-missing"),
    pytest.param(lambda d: ["convert", _no_workbook(d)], r"\[labels\] workbook = '.*labels.xlsx': file not found$",
                 id="workbook-missing"),
    pytest.param(lambda d: ["convert", _bad_workbook(d)],
                 r"\[labels\] workbook: labels/annotations.xlsx: not an xlsx: not a zip archive but text",
                 id="workbook-not-xlsx"),
    pytest.param(lambda d: ["convert", _spec(d, "d", d.spec.read_text().replace("sheet = 3", "sheet = 9"))],
                 r"\[labels\] sheet: labels/annotations.xlsx: sheet 9 is past the end: .* has 4 sheets",
                 id="workbook-sheet-past-end"),
    pytest.param(lambda d: ["convert", _locked(d)],
                 rf"demo.zarr: in use by another labzarr run: pid {os.getpid()} "
                 rf"on host {socket.gethostname()}, started 20",
                 id="store-locked"),
    pytest.param(lambda d: ["convert", str(d.spec), "--scheduler", "foo://x"],
                 r"--scheduler foo://x: not a scheduler address", id="scheduler-scheme"),
    pytest.param(lambda d: ["convert", str(d.spec), "--scheduler", "localhost"],
                 r"--scheduler localhost: not a scheduler address", id="scheduler-no-port"),
    pytest.param(lambda d: ["convert", str(d.spec), "--scheduler", f"tcp://127.0.0.1:{_free_port()}"],
                 r"--scheduler tcp://127\.0\.0\.1:\d+: cannot connect", id="scheduler-unreachable"),
    pytest.param(lambda d: ["convert", str(d.spec), "--workers", "0"], r"--workers 0: must be at least 1$",
                 id="workers-zero"),
    pytest.param(lambda d: ["convert", str(d.spec), "--progress-every", "0"],
                 r"--progress-every 0.0: must be greater than 0$", id="progress-every-zero"),
    pytest.param(lambda d: ["report", str(d.spec)], r"summary.json: not found; delivery 'demo' is not converted yet$",
                 id="report-before-convert"),
    pytest.param(lambda d: ["report", str(d.spec), "--max-thumbs", "0"], r"--max-thumbs 0: must be greater than 0$",
                 id="report-max-thumbs"),
    pytest.param(lambda d: ["inspect", str(d.store)], r"demo.zarr: no such store", id="inspect-missing-store"),
    pytest.param(lambda d: ["diff", "a.csv", "b.csv"], r"a.csv: no such manifest$", id="diff-missing"),
    pytest.param(lambda d: ["diff", "a.csv", "b.csv", "--limit", "-1"], r"--limit -1: must be 0 \(all\) or more$",
                 id="diff-bad-limit"),
]


@pytest.mark.parametrize("argv, match", _USAGE)
def test_usage_error_is_one_line_and_a_hint(argv: Callable[[Delivery], list[str]], match: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    d = make_delivery(tmp_path)
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv(d))
    except SystemExit as exc:  # argparse's own errors exit from parse_args
        code = exc.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("labzarr") and ": error: " in lines[0]
    assert lines[1].startswith("  hint: ") and len(lines[1]) > len("  hint: ") + 10
    assert re.search(match, lines[0]), lines[0]


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_command_help_has_a_worked_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "example" in text and f"$ labzarr {command} " in text, text


@pytest.mark.parametrize("where", ["under-a-file", "under-proc"])
def test_a_store_path_that_cannot_be_a_folder_is_one_usage_error(tmp_path: Path, where: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "make_delivery.py"
    blocker.write_text("")
    store = blocker / "lab.zarr" if where == "under-a-file" else Path("/proc/labzarr-test.zarr")
    d = make_delivery(tmp_path)
    spec = write_spec(tmp_path / "m" / "delivery.toml", raw=d.raw, store=store)
    assert main(["convert", str(spec), "--quiet"]) == 2
    err = capsys.readouterr().err
    why = "Not a directory" if where == "under-a-file" else "No such file or directory"
    assert err.startswith(f"labzarr: error: [delivery] store = '{store}': cannot create the store folder: {why}"), err
    assert "hint: point [delivery] store at a folder that can be created" in err and "Traceback" not in err
    assert not (spec.parent / "manifest.csv").exists()


def test_a_reader_that_stops_early_ends_the_output_quietly(converted_demo) -> None:
    """`labzarr inspect --stats STORE | head`: the pipe closes before labzarr writes; it stops as `cat` does,
    with no traceback and the exit status of a process SIGPIPE ended (128 + 13)."""
    d, _ = converted_demo
    proc = subprocess.Popen([str(Path(sys.executable).parent / "labzarr"), "inspect", "--stats", str(d.store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first byte is written
    _, err = proc.communicate(timeout=120)
    assert err.decode() == "" and proc.returncode == 141


def test_a_spec_that_does_not_load_starts_no_cluster(tmp_path: Path) -> None:
    """The spec is read before the embedded cluster starts: a bad one is its error line, with no cluster started
    and stopped first (the cluster's thread is what imports distributed)."""
    d = make_delivery(tmp_path)
    spec = d.spec.parent / "bad.toml"
    spec.write_text(d.spec.read_text().replace("level = 5", "level = 40"))
    code = ("import sys\nfrom labzarr.convert.cli import main\n"
            f"code = main(['convert', {str(spec)!r}, '--quiet'])\n"
            "print(code, 'distributed' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_ENV)
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert "level = 40" in out.stderr
