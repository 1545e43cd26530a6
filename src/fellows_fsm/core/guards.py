"""The guards: the questions the transition table asks of a dispatch (machine.py names them; no side effects).

Each reads only the dispatch's own state and ``now``, the time of the event being handled: never a clock, never
the cluster. ``Dispatch`` (dispatch.py) has them as methods through this mixin.
"""

from __future__ import annotations

from typing import Any

from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.policy import park_early_reason
from fellows_fsm.core.vocab import FIXED_STATES
from fellows_fsm.scheduler import History, JobSpec, Observation, Phase, ReasonGroup

__all__ = ["OFF_RUNG", "Guards"]

OFF_RUNG = frozenset(FIXED_STATES)
"""The states in which a dispatch is not on a rung."""


class Guards:
    """The table's questions; the state they read is declared here and kept by Dispatch."""

    ladder: Ladder
    spec: JobSpec
    pinned: bool
    park_early: str
    park_early_last_rung: bool
    state: str
    rung_index: int
    job_id: str | None
    deadline: float
    observation: Observation | None
    cluster_history: History | None
    look: Observation | None
    submit_uncertain: bool
    refused: bool
    moved: bool
    held: bool
    deferred: bool
    first_seen: tuple[str | None, int | None] | None
    paused: bool
    now: float
    changing: bool
    leaving: bool

    @property
    def rung(self) -> Rung:
        """The rung the dispatch is on, or is leaving while PARKED or CANCELLED."""
        return self.ladder.rungs[self.rung_index]

    @property
    def on_rung(self) -> bool:
        """True while the dispatch is on a rung (SUBMITTED or RESUBMITTED)."""
        return self.state not in OFF_RUNG

    def walks_ladder(self, event: Any = None) -> bool:
        """Is this dispatch allowed to leave its first rung at all (not pinned)?"""
        return not self.pinned

    def may_change_rung(self, event: Any = None) -> bool:
        """Is a rung change allowed in this tick (the driver's bound on resubmits per tick)?"""
        return self.changing

    def may_leave_rung(self, event: Any = None) -> bool:
        """Is a park allowed in this tick (the driver's bound on rung changes begun per tick)?"""
        return self.leaving

    def rung_expired(self, event: Any = None) -> bool:
        """Has the current rung's window closed (now >= its deadline)?"""
        return self.now >= self.deadline

    def rung_cannot_start(self, event: Any = None) -> bool:
        """Does the latest pending reason prove this rung can never start the job?"""
        obs = self.look
        return (
            obs is not None
            and obs.phase is Phase.PENDING
            and obs.reason_group in (ReasonGroup.NEVER_FITS, ReasonGroup.INVALID)
        )

    def cannot_start_in_window(self, event: Any = None) -> bool:
        """Does the ``park_early`` policy say the job cannot start on this rung before its window closes?"""
        return self.early_park_reason() is not None

    def early_park_reason(self) -> str | None:
        """The ``park_early`` policy's reason to leave the current rung now (policy.py), or None to wait."""
        if self.park_early == "off":
            return None
        last = self.rung_index == len(self.ladder.rungs) - 1
        if last and not self.park_early_last_rung and self.park_early != "calibrated":
            return None
        obs = self.look
        if obs is not None and obs.qos is not None and obs.qos != self.rung.qos:
            return None  # a look taken before an in-place move says nothing about this rung
        return park_early_reason(
            self.park_early,
            obs,
            self.deadline,
            last_rung=last,
            last_rung_too=self.park_early_last_rung,
            history=self.cluster_history,
            gpus=self.spec.gpus,
            now=self.now,
        )

    @property
    def calibrating(self) -> bool:
        """Is this dispatch on its last rung under ``calibrated`` (whose chance moves with time, not only looks)?"""
        return self.park_early == "calibrated" and self.rung_index == len(self.ladder.rungs) - 1

    def job_known(self, event: Any = None) -> bool:
        """Is the rung's job, if one was queued, known (no submit whose answer was lost is outstanding)?"""
        return not self.submit_uncertain

    def job_started(self, event: Any = None) -> bool:
        """Was the current job seen running (or having run)?"""
        obs = self.look
        return obs is not None and obs.phase is Phase.STARTED

    def job_ended_by_others(self, event: Any = None) -> bool:
        """Was the current job cancelled outside the router, or dropped while someone held it?"""
        obs = self.look
        return obs is not None and obs.phase is Phase.GONE and (obs.ended_by_others or self.held or self.deferred)

    def moved_by_others(self) -> list[str]:
        """What someone else changed on the current pending job, as SLURM reports it ([] when nothing): its QoS
        (not the rung's), its partition or its time limit (not what it was first seen with, or submitted with)."""
        obs = self.look
        if obs is None or obs.phase is not Phase.PENDING:
            return []
        changes = []
        if obs.qos is not None and obs.qos != self.rung.qos:
            changes.append(f"QoS {self.rung.qos} -> {obs.qos}")
        first_partition, first_limit = self.first_seen or (None, None)
        if first_partition is not None and obs.partition is not None and obs.partition != first_partition:
            changes.append(f"partition {first_partition} -> {obs.partition}")
        asked = self.spec.time_limit_seconds
        # SLURM keeps a time limit in whole minutes.
        expected = -(-asked // 60) * 60 if asked is not None else first_limit
        if expected is not None and obs.time_limit_seconds is not None and obs.time_limit_seconds != expected:
            changes.append(f"time limit {expected // 60} min -> {obs.time_limit_seconds // 60} min")
        return changes

    def job_moved_by_others(self, event: Any = None) -> bool:
        """Is the current job newly seen moved by someone else (``scontrol update`` of its QoS, partition or
        time limit)?"""
        return not self.deferred and bool(self.moved_by_others())

    def job_not_moved(self, event: Any = None) -> bool:
        """Is the current job where the ladder put it (no one else moved it), so the ladder may walk it?"""
        return not self.deferred

    def job_held(self, event: Any = None) -> bool:
        """Is the current job newly seen held by its owner or an admin?"""
        obs = self.look
        return not self.held and obs is not None and obs.phase is Phase.PENDING and obs.reason_group is ReasonGroup.HELD

    def job_released(self, event: Any = None) -> bool:
        """Was the current job held, and is it now seen pending without the hold (or started)?"""
        obs = self.look
        return (
            self.held
            and obs is not None
            and obs.phase in (Phase.PENDING, Phase.STARTED)
            and obs.reason_group is not ReasonGroup.HELD
        )

    def window_running(self, event: Any = None) -> bool:
        """Is the ladder's clock running for this dispatch (not stopped by a controller outage)?"""
        return not self.paused

    def window_paused(self, event: Any = None) -> bool:
        """Is the ladder's clock stopped by a controller outage?"""
        return self.paused

    def job_not_held(self, event: Any = None) -> bool:
        """Is the current job free of any hold (so its window may walk it to the next rung)?"""
        return not self.held

    def moved_in_place(self, event: Any = None) -> bool:
        """Did slurmctld just accept the move of the parked, pending job to the next rung's QoS?"""
        return self.moved

    def job_gone(self, event: Any = None) -> bool:
        """Is the rung's job confirmed gone without starting (or was none queued: refused, or parked before one)?"""
        if self.job_id is None:
            return self.refused or not self.on_rung
        obs = self.look
        return obs is not None and obs.phase is Phase.GONE

    def _current(self) -> Observation | None:
        return self.look
