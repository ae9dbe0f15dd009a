"""The manifest written a row at a time: the bytes `manifest_bytes` gives for the same rows and indexes.

A run's rows reach the manifest one at a time in manifest order (`run/row_spill.py`), never all held at once: each
line goes to a temporary file beside the manifest as it comes, its SHA-256 kept as it grows, and `commit` renames
the file into place (as `atomic_write`), so a reader never sees half a manifest.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from labzarr.store.location.folder import put_in_place, temp_beside

from .manifest import Row, manifest_cells, manifest_header

__all__ = ["ManifestFile"]

_FLUSH = 1 << 20  # characters of CSV gathered before they are encoded, hashed and written


class ManifestFile:
    """`manifest.csv` written a row at a time (`write`), then put in place (`commit`); `sha256` is its digest.

    The columns are `manifest_bytes`'s. Leaving the `with` block without `commit` removes the temporary file.
    """

    def __init__(self, path: Path, label_names: Sequence[str], role_names: Sequence[str] = (),
                 splits: Sequence[str] = (), metadata: Sequence[str] = ()) -> None:
        self.path = path
        self._columns = (tuple(label_names), tuple(role_names), tuple(splits), tuple(metadata))
        self._file, self._tmp = temp_beside(path)
        self._hash = hashlib.sha256()
        self._text = io.StringIO()
        self._csv = csv.writer(self._text, lineterminator="\n")
        self._csv.writerow(manifest_header(label_names, role_names, splits, metadata))

    def __enter__(self) -> ManifestFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not self._file.closed:
            self._file.close()
        self._tmp.unlink(missing_ok=True)

    def write(self, index: int, row: Row) -> None:
        """The next row (rows come in manifest order) and its `index`."""
        labels, roles, splits, metadata = self._columns
        self._csv.writerow(manifest_cells(index, row, labels, roles, splits, metadata))
        if self._text.tell() >= _FLUSH:
            self._flush()

    @property
    def sha256(self) -> str:
        """The SHA-256 of the manifest's bytes so far (all of them, once every row is written)."""
        self._flush()
        return self._hash.hexdigest()

    def commit(self) -> None:
        """Make the written file `path`, durably."""
        self._flush()
        put_in_place(self._file, self._tmp, self.path)

    def _flush(self) -> None:
        data = self._text.getvalue().encode("utf-8")
        self._text.seek(0)
        self._text.truncate()
        self._hash.update(data)
        self._file.write(data)
