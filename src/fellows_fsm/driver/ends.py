"""The jobs that started, followed to their end: a tick looks at them at most once per follow interval (they ride
on the poll's one squeue, and a job that left squeue on its one batched sacct: slurm/observe.py), whatever their
number. Which row an end takes is the table's (core/ends.py); this only says when to look."""

from __future__ import annotations

import math
from collections.abc import Iterable

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.vocab import FOLLOWED_STATES

__all__ = ["Follow"]


class Follow:
    """When a tick looks at the dispatches whose job runs (RUNNING, REQUEUED): at the first tick, then once per
    ``interval`` (``[router] follow_interval_seconds``); the others are looked at every tick."""

    def __init__(self, interval: float, poll: float) -> None:
        self.interval = interval
        self.slack = min(interval, poll) / 2  # a poll that comes a little early still follows
        self.due = -math.inf

    def looked_at(self, live: Iterable[Dispatch], now: float) -> list[Dispatch]:
        """The dispatches this tick looks at: every one when following is due, else all but the running ones."""
        dispatches = list(live)
        if now >= self.due:
            if any(d.state in FOLLOWED_STATES for d in dispatches):
                self.due = now + self.interval - self.slack
            return dispatches
        return [d for d in dispatches if d.state not in FOLLOWED_STATES]
