"""The training side: reads only the store (zarr, tensorstore, torch), never readers/ or convert/."""

from ._handles import Backend, ForkAfterTensorstoreError, ReadOptions
from ._regions import Region
from .collate import Collate, collate
from .dataset import Mode, PatchDataset
from .samplers import StratifiedSampler
from .store import ClassInfo, IndexItem, StoreView, class_names, open_store

__all__ = [
    "Backend",
    "ClassInfo",
    "Collate",
    "ForkAfterTensorstoreError",
    "IndexItem",
    "Mode",
    "PatchDataset",
    "ReadOptions",
    "Region",
    "StoreView",
    "StratifiedSampler",
    "class_names",
    "collate",
    "open_store",
]
