"""labzarr: messy imaging deliveries in, one validated zarr v3 store and a patch Dataset out."""

from importlib.metadata import PackageNotFoundError, version

from labzarr.convert.run import convert_delivery
from labzarr.loaders.dataset import PatchDataset
from labzarr.loaders.store import open_store

try:
    __version__ = version("labzarr")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["PatchDataset", "__version__", "convert_delivery", "open_store"]
