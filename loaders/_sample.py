"""What a PatchDataset returns for one key: a dict of role tensors and the sample's facts (item, origin, label)."""

from __future__ import annotations

from typing import Any

Sample = dict[str, Any]
