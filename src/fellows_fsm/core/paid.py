"""A dispatch's paid run, sans I/O: what a paid lane says of its job at one poll (``PaidLook``), what the journal
keeps of it (``PaidRun``: its GPU-hours and cost, so far and at worst), what a step journals of it (``PaidMark``),
and the budget check the ladder's last rung asks (``Gate``). Which row a look fires is the table's (paid_tail.py).

A paid run's GPU-hours are its GPUs times the time it was followed running (from the first poll that saw it
running, or the lane's own run time when it reports one, to the poll that saw it end); its worst case is its GPUs
times its time limit (a job with no limit has no bound). Its cost is GPU-hours times its lane's
``price_per_gpu_hour`` (None when the lane has no price).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import attrs

from fellows_fsm.core.vocab import PaidStatus

if TYPE_CHECKING:
    from fellows_fsm.core.dispatch import Dispatch
    from fellows_fsm.core.lane import LaneDispatch
    from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "LIVE_PAID",
    "Gate",
    "PaidLook",
    "PaidMark",
    "PaidRun",
    "budget_allows",
    "budget_fits",
    "budget_newly_refused",
    "budget_note",
    "budget_refused",
    "keep_budget_wait",
    "keep_leave_last_rung",
    "pin_budget_fits",
    "pin_budget_newly_refused",
    "pin_budget_refused",
    "worst_gpu_hours",
]

LIVE_PAID = frozenset(
    {PaidStatus.STARTING, PaidStatus.QUEUED, PaidStatus.RUNNING, PaidStatus.CANCELLING, PaidStatus.UNFOLLOWED}
)
"""A paid run in one of these may still spend: its worst case counts against the budget."""


@attrs.frozen
class PaidLook:
    """Where one dispatch's paid job stands, as its lane said at one poll."""

    status: PaidStatus
    note: str = ""
    """The rest of the lane's line (a command lane's status line after its word; the API's message): shown."""
    run_seconds: float | None = None
    """How long the job has run, if the lane reports it itself (the Batch API's runDuration): preferred."""


@attrs.frozen
class PaidMark:
    """What a paid step journals of its run (the paid_runs row), in the step's transaction: the status the step
    leaves, and the facts the driver adds (its lane, GPUs, limit and price at the handoff; its times)."""

    status: str
    lane: str = ""
    gpus: int = 0
    limit_seconds: float | None = None
    price_per_gpu_hour: float | None = None
    run_seconds: float | None = None
    """The run time so far, when the lane reports it (kept as the run's length)."""
    note: str = ""


@attrs.frozen
class PaidRun:
    """One dispatch's paid run as the journal keeps it."""

    dispatch_id: str
    lane: str
    handed_at: float
    """When its handoff began (the day and month its GPU-hours count in)."""
    gpus: int
    limit_seconds: float | None
    price_per_gpu_hour: float | None
    status: str
    running_at: float | None = None
    """When a poll first saw it running (None: never seen running)."""
    ended_at: float | None = None
    run_seconds: float | None = None
    """The lane's own run time, when it reported one (wins over running_at..ended_at)."""
    note: str = ""

    @property
    def live(self) -> bool:
        """May it still spend (handing off, queued, running, being cancelled, or handed to a lane that cannot be
        followed: counted at its worst case for ever)?"""
        return self.status in LIVE_PAID

    def seconds(self, now: float) -> float:
        """How long it ran (so far, while it runs)."""
        if self.run_seconds is not None:
            return max(0.0, self.run_seconds)
        if self.running_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else now
        return max(0.0, end - self.running_at)

    def gpu_hours(self, now: float) -> float:
        """Its GPU-hours so far (all of them once it ended)."""
        return self.gpus * self.seconds(now) / 3600.0

    @property
    def bound_gpu_hours(self) -> float:
        """Its worst case: GPUs times its time limit (inf with no limit)."""
        return worst_gpu_hours(self.gpus, self.limit_seconds)

    def committed_gpu_hours(self, now: float) -> float:
        """What it counts against a budget: its worst case while it may still spend, what it ran once ended."""
        return max(self.bound_gpu_hours, self.gpu_hours(now)) if self.live else self.gpu_hours(now)

    def cost(self, now: float) -> float | None:
        """Its cost so far (None: its lane has no price)."""
        return None if self.price_per_gpu_hour is None else self.price_per_gpu_hour * self.gpu_hours(now)

    @property
    def bound_cost(self) -> float | None:
        """Its worst-case cost (None: no price; inf: no limit)."""
        return None if self.price_per_gpu_hour is None else self.price_per_gpu_hour * self.bound_gpu_hours


def worst_gpu_hours(gpus: int, limit_seconds: float | None) -> float:
    """A paid run's worst case: GPUs times its time limit (inf with no limit; zero GPUs cost nothing)."""
    if gpus <= 0:
        return 0.0
    return math.inf if limit_seconds is None else gpus * limit_seconds / 3600.0


class Gate(Protocol):
    """The budget as the driver counts it this tick (what is used, from the journal, and what is reserved by
    dispatches on their way to a paid lane): asked by the last free rung before it is left for the paid lane."""

    @property
    def refuse(self) -> bool:
        """``on_budget = "refuse"``: a dispatch its budget cannot take ends NO_BUDGET instead of waiting."""
        ...

    def refusal(self, dispatch_id: str, spec: JobSpec) -> str | None:
        """Why this dispatch's paid run would pass the budget (one line), or None if it fits (or already holds
        its reservation)."""
        ...

    def take(self, dispatch_id: str, spec: JobSpec) -> None:
        """Reserve its worst case (it is leaving its last free rung for the paid lane)."""
        ...


# ----------------------------------------------------------------- the budget's guards (rows of lifecycle.py)
def _last_rung_gate(d: Dispatch) -> Gate | None:
    """The budget a dispatch on the last free rung of its walk asks before the paid lane (None: no budget, or
    not its last rung: a dispatch with no paid lane after its ladder has no gate)."""
    gate = d.paid_gate
    if gate is None or d.rung_index != len(d.ladder.rungs) - 1:
        return None
    return gate


def budget_allows(d: Dispatch) -> bool:
    """May it leave its last free rung (no budget, ``on_budget = "refuse"``, or its worst case fits)?"""
    gate = _last_rung_gate(d)
    return gate is None or gate.refuse or gate.refusal(d.id, d.spec) is None


def budget_fits(d: Dispatch) -> bool:
    """Does its paid run's worst case fit the budget (or is it already reserved, or is there no budget)?"""
    gate = _last_rung_gate(d)
    return gate is None or gate.refusal(d.id, d.spec) is None


def budget_refused(d: Dispatch) -> bool:
    """With ``on_budget = "refuse"``: would its paid run pass the budget?"""
    gate = _last_rung_gate(d)
    return gate is not None and gate.refuse and gate.refusal(d.id, d.spec) is not None


def budget_newly_refused(d: Dispatch) -> bool:
    """Waiting on its last free rung (``on_budget = "wait"``): does the budget refuse it for a reason not yet
    journaled (the step says why it waits, once per reason)?"""
    gate = _last_rung_gate(d)
    if gate is None or gate.refuse:
        return False
    reason = gate.refusal(d.id, d.spec)
    return reason is not None and reason != d.budget_note


# The budget changes with nothing new seen of the job: a row it refused is asked again at every look.
for _guard in (budget_allows, budget_fits, budget_newly_refused):
    _guard.until = lambda d: d.now  # type: ignore[attr-defined]


def _pin_gate(d: Dispatch | LaneDispatch) -> Gate | None:
    """The budget a dispatch pinned straight to a paid lane asks before its command starts (None: a ladder
    dispatch, which asks on its last free rung; or no budget)."""
    return d.paid_gate if d.ladder is None else None


def pin_budget_fits(d: Dispatch | LaneDispatch) -> bool:
    """Pinned straight to a paid lane: does its paid run's worst case fit the budget (or is there none)?"""
    gate = _pin_gate(d)
    return gate is None or d.spec is None or gate.refusal(d.id, d.spec) is None


def pin_budget_refused(d: Dispatch | LaneDispatch) -> bool:
    """Pinned straight to a paid lane, with ``on_budget = "refuse"``: would its paid run pass the budget?"""
    gate = _pin_gate(d)
    return gate is not None and gate.refuse and not pin_budget_fits(d)


def pin_budget_newly_refused(d: Dispatch | LaneDispatch) -> bool:
    """Pinned straight to a paid lane, with ``on_budget = "wait"``: does the budget refuse it for a reason not yet
    journaled (the step says why it waits, once per reason)?"""
    gate = _pin_gate(d)
    if gate is None or gate.refuse or d.spec is None:
        return False
    reason = gate.refusal(d.id, d.spec)
    return reason is not None and reason != d.budget_note


def budget_note(d: Dispatch | LaneDispatch) -> str:
    """Why the budget keeps it from the paid lane (the step's note; status and history show it)."""
    gate = d.paid_gate
    reason = gate.refusal(d.id, d.spec) if gate is not None and d.spec is not None else None
    return reason or d.note


def keep_budget_wait(d: Dispatch | LaneDispatch) -> None:
    d.budget_note = d.history[-1].note


def keep_leave_last_rung(d: Dispatch) -> None:
    """It leaves its last free rung for the paid lane: its worst case is reserved (live only: a replay has no
    gate; the driver counts a recovered one from its state)."""
    gate = _last_rung_gate(d)
    if gate is not None:
        gate.take(d.id, d.spec)
