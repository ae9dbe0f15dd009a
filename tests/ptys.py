"""Waiting on a pseudo-terminal's master end, for the tests that drive labzarr on a pty."""
from __future__ import annotations

import select


def readable(fd: int, timeout_s: float) -> bool:
    """Whether `fd` has output (or has hung up) within `timeout_s` seconds.

    poll, not select: select refuses descriptors numbered 1024 and up, which a long pytest worker reaches."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))
