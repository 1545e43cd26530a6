"""The injected clock: every decision reads the time through a Clock, looked up at call time.

Deadlines are data (wall-clock seconds since the epoch), so they survive a restart and tests can freeze
or move time with freezegun. Never capture ``time.time`` at import or definition time. ``iso_utc`` is the one
text form of such a time in JSON. ``SystemClock`` runs on the monotonic clock between the wall clock's steps
back, so no wait, interval or window ever grows by one (an NTP step on a laptop).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock", "iso_utc"]

log = logging.getLogger(__name__)


class Clock(Protocol):
    """Anything that tells the current wall-clock time in seconds since the epoch."""

    def now(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...


STEP_BACK_SLACK_SECONDS = 1.0
"""The wall clock moving back against the monotonic one by more than this is a step back, not a slew."""


class SystemClock:
    """The real clock: wall time as ``time.time`` and ``time.monotonic`` say at each call (looked up then, so
    freezegun can patch both), except that a step of the wall clock back is not followed.

    It keeps the offset of the wall clock from the monotonic one: a slew (small, either way) or a step forward
    moves the offset along (a step forward is time no driver watched: ``Router.catch_up`` counts it); a step back
    keeps the offset from before, so the time it tells runs on at the monotonic clock's pace, never backwards. A
    process that saw the step tells times ahead of the new wall clock by the step; a new process follows it.
    """

    def __init__(self) -> None:
        self._offset: float | None = None
        """The wall clock's offset from the monotonic one this clock follows (None before the first call)."""
        self._stepped: float | None = None
        """The offset of the last step back seen (said once in the log)."""

    def now(self) -> float:
        """The wall clock's time, as of this call, unless it stepped back since this clock last looked."""
        steady = time.monotonic()
        offset = time.time() - steady
        if self._offset is None or offset >= self._offset - STEP_BACK_SLACK_SECONDS:
            self._offset, self._stepped = offset, None
        elif self._stepped is None or abs(offset - self._stepped) > STEP_BACK_SLACK_SECONDS:
            self._stepped = offset
            log.warning(
                "the wall clock stepped back %.0f s; times and waits run on from before the step", self._offset - offset
            )
        return steady + self._offset


def iso_utc(at: float) -> str:
    """``at`` (epoch seconds) as an ISO-8601 UTC string, e.g. ``2026-11-30T12:00:00+00:00``."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
