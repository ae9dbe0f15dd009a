"""Whether a spec's store can be reached before any work starts: one clear error instead of a traceback later.

A folder needs no check here (the run's first write reports a folder problem); a URL store's bucket is listed
with quick retries, and each way that fails gets its own message and fix.
"""

from __future__ import annotations

from labzarr.store import Location

from .errors import UsageError

__all__ = ["check_reachable"]


def check_reachable(store: Location) -> None:
    """Raise one `UsageError` unless `store` can be reached: a URL store's bucket (or the URL's first component)
    is listed (`Location.probe`); a folder is checked by writing it."""
    bucket = str(store).partition("://")[2].split("/", 1)[0]
    try:
        store.probe()
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
