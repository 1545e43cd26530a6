"""The injected clock: every decision reads the time through a Clock, looked up at call time.

Deadlines are data (wall-clock seconds since the epoch), so they survive a restart and tests can freeze
or move time with freezegun. Never capture ``time.time`` at import or definition time. ``iso_utc`` is the one
text form of such a time in JSON.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock", "iso_utc"]


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


def iso_utc(at: float) -> str:
    """``at`` (epoch seconds) as an ISO-8601 UTC string, e.g. ``2026-11-30T12:00:00+00:00``."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
