"""Imported by the worker server before the readers (`worker_start.PRELOAD`): pydicom, without `requests`.

pydicom imports `requests` (and urllib3, charset_normalizer, idna, certifi with it) when it loads, through
`pydicom.data.download`, which fetches pydicom's own test files when they are asked for and are not installed; no
task asks for them, and it fetches with urllib where `requests` is missing. That import is a large part of what the
server imports after the `labzarr` command forks it, and every run waits for those imports before its first task
(docs/benchmarks.md, "Fixed cost"). `requests` is hidden while pydicom loads, and only then: a later
`import requests` (a plugin reader's, say) imports it as usual. Where pydicom is loaded already, nothing changes.
"""

from __future__ import annotations

import sys

_HIDDEN = "requests"

if "pydicom" not in sys.modules and _HIDDEN not in sys.modules:
    sys.modules[_HIDDEN] = None  # type: ignore[assignment]  # `import requests` raises ImportError meanwhile
    try:
        import pydicom  # noqa: F401
    finally:
        del sys.modules[_HIDDEN]
