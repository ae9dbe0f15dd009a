"""Run consecutive python blocks of a doc in one interpreter (torch is imported once, not per block).

Usage: `python docs_pyrun.py SOURCE LOG [SOURCE LOG ...]`. Each block runs as a script of its own (a fresh
`__main__` namespace) with its output in LOG, its exit code in LOG.rc; the first failing block stops the run
(exit 97), as a failing shell step stops the doc's script.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from pathlib import Path


def run(source: Path, log: Path) -> int:
    started = time.time()
    code = 0
    with log.open("w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            exec(compile(source.read_text(), str(source), "exec"), {"__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
    Path(f"{log}.rc").write_text(f"{code}\n")
    Path(f"{log}.time").write_text(f"{started} {time.time()}\n")
    return code


def main(argv: list[str]) -> int:
    pairs = list(zip(argv[0::2], argv[1::2], strict=True))
    for source, log in pairs:
        if run(Path(source), Path(log)):
            return 97
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
