"""`inspect`'s table of stored bytes per array: one pass over the store's files, the same numbers as a pass per
array (which a store of many arrays made quadratic)."""

from __future__ import annotations

import numpy as np
import pytest

from labzarr.convert.qc.describe import _stored, _stored_by_array, describe_store
from labzarr.store import open_store, open_transport


@pytest.mark.parametrize("fixture", ["converted_demo", "converted_images", "converted_seg"])
def test_stored_bytes_per_array_equal_a_pass_per_array(fixture: str, request: pytest.FixtureRequest) -> None:
    d = request.getfixturevalue(fixture)[0]
    view = open_store(d.store)
    sizes = open_transport(view.path, view.storage_options).sizes()
    # the items' arrays, and the groups above them (a sample's group holds its roles' arrays): nested prefixes
    arrays = {i.array for i in view.items} | {r.rsplit("/", 1)[0] for i in view.items for r in i.roles.values()}
    got = _stored_by_array(sizes, arrays)
    assert got == {a: _stored(sizes, f"{a}/") for a in arrays}
    assert all(got[i.array] > 0 for i in view.items)


def _per_item_table(view) -> list[str]:
    """The item rows as `describe_store` wrote them before it read the index's columns: item by item."""
    sizes = open_transport(view.path, view.storage_options).sizes()
    on_disk = {a: _stored(sizes, f"{a}/") for a in {i.array for i in view.items}}
    lines = []
    for item in view.items:
        raw = int(np.prod(item.shape)) * np.dtype(item.dtype).itemsize
        disk = on_disk[item.array] if item.slot is None else 0
        ratio = f"{raw / disk:.2f}" if disk else "-"
        where = item.array if item.slot is None else f"{item.array}[{item.slot}]"
        stored = f"{disk:,}" if disk else "-"
        lines.append(f"{item.item_id:<16} {where:<28} {'x'.join(map(str, item.shape)):<18} {item.dtype:<8} "
                     f"{stored:>10} {ratio:>6}  {', '.join(f'{k}={v}' for k, v in item.labels.items())}".rstrip())
    return lines


@pytest.mark.parametrize("fixture", ["converted_demo", "converted_images", "converted_seg"])
def test_the_table_from_the_columns_is_the_per_item_table(fixture: str, request: pytest.FixtureRequest) -> None:
    d = request.getfixturevalue(fixture)[0]
    view = open_store(d.store)
    want = _per_item_table(view)
    got = describe_store(view).splitlines()
    assert got[6:6 + len(want)] == want and len(want) == len(view.items)
    if fixture == "converted_demo":  # labels shown where there are
        assert all("cell_type=" in line for line in want)
