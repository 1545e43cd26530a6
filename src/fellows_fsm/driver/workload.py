"""The cluster's workload for ``park_early = "calibrated"``: read through the port at most once every few minutes.

The core never fetches it: the router asks this cache once per tick, the cache calls ``Scheduler.workload`` on its
lane's port only when its last read is older than ``refresh_seconds`` (and only while some dispatch waits on a rung
its ``calibrated`` policy decides), and the value goes to the core with the tick's observations.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.policy import CALIBRATED
from fellows_fsm.errors import SchedulerError
from fellows_fsm.scheduler.port import Workload

if TYPE_CHECKING:
    from fellows_fsm.lanes.slurm.lane import SlurmLane

__all__ = ["WORKLOAD_REFRESH_SECONDS", "WorkloadCache"]

log = logging.getLogger(__name__)

WORKLOAD_REFRESH_SECONDS = 300.0
"""How long one read of the history serves (five minutes: never per poll)."""


class WorkloadCache:
    """One ladder lane's cluster history, read again only once ``refresh_seconds`` have passed since the last read
    (or try), over ``[fellows] calibrated_history_seconds`` unless ``span_seconds`` says otherwise."""

    def __init__(
        self,
        lane: SlurmLane,
        *,
        span_seconds: float | None = None,
        refresh_seconds: float = WORKLOAD_REFRESH_SECONDS,
    ) -> None:
        self.lane = lane
        self.scheduler = lane.scheduler
        self.span_seconds = lane.config.calibrated_history_seconds if span_seconds is None else span_seconds
        self.refresh_seconds = refresh_seconds
        self.value: Workload | None = None
        self.reads = 0
        """Reads asked of the port (each is one sacct, one squeue and one scontrol on SLURM)."""
        self._tried_at: float | None = None

    def get(self, dispatches: Iterable[Dispatch], now: float) -> Workload | None:
        """The history for this tick, or None when no dispatch needs it (no read is made then)."""
        # The attribute first, in a plain loop: a scan of 10,000 dispatches that use another policy costs well under
        # a millisecond (the property, or a generator, asked of each costs several times that every tick).
        for d in dispatches:
            if d.park_early in CALIBRATED and d.calibrating and d.on_rung:
                break
        else:
            return self.value
        if self._tried_at is None or now - self._tried_at >= self.refresh_seconds:
            self._tried_at = now
            self.reads += 1
            try:
                self.value = self.scheduler.workload(since=now - self.span_seconds)
            except SchedulerError as exc:
                log.warning("the cluster's history could not be read (%s); calibrated waits as own-cap", exc)
        return self.value
