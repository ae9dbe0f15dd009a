"""The cyclic garbage collector held off while a run imports what it needs, and what the imports made frozen after.

Importing a few hundred modules creates a couple of hundred thousand objects and almost no garbage, and the
collector's passes over them on the way (hundreds of young ones, full ones as the heap grows) cost a tenth or more
of the imports' time (docs/benchmarks.md, "Fixed cost"); a run without a cluster waits for those imports before its
first task. The `labzarr` command holds the collector while it imports the driver (`cli._convert`), the worker
server while it imports its preload (`_server_heap.py`); this holds it while a run imports the writers
(`driver.import_writers`), and a run in forked workers its runner and the jobs' modules too
(`driver.convert_delivery`, `forked.ForkedRunner`). Frozen after (`gc.freeze`), the imported objects are left out
of later collections, in this process and in every worker it forks, as a run freezes its heap anyway while it lasts
(`driver._heap_frozen`, which hands it all back when the run ends).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["importing"]


@contextmanager
def importing() -> Iterator[None]:
    """Run the block (imports) with the collector off, then freeze what exists and turn the collector on again;
    where the collector is off already (the caller holds it), nothing changes."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
