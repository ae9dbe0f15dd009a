"""Bad *usage* (a wrong spec, a missing folder, a locked store): one line, a hint, exit code 2."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A mistake the user can fix; the CLI prints `message` and `hint`, never a traceback."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint
