"""pydicom, loaded without `requests` and `tqdm`: imported before the readers wherever a run's jobs run, by the
worker server and the forked runner (`worker_start.JOB_MODULES`) and by the in-process runner (`in_process.py`).

pydicom imports `requests` (and urllib3, charset_normalizer, idna, certifi with it) and `tqdm` when it loads,
through `pydicom.data.download`, which fetches pydicom's own test files when they are asked for and are not
installed, with a tqdm progress bar; no task asks for them, and it fetches with urllib, and without a bar, where
those are missing. They are a large part of what a run imports before its first task, in the worker server and in
a run without a cluster alike (docs/benchmarks.md, "Fixed cost", and "The floor under issue 34's
targets"), and `--quiet` shows no progress bar either. Both are hidden while pydicom loads, and only then: a later
`import requests` (a plugin reader's, say) or `import tqdm` (a bar on the terminal) imports it as usual. Where
pydicom is loaded already, nothing changes.
"""

from __future__ import annotations

import sys

_HIDDEN = ("requests", "tqdm")


def _load_without(names: tuple[str, ...]) -> None:
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # `import <name>` raises ImportError meanwhile
    try:
        import pydicom  # noqa: F401
    finally:
        for name in hidden:
            del sys.modules[name]


if "pydicom" not in sys.modules:
    _load_without(_HIDDEN)
