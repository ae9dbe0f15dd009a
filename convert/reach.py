"""Whether a spec's store can be reached before any work starts: one clear error instead of a traceback later.

A folder needs no check here (the run's first write reports a folder problem); a URL store's bucket is listed
with quick retries, and each way that fails gets its own message and fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fsspec

from labzarr.store import Location, UrlStore

from .errors import UsageError

__all__ = ["check_reachable"]

# The reachability probe gives up quickly: botocore's and s3fs's default retries keep a dead endpoint waiting.
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
