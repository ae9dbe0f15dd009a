"""Stores at an fsspec URL (`s3://bucket/prefix/x.zarr`): the object-store commit protocol, and its reachability.

A filesystem store commits an array by renaming a staged folder into place
(`store.py`, through `labzarr.store.Folder`). Object stores have no rename, hard
link, fsync or flock, so a URL store commits differently; `labzarr.store.UrlStore`
carries out its half of each step, and this docstring is the protocol:

1. A volume (or a sample's role) is written directly at its final path, after
   every key of an older version under that path is deleted. Until step 3 the
   array has no `complete` attr, so neither resume nor `verify` trusts it.
2. Once written, every chunk (shard) object is checked present by listing the
   array's prefix (every chunk is written, also all-fill ones, as on disk).
3. `content_sha256`, then `complete` are set (one PUT of `zarr.json` each, an
   atomic replace on S3): the array is whole. A task of a dead run never gets
   here (the lock object no longer names its run).
4. A stack of 2D images is staged under `.labzarr/staging/` (shards carried
   from the installed stack are copied server-side instead of hard-linked), and
   installed by deleting the old version, copying every key but `zarr.json`
   server-side, checking every shard present at the final path, and copying the
   staged `zarr.json` (with `complete`) last.
5. The root's index is written last, once the run's rows are final: a reader
   that goes through the index and checks `complete` sees only whole arrays of
   a finished run.

What is weaker than on a filesystem: while a rerun replaces an array, that
array is missing or partial (a filesystem swaps it in one rename), so a store
should not be read while it is being converted. The lock is an object created
with a conditional PUT (`If-None-Match: *`), which S3 and moto honour: a second
run is refused at once. Nothing drops it when its holder dies, so a lock left
by a dead run on this host is taken over (the pid is checked), but one left by
a run on another host must be deleted by hand (the error names the object).
Sweeping leftovers (staged stacks) works by listing `.labzarr/staging/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fsspec

from labzarr.store import Location, UrlStore

from .errors import UsageError

__all__ = ["check_reachable"]

# The reachability probe gives up quickly: botocore's and s3fs's retries would take ~10 s on a dead endpoint.
_PROBE_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    "s3": {"config_kwargs": {"retries": {"max_attempts": 2}, "connect_timeout": 10}},
}


def check_reachable(store: Location) -> None:
    """Raise one `UsageError` unless `store`'s bucket (or the URL's first component) can be listed; a folder is
    checked by writing it."""
    if not isinstance(store, UrlStore):
        return
    bucket = store.path.split("/", 1)[0]
    try:
        fs = fsspec.filesystem(store.protocol, **{"skip_instance_cache": True, "use_listings_cache": False,
                                                  **_PROBE_OPTIONS.get(store.protocol, {}), **store.options})
        fs.ls(bucket, detail=False)
    except ImportError as exc:
        raise UsageError(f"{store}: no fsspec implementation for {store.protocol}:// ({exc})",
                         "install it, e.g. pip install 'labzarr[s3]' for s3://") from exc
    except FileNotFoundError as exc:
        raise UsageError(f"{store}: bucket {bucket!r} not found ({exc})",
                         "create the bucket first, or fix [delivery] store") from exc
    except PermissionError as exc:
        raise UsageError(f"{store}: access denied ({exc})",
                         "check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or [store] "
                         "storage_options)") from exc
    except Exception as exc:  # noqa: BLE001 - botocore's connection errors share no base class with OSError
        raise UsageError(f"{store}: cannot reach the object store ({type(exc).__name__}: {exc})",
                         "check the endpoint (AWS_ENDPOINT_URL, or [store] storage_options endpoint_url) "
                         "and the network") from exc
