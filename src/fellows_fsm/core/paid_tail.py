"""The paid tail of the one table (lifecycle.py assembles it after the ladder's rows): a pinned dispatch's budget,
the lane command's start and end, the paid run its lane follows, and its two timers (queued too long, over its time
limit), each a guard with ``until`` like a rung's deadline. The driver tells a dispatch what it heard (effects.py's
``CommandEnd``: how its lane command ended; ``LaneSaid``: what its paid lane said of its job at a poll) and the
evaluator a look uses (machine.py: ``first_row``) picks the row; the driver only writes the step's words.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs

from fellows_fsm.core.effects import CommandEnd, DeletePaid
from fellows_fsm.core.paid import (
    PaidLook,
    budget_note,
    keep_budget_wait,
    pin_budget_newly_refused,
    pin_budget_refused,
)
from fellows_fsm.core.row import PAID, SAME, Row
from fellows_fsm.core.vocab import HandoffStatus, Outcome, PaidStatus, State, Trigger

if TYPE_CHECKING:
    from fellows_fsm.core.dispatch import Dispatch
    from fellows_fsm.core.lane import LaneDispatch

__all__ = [
    "ROWS",
    "LaneSaid",
    "command_not_started",
    "keep_delete_paid",
    "lost_since",
    "overrun",
    "past_time_limit",
    "queued_too_long",
]


@attrs.frozen
class LaneSaid:
    """What a followed paid lane said of one dispatch's job at a poll, and what its timers read."""

    look: PaidLook | None
    """None: the lane could not be looked at, or said nothing of it."""
    blind: bool = False
    """The lane could not be looked at at all (only a passed bound is acted on)."""
    queue_timeout: float | None = None
    """The lane's ``queue_timeout_seconds``."""
    stops_at_limit: bool = False
    """The lane stops a job at its time limit itself (Batch's maxRunDuration)."""
    interval: float = 0.0
    """The poll interval: at most this long until the next look."""
    limit: float | None = None
    """The job's time limit (None: no limit, no bound)."""
    seen_at: float | None = None
    """When a look last said where the job stands (None: never, by this driver)."""


def _said(d: Dispatch | LaneDispatch) -> LaneSaid | None:
    news = d.news
    return news if isinstance(news, LaneSaid) else None


def _lane_says(d: Dispatch | LaneDispatch, *words: PaidStatus) -> bool:
    """Does what its paid lane said match (or was nothing heard: the row is fired by hand, tests and tools)?"""
    news = d.news
    if news is None:
        return True
    return isinstance(news, LaneSaid) and news.look is not None and news.look.status in words


# ----------------------------------------------------------------- the guards (questions, no side effects)
def command_not_started(d: Dispatch | LaneDispatch) -> bool:
    """Has no lane command been started for it (no hand_off step: pinned to a lane, its command not yet run)?"""
    return not any(step.trigger in _COMMAND_STARTS for step in d.history)


_COMMAND_STARTS = frozenset({Trigger.HAND_OFF, Trigger.RE_RUN})


def _ended(d: Dispatch | LaneDispatch, status: HandoffStatus) -> bool:
    """Did its lane command end so (or was nothing heard: the row is fired by hand, tests and tools)?"""
    news = d.news
    return news is None or (isinstance(news, CommandEnd) and news.status == status)


def command_done(d: Dispatch | LaneDispatch) -> bool:
    """Did its lane command end well (exit 0, or found by the lane's probe)?"""
    return _ended(d, HandoffStatus.DONE)


def command_failed(d: Dispatch | LaneDispatch) -> bool:
    """Did its lane command end badly (a non-zero exit, or its timeout)?"""
    return _ended(d, HandoffStatus.FAILED)


def command_lost(d: Dispatch | LaneDispatch) -> bool:
    """Was its lane command's end lost (its wrapper killed before it could record it, and no probe to tell)?"""
    return _ended(d, HandoffStatus.UNKNOWN)


def lane_follows(d: Dispatch | LaneDispatch) -> bool:
    """Does its lane follow the job the command made (a paid lane with status)?"""
    news = d.news
    return news is None or (isinstance(news, CommandEnd) and news.followed)


def lane_does_not_follow(d: Dispatch | LaneDispatch) -> bool:
    """Is its lane one that cannot follow the job the command made (no status)?"""
    news = d.news
    return news is None or (isinstance(news, CommandEnd) and not news.followed)


def paid_job_queued(d: Dispatch | LaneDispatch) -> bool:
    """Does its paid lane say the job is queued?"""
    return _lane_says(d, PaidStatus.QUEUED)


def paid_job_running(d: Dispatch | LaneDispatch) -> bool:
    """Does its paid lane say the job runs?"""
    return _lane_says(d, PaidStatus.RUNNING)


def paid_job_succeeded(d: Dispatch | LaneDispatch) -> bool:
    """Does its paid lane say the job ended well?"""
    return _lane_says(d, PaidStatus.SUCCEEDED)


def paid_job_failed(d: Dispatch | LaneDispatch) -> bool:
    """Does its paid lane say the job failed?"""
    return _lane_says(d, PaidStatus.FAILED)


def paid_job_not_found(d: Dispatch | LaneDispatch) -> bool:
    """Does its paid lane have no trace of the job (a lost command's job never made, or one deleted outside)?"""
    return _lane_says(d, PaidStatus.GONE)


def paid_job_gone_outside(d: Dispatch | LaneDispatch) -> bool:
    """Does its paid lane say someone else cancelled or deleted the job?"""
    return _lane_says(d, PaidStatus.CANCELLED, PaidStatus.GONE)


def _queued_at(d: Dispatch | LaneDispatch) -> float:
    return d.history[-1].at if d.history else d.now


def queued_too_long(d: Dispatch | LaneDispatch) -> bool:
    """Has its paid job sat queued past its lane's ``queue_timeout_seconds`` (as a look says, not a blind poll)?"""
    said = _said(d)
    if said is None:
        return d.news is None  # (fired by hand)
    if said.blind or said.queue_timeout is None or d.state != State.PAID_QUEUED:
        return False
    return d.now - _queued_at(d) >= said.queue_timeout


def _stuck_until(d: Dispatch | LaneDispatch) -> float:
    said = _said(d)
    if said is None or said.queue_timeout is None or d.state != State.PAID_QUEUED:
        return math.inf
    return _queued_at(d) + said.queue_timeout


def lost_since(d: Dispatch | LaneDispatch) -> float | None:
    """When the lost command of a dispatch found by its lane's status (PAID_UNKNOWN, never seen queued since)
    started: the earliest its job may have started running; None for any other."""
    if not any(s.trigger == Trigger.PAID_UNKNOWN for s in d.history) or any(
        s.trigger == Trigger.PAID_FOUND for s in d.history
    ):
        return None
    return next((s.at for s in reversed(d.history) if s.trigger in (Trigger.HAND_OFF, Trigger.RE_RUN)), None)


def overrun(d: Dispatch | LaneDispatch) -> tuple[float, float, float, bool] | None:
    """Its paid job's time limit, when it started at the earliest, how long it ran, and whether it was unseen at
    this poll (None: no limit, or not known to have started). One not seen (its lane could not be looked at, or
    could not tell) counts as running from the earliest it may have started: the first look that saw it running,
    else the last look that saw it queued (a lost command's job: the command's start)."""
    said = _said(d)
    if said is None or said.limit is None:
        return None
    look = said.look
    started = next((s.at for s in reversed(d.history) if s.trigger == Trigger.PAID_START), None)
    unseen = look is None or look.status == PaidStatus.UNKNOWN
    if started is None and unseen and d.history:  # (queued when last seen: it may have started at once)
        last = d.history[-1].at
        started = max(last, said.seen_at if said.seen_at is not None else last)
    lost = lost_since(d)
    started = lost if lost is not None else started  # (a lost command's job may have started with it)
    if started is None:
        return None
    ran = look.run_seconds if look is not None and look.run_seconds is not None else d.now - started
    return said.limit, started, ran, unseen


def _overrun_after(d: Dispatch | LaneDispatch) -> tuple[float, float] | None:
    """(how long it ran, how long it may run before it is deleted): on a lane that does not stop it, up to one
    poll before its limit (the next poll would be past it); on one that does, two polls past it."""
    said, facts = _said(d), overrun(d)
    if said is None or facts is None:
        return None
    limit, _, ran, _ = facts
    return ran, (limit + 2 * said.interval if said.stops_at_limit else limit - said.interval)


def past_time_limit(d: Dispatch | LaneDispatch) -> bool:
    """Is its paid job about to run past its time limit (deleted, so no run passes the bound it was let in by)?"""
    said, after = _said(d), _overrun_after(d)
    if said is None:
        return d.news is None  # (fired by hand)
    if after is None:
        return False
    ran, bound = after
    return ran > bound if said.stops_at_limit else ran >= bound


def _overrun_until(d: Dispatch | LaneDispatch) -> float:
    after = _overrun_after(d)
    return math.inf if after is None else d.now + max(0.0, after[1] - after[0])


# The paid timers are guards that read the clock, like a rung's deadline: when each may change its answer.
queued_too_long.until = _stuck_until  # type: ignore[attr-defined]
past_time_limit.until = _overrun_until  # type: ignore[attr-defined]
# Guards on what the driver heard: their rows are told (a look never asks them), and asked when it hears (heard).
for _guard in (
    command_done,
    command_failed,
    command_lost,
    paid_job_queued,
    paid_job_running,
    paid_job_succeeded,
    paid_job_failed,
    paid_job_not_found,
    paid_job_gone_outside,
    queued_too_long,
    past_time_limit,
):
    _guard.heard = True  # type: ignore[attr-defined]


def keep_delete_paid(d: Dispatch | LaneDispatch) -> None:
    d.effects.append(DeletePaid(d.id))


# ----------------------------------------------------------------- the rows
T = Trigger
_HO, _PQ, _PR, _PU = State.HANDING_OFF, State.PAID_QUEUED, State.PAID_RUNNING, State.PAID_UNKNOWN
_RUN_CMD, _DONE_CMD = HandoffStatus.STARTED, HandoffStatus.DONE
_FAILED_CMD, _UNKNOWN_CMD = HandoffStatus.FAILED, HandoffStatus.UNKNOWN
_FAILED, _UNKNOWN = Outcome.HANDOFF_FAILED, Outcome.HANDOFF_UNKNOWN
_WAITS, _NO_BUDGET, _PAID_OUT = Outcome.BUDGET, Outcome.NO_BUDGET, Outcome.WITHDRAWN_OUTSIDE
_WAIT_STEP = (budget_note, keep_budget_wait)
_P = PaidStatus
_UNF, _DEL = PaidStatus.UNFOLLOWED, PaidStatus.CANCELLING
_DONE_UNFOLLOWED, _LOST_UNFOLLOWED = (command_done, lane_does_not_follow), (command_lost, lane_does_not_follow)
_HANDED, _OVERRUN, _PF = Outcome.HANDED_OFF, Outcome.PAID_OVERRUN, PaidStatus.FAILED
_TOLD = (None, None, True)  # (no note or bookkeeping of its own; told: a look never asks it, what is heard does)
_DELETE = (None, keep_delete_paid)  # (no note of its own: the driver writes why; its one delete: DeletePaid)
ROWS: tuple[Row, ...] = (
    # Pinned straight to a lane: the [budget] a walk asks on its last free rung is asked before its command starts.
    Row(T.NO_BUDGET, _HO, State.NO_BUDGET, (command_not_started, pin_budget_refused), budget_note, outcome=_NO_BUDGET),
    Row(T.BUDGET_WAIT, _HO, SAME, (command_not_started, pin_budget_newly_refused), *_WAIT_STEP, outcome=_WAITS),
    # After the ladder (or pinned straight to a lane): the lane's command starts once, journaled first with its
    # argv, and run by the driver; a lost one the lane's probe finds no job of runs again; then how it ended.
    Row(T.HAND_OFF, State.FAILED_TO_GCP, _HO, told=True, command=_RUN_CMD, paid=_P.STARTING),
    Row(T.HAND_OFF, _HO, SAME, told=True, command=_RUN_CMD, paid=_P.STARTING),  # pinned, or none journaled yet
    Row(T.RE_RUN, _HO, SAME, told=True, command=_RUN_CMD, paid=_P.STARTING),
    Row(T.NO_LANE, State.FAILED_TO_GCP, State.NO_LANE_LEFT, told=True, outcome=Outcome.NO_FALLBACK),
    # A lane with no status to follow its job by: handed off is final (its run counted at its worst case).
    Row(T.HANDED_OFF, _HO, State.HANDED_OFF, _DONE_UNFOLLOWED, *_TOLD, _HANDED, _DONE_CMD, _UNF),
    Row(T.HANDOFF_FAILED, _HO, State.HANDOFF_FAILED, (command_failed,), *_TOLD, _FAILED, _FAILED_CMD, _P.FAILED),
    Row(T.HANDOFF_UNKNOWN, _HO, State.HANDOFF_UNKNOWN, _LOST_UNFOLLOWED, *_TOLD, _UNKNOWN, _UNKNOWN_CMD, _UNF),
    # A lost command on a lane with status: followed by it (counted at its worst case till it tells; cancellable).
    Row(T.PAID_UNKNOWN, _HO, _PU, (command_lost, lane_follows), told=True, command=_UNKNOWN_CMD, paid=_P.STARTING),
    # A followed paid lane has the job: it is live until the lane says it ended (each poll's one look per lane).
    Row(T.PAID, _HO, _PQ, (command_done, lane_follows), told=True, command=_DONE_CMD, paid=_P.QUEUED),
    Row(T.PAID_FOUND, _PU, _PQ, (paid_job_queued,), told=True, paid=_P.QUEUED),
    Row(T.PAID_START, _PQ, _PR, (paid_job_running,), told=True, paid=_P.RUNNING),
    Row(T.PAID_START, _PU, _PR, (paid_job_running,), told=True, paid=_P.RUNNING),
    Row(T.PAID_END, PAID, State.PAID_DONE, (paid_job_succeeded,), *_TOLD, Outcome.PAID_DONE, paid=_P.SUCCEEDED),
    Row(T.PAID_FAIL, PAID, State.PAID_FAILED, (paid_job_failed,), *_TOLD, Outcome.PAID_FAILED, paid=_P.FAILED),
    # A lost command's job its status does not find: unknown for ever. Deleted outside: never made again.
    Row(T.HANDOFF_UNKNOWN, _PU, State.HANDOFF_UNKNOWN, (paid_job_not_found,), told=True, outcome=_UNKNOWN, paid=_UNF),
    Row(T.PAID_GONE, PAID, State.WITHDRAWN, (paid_job_gone_outside,), told=True, outcome=_PAID_OUT, paid=_P.CANCELLED),
    # Its timers (guards with ``until``, asked at each poll's answer): queued past its lane's queue_timeout_seconds,
    # deleted (journaled first), never a second paid job; running past its time limit on a lane that does not stop
    # it, or unseen (its lane cannot be looked at) for longer than its limit, deleted (a delete by name needs no
    # look), so no run passes its bound.
    Row(T.PAID_STUCK, _PQ, State.PAID_FAILED, (queued_too_long,), *_DELETE, True, Outcome.PAID_STUCK, paid=_DEL),
    Row(T.PAID_OVERRUN, PAID, State.PAID_FAILED, (past_time_limit,), *_DELETE, True, _OVERRUN, paid=_DEL),
)
