"""The training side: reads only the store (zarr, torch), never readers/ or convert/."""

from .dataset import PatchDataset
from .store import ClassInfo, IndexItem, StoreView, open_store

__all__ = ["ClassInfo", "IndexItem", "PatchDataset", "StoreView", "open_store"]
