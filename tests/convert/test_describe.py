"""`inspect`'s table of stored bytes per array: one pass over the store's files, the same numbers as a pass per
array (which a store of many arrays made quadratic)."""

from __future__ import annotations

import pytest

from labzarr.convert.qc.describe import _stored, _stored_by_array
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
