"""The training side: reads only the store (through labzarr.store) and torch, never readers/ or convert/."""

from labzarr.store import ChannelStats, ClassInfo, DatasetStats, IndexItem, StoreView, class_names, open_store

from ._regions import Region
from .adapters import MonaiTransform, TorchioTransform
from .augment import Compose, GaussianNoise, RandomFlip, RandomIntensity, RandomRot90, SeededTransform, seeded
from .collate import Collate, MixedBatchError, MixedBatchWarning, collate
from .dataset import Mode, PatchDataset
from .normalize import Normalize, Scheme
from .options import Backend, ReadOptions
from .resume import StoreChangedError
from .samplers import ShardBy, ShuffleSampler, StratifiedSampler
from .selection import Selection, SelectionKeywords

__all__ = [
    "Backend",
    "ChannelStats",
    "ClassInfo",
    "Collate",
    "Compose",
    "DatasetStats",
    "GaussianNoise",
    "IndexItem",
    "MixedBatchError",
    "MixedBatchWarning",
    "Mode",
    "MonaiTransform",
    "Normalize",
    "PatchDataset",
    "RandomFlip",
    "RandomIntensity",
    "RandomRot90",
    "ReadOptions",
    "Region",
    "Scheme",
    "SeededTransform",
    "Selection",
    "SelectionKeywords",
    "ShardBy",
    "ShuffleSampler",
    "StoreChangedError",
    "StoreView",
    "StratifiedSampler",
    "TorchioTransform",
    "class_names",
    "collate",
    "open_store",
    "seeded",
]
