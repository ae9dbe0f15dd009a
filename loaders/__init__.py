"""The training side: reads only the store (through labzarr.store) and torch, never readers/ or convert/."""

from labzarr.store import ChannelStats, ClassInfo, DatasetStats, IndexItem, StoreView, class_names, open_store

from ._regions import Region
from .collate import Collate, MixedBatchError, MixedBatchWarning, collate
from .dataset import Mode, PatchDataset
from .normalize import Normalize, Scheme
from .options import Backend, ReadOptions
from .samplers import ShardBy, ShuffleSampler, StratifiedSampler
from .selection import Selection, SelectionKeywords

__all__ = [
    "Backend",
    "ChannelStats",
    "ClassInfo",
    "Collate",
    "DatasetStats",
    "IndexItem",
    "MixedBatchError",
    "MixedBatchWarning",
    "Mode",
    "Normalize",
    "PatchDataset",
    "ReadOptions",
    "Region",
    "Scheme",
    "Selection",
    "SelectionKeywords",
    "ShardBy",
    "ShuffleSampler",
    "StoreView",
    "StratifiedSampler",
    "class_names",
    "collate",
    "open_store",
]
