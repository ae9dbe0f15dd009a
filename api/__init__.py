"""labzarr: messy imaging deliveries in, one validated zarr v3 store and a patch Dataset out.

The public names are imported on first use (PEP 562), so `import labzarr.convert...` in the CLI
and in every dask worker does not pay for torch, and `import labzarr.loaders...` does not pay for dask.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labzarr.convert.run.driver import convert_delivery
    from labzarr.loaders.dataset import PatchDataset
    from labzarr.store.view import open_store

__all__ = ["PatchDataset", "__version__", "convert_delivery", "open_store"]

_WHERE = {"convert_delivery": "labzarr.convert.run.driver", "PatchDataset": "labzarr.loaders.dataset",
          "open_store": "labzarr.store.view"}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # looked up on first use: importlib.metadata is most of `import labzarr`'s time
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("labzarr")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0.0.0"
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'labzarr' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "__version__", *_WHERE])
