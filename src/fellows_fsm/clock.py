"""The injected clock: every decision reads the time through a Clock, looked up at call time.

Deadlines are data (wall-clock seconds since the epoch), so they survive a restart and tests can freeze
or move time with freezegun. Never capture ``time.time`` at import or definition time.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Anything that tells the current wall-clock time in seconds since the epoch."""

    def now(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...


class SystemClock:
    """The real clock; ``time.time`` is looked up on every call, so freezegun can patch it."""

    def now(self) -> float:
        """Return ``time.time()`` as of this call."""
        return time.time()
