"""Time nobody watched: a tick that comes long after it was due stops every walking window's clock from then.

A rung is tried only while a driver watches it, so a free rung is never passed over for time nobody watched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.driver.executor import Executor

__all__ = ["UNWATCHED_SLACK_SECONDS", "unwatched"]

log = logging.getLogger(__name__)

UNWATCHED_SLACK_SECONDS = 1.0
"""A tick later than two poll intervals and this many seconds past its time means nobody watched the journal."""


def unwatched(live: Collection[Dispatch], executor: Executor, *, now: float, interval: float, due: float) -> bool:
    """Pause every dispatch of ``live`` from ``due`` if the tick due then comes only ``now``, much later; True if
    it paused anything (``Router.catch_up``)."""
    if now - due <= max(2 * interval, UNWATCHED_SLACK_SECONDS) or not live:
        return False
    since = time.strftime("%H:%M:%S", time.localtime(due))
    why = f"no driver watched from {since} for {now - due:.0f} s; the windows wait for that time"
    log.warning("no tick since %s (%.0f s): every window moves later by that time", since, now - due)
    executor.pause(live, due, why=why)
    return True
