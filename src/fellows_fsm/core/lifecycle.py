"""The lifecycle: every transition a dispatch can take, and everything that decides one, in this one table.

``TABLE`` is read top to bottom the way a dispatch lives it: the ladder's rows here, then the paid tail's
(paid_tail.py: a pinned dispatch's budget, the lane command, the paid run and its timers), then a paid job's cancel.
Each row (row.py) is a trigger, a source, a destination, its guards (questions: plain functions of the dispatch,
reading only its own state, what the driver told it it heard (``news``) and ``d.now``) and what the step keeps.

On every look a dispatch asks its state's rows in table order and fires the first whose guards all hold, then looks
again, until none holds. transitions fires every step (machine.py runs it): it checks the row's guards again,
journals it (a Record effect, before anything it announces is done) and runs its bookkeeping. Told rows (``told``)
are never asked on a look: an event fires them (the first submit, an outage, a refusal, a user's cancel, Ctrl-C, the
lane command's start and re-run), or what the driver heard of a lane command's end or of a paid job asks them, in
table order, the way a look asks (machine.py: ``heard``; paid_tail.py: the guards on ``news``). A dispatch pinned
straight to a command lane (``submit --pin gcp``) has no ladder: ``pin``, then the paid tail's rows, fired by the
same engine on a LaneDispatch.

A rung's park deadline is decided here: ``window_deadline`` opens each window, ``rung_expired`` closes it, the
hold and pause steps move it; a paid job's timers are guards with ``until`` the same way (``queued_too_long``,
``past_time_limit``). What a user's cancel does is the ``recall`` row: journaled WITHDRAWN first, then every
job the dispatch got is scancelled (the CancelJobs effect, run by the driver).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from fellows_fsm.core import ends, paid_tail
from fellows_fsm.core.effects import Attach, CancelJobs, DeletePaid, HandOff
from fellows_fsm.core.ladder import Rung
from fellows_fsm.core.paid import (
    budget_allows,
    budget_fits,
    budget_newly_refused,
    budget_note,
    budget_refused,
    keep_budget_wait,
    keep_leave_last_rung,
)
from fellows_fsm.core.paid_tail import command_not_started
from fellows_fsm.core.policy import CALIBRATED, park_early_reason
from fellows_fsm.core.row import INITIAL, LIVE, NEXT_RUNG, PAID, RUNG, SAME, Row
from fellows_fsm.core.vocab import PAID_LIVE_STATES, Outcome, PaidStatus, State, Trigger
from fellows_fsm.scheduler.port import Phase, ReasonGroup

if TYPE_CHECKING:
    from fellows_fsm.core.dispatch import Dispatch
    from fellows_fsm.core.lane import LaneDispatch

__all__ = ["EARLY_PARK", "RECALLABLE", "TABLE", "TRIGGERS", "row_of", "window_deadline"]

EARLY_PARK = "park_early="
"""How the note of a park step decided by the ``park_early`` policy begins (the journal's mark of an early park)."""


def window_deadline(previous_deadline: float, entered_at: float, rung: Rung, *, carried: bool = False) -> float:
    """When a later rung's window closes: it opens when the previous one closed, or on entry if earlier, so the
    time to reach the last rung's end never exceeds the ladder's worst case (the sum of the caps) by more than a
    poll. ``carried``: the previous rung was left early by ``park_early``, and the rest of its window moves on with
    the job (this window opens when the previous one would have closed)."""
    if carried:
        return previous_deadline + rung.park_cap_seconds
    return min(previous_deadline, entered_at) + rung.park_cap_seconds


# ----------------------------------------------------------------- the guards (questions, no side effects)
_PENDING, _STARTED, _GONE, _HELD = Phase.PENDING, Phase.STARTED, Phase.GONE, ReasonGroup.HELD
_NEVER_STARTS = (ReasonGroup.NEVER_FITS, ReasonGroup.INVALID)  # (every look asks these; a tuple: no Enum hash)


def walks_ladder(d: Dispatch) -> bool:
    """Is this dispatch allowed to leave its first rung at all (not pinned)?"""
    return not d.pinned


def may_change_rung(d: Dispatch) -> bool:
    """Is a rung change allowed in this tick (the driver's bound on resubmits per tick)?"""
    return d.may_change_rung


def may_leave_rung(d: Dispatch) -> bool:
    """Is a park allowed in this tick (the driver's bound on rung changes begun per tick)?"""
    return d.may_leave_rung


def rung_expired(d: Dispatch) -> bool:
    """Has the current rung's window closed (now >= its deadline)?"""
    return d.now >= d.deadline


def rung_cannot_start(d: Dispatch) -> bool:
    """Does the latest pending reason prove this rung can never start the job?"""
    obs = d.look
    return obs is not None and obs.phase is _PENDING and obs.reason_group in _NEVER_STARTS


def early_park_reason(d: Dispatch) -> str | None:
    """The ``park_early`` policy's reason to leave the current rung now (policy.py), or None to wait."""
    if d.park_early == "off":
        return None
    last = d.rung_index == len(d.ladder.rungs) - 1
    if last and not d.park_early_last_rung and d.park_early not in CALIBRATED:
        return None
    obs = d.look
    if obs is not None and obs.qos is not None and obs.qos != d.ladder.rungs[d.rung_index].qos:  # (d.rung, inlined)
        return None  # a look taken before an in-place move says nothing about this rung
    later = d.ladder.rungs[d.rung_index + 1 :] if d.park_early in CALIBRATED else None  # only they read ladder_end
    return park_early_reason(
        d.park_early,
        obs,
        d.deadline,
        last_rung=last,
        last_rung_too=d.park_early_last_rung,
        workload=d.cluster_workload,
        gpus=d.spec.gpus,
        now=d.now,
        ladder_end=d.deadline + sum(r.park_cap_seconds for r in later) if later is not None else None,
    )


def cannot_start_in_window(d: Dispatch) -> bool:
    """Does the ``park_early`` policy say the job cannot start on this rung before its window closes?"""
    return early_park_reason(d) is not None


def job_known(d: Dispatch) -> bool:
    """Is the rung's job, if one was queued, known (no submit whose answer was lost is outstanding)?"""
    return not d.submit_uncertain


def job_started(d: Dispatch) -> bool:
    """Was the current job seen running (or having run)?"""
    obs = d.look
    return obs is not None and obs.phase is _STARTED


def job_ended_by_others(d: Dispatch) -> bool:
    """Was the current job cancelled outside the router, or dropped while moved, or held (but not by our deadline)?"""
    obs = d.look
    own = d.controller_deadline and obs is not None and obs.state.startswith("DEADLINE")
    return obs is not None and obs.phase is _GONE and (obs.ended_by_others or d.deferred or (d.held and not own))


def moved_by_others(d: Dispatch) -> list[str]:
    """What someone else changed on the current pending job, as SLURM reports it ([] when nothing): its QoS (not
    the rung's), its partition or its time limit (not what it was first seen with, or submitted with)."""
    obs = d.look
    if obs is None or obs.phase is not _PENDING:
        return []
    changes = []
    if obs.qos is not None and obs.qos != d.ladder.rungs[d.rung_index].qos:  # (d.rung, inlined: every look asks)
        changes.append(f"QoS {d.rung.qos} -> {obs.qos}")
    first_partition, first_limit = d.first_seen or (None, None)
    if first_partition is not None and obs.partition is not None and obs.partition != first_partition:
        changes.append(f"partition {first_partition} -> {obs.partition}")
    asked = d.spec.time_limit_seconds
    expected = -(-asked // 60) * 60 if asked is not None else first_limit  # SLURM keeps whole minutes
    if expected is not None and obs.time_limit_seconds is not None and obs.time_limit_seconds != expected:
        changes.append(f"time limit {expected // 60} min -> {obs.time_limit_seconds // 60} min")
    return changes


def job_moved_by_others(d: Dispatch) -> bool:
    """Is the current job newly seen moved by someone else (``scontrol update`` of its QoS, partition or time
    limit)?"""
    return not d.deferred and bool(moved_by_others(d))


def job_not_moved(d: Dispatch) -> bool:
    """Is the current job where the ladder put it (no one else moved it), so the ladder may walk it?"""
    return not d.deferred


def job_held(d: Dispatch) -> bool:
    """Is the current job newly seen held by its owner or an admin?"""
    obs = d.look
    return not d.held and obs is not None and obs.phase is _PENDING and obs.reason_group is _HELD


def job_released(d: Dispatch) -> bool:
    """Was the current job held, and is it now seen pending without the hold (or started)?"""
    obs = d.look
    return d.held and obs is not None and obs.phase in (_PENDING, _STARTED) and obs.reason_group is not _HELD


def job_not_held(d: Dispatch) -> bool:
    """Is the current job free of any hold (so its window may walk it to the next rung)?"""
    return not d.held


def window_running(d: Dispatch) -> bool:
    """Is the ladder's clock running for this dispatch (not stopped by a controller outage)?"""
    return d.paused_since is None


def window_paused(d: Dispatch) -> bool:
    """Is the ladder's clock stopped by a controller outage (or a time no driver watched)?"""
    return d.paused_since is not None


def moved_in_place(d: Dispatch) -> bool:
    """Did slurmctld just accept the move of the parked, pending job to the next rung's QoS?"""
    return d.moved


def job_gone(d: Dispatch) -> bool:
    """Is the rung's job confirmed gone without starting (or was none queued: refused, or parked before one)?"""
    if d.job_id is None:
        return d.refused or not d.on_rung
    return d.look is not None and d.look.phase is _GONE


# Guards that read the clock: when each may change its answer with nothing else new (the dispatch's wake time).
rung_expired.until = lambda d: d.deadline  # type: ignore[attr-defined]
cannot_start_in_window.until = lambda d: d.now if d.park_early in CALIBRATED and d.calibrating else math.inf  # type: ignore[attr-defined]
# Guards that are the per-tick bound on rung changes: a row refused only by one of them waits for a tick with room.
may_change_rung.per_tick = may_leave_rung.per_tick = True  # type: ignore[attr-defined]


# ----------------------------------------------------------------- what each step keeps
def _pause_note(d: Dispatch) -> str:
    return d.note or f"SLURM has not answered since {time.strftime('%H:%M:%S', time.localtime(d.now))}"


def _start_note(d: Dispatch) -> str:
    obs = d.look
    if obs is not None and obs.qos and obs.qos != d.rung.qos and d.on_rung:
        return f"runs on {obs.qos}, not {d.rung.qos}: someone else moved job {d.job_id} (SLURM says so)"
    return d.note


def _withdraw_note(d: Dispatch) -> str:
    obs = d.look
    state = obs.state if obs is not None else "gone"
    outside = obs is not None and obs.ended_by_others
    if d.held and not outside:
        return f"job {d.job_id} ended ({state}) while held; a hold is someone's decision: not resubmitted"
    if d.deferred and not outside:
        return f"job {d.job_id} ended ({state}) after someone else moved it; their decision: not resubmitted"
    return f"job {d.job_id} was cancelled outside fellows-fsm ({state}); not resubmitted"


def _defer_note(d: Dispatch) -> str:
    return (
        f"job {d.job_id} was moved by someone else ({'; '.join(moved_by_others(d))}); their decision: it is no "
        "longer walked, and runs (or ends) where they put it"
    )


def _park_note(d: Dispatch) -> str:
    if not rung_expired(d) and not rung_cannot_start(d) and not d.held:
        early = early_park_reason(d)
        if early is not None:
            return f"{EARLY_PARK}{d.park_early}: {early}"
    return d.note


def _recall_note(d: Dispatch) -> str:
    return d.note or "fellows-fsm cancel"


def _interrupt_note(d: Dispatch) -> str:
    return d.note or "Ctrl-C while it was being queued"


def _keep_submit(d: Dispatch) -> None:
    d.deadline = d.now + d.ladder.first.park_cap_seconds


def _keep_pause(d: Dispatch) -> None:
    d.paused_since = d.now


def _keep_resume(d: Dispatch) -> None:
    """The controller answers again: the clock runs on, every window later by the outage's length."""
    d.deadline += d.now - (d.paused_since if d.paused_since is not None else d.now)
    d.paused_since = None


def _keep_hold(d: Dispatch) -> None:
    d.held = True


def _keep_release(d: Dispatch) -> None:
    """The hold was lifted: the window resumes where the hold stopped it (time held is not counted)."""
    held_at = next((s.at for s in reversed(d.history) if s.trigger == Trigger.HOLD), d.now)
    d.deadline += d.now - held_at
    d.held = False


def _keep_drop(d: Dispatch) -> None:
    """Held, dropped at our own ``--deadline``: time held is not counted, the rest of the window carries on."""
    if d.held:
        _keep_release(d)
        d.left_early = d.deadline > d.now


def _keep_defer(d: Dispatch) -> None:
    d.deferred = True


def _keep_park(d: Dispatch) -> None:
    d.left_early = d.history[-1].note.startswith(EARLY_PARK)
    if d.paid_gate is not None and not d.paid_gate.refuse:
        keep_leave_last_rung(d)  # waiting for the budget: the park of the last rung takes the room it found


def _enter_next_rung(d: Dispatch) -> None:
    """Onto the next rung: its window opens, chained to the previous one (``window_deadline``)."""
    d.rung_index += 1
    d.park_early = d.rung.park_early or d.base_park_early  # (a rung of another cluster may have its own policy)
    d.deadline = window_deadline(d.deadline, d.now, d.rung, carried=d.left_early)
    d.left_early = d.refused = d.held = d.deferred = False
    d.unknown_since = None


def _keep_resubmit(d: Dispatch) -> None:
    _enter_next_rung(d)
    d.see(None, None)
    if rung_expired(d):
        # The walk ran late (an outage, or caps shorter than the poll): this rung's window closed before it
        # opened. Queue nothing; the next step parks it, so GCP is never later than promised.
        d.note = "window closed before it opened; rung passed over without a job"


def _keep_move(d: Dispatch) -> None:
    _enter_next_rung(d)
    d.moved = False
    d.see(d.job_id, None)  # the last look was at the previous rung: the next poll looks at this one
    if d.job_id is not None:  # (always, live; a replay attaches the journal's job ids afterwards)
        d.effects.append(Attach(d.id, d.rung_index, d.job_id, d.now))


def _keep_give_up(d: Dispatch) -> None:
    keep_leave_last_rung(d)  # (already taken at the park, unless on_budget = "refuse")
    d.effects.append(HandOff(d.id))


def _keep_recall(d: Dispatch | LaneDispatch) -> None:
    if d.history and d.history[-1].source in PAID_LIVE_STATES:
        d.effects.append(DeletePaid(d.id))  # its paid job is deleted (its SLURM jobs ended long before)
    else:
        d.effects.append(CancelJobs(d.id, d.recalled))


T = Trigger
_WITHDRAWN = Outcome.WITHDRAWN
_PARK_GUARDS = (walks_ladder, may_leave_rung, job_not_moved)
_BUDGET = budget_allows  # last of a park's guards: the budget is asked only of a rung that would be left
_FREE_TO_LEAVE = (job_known, job_not_held, _BUDGET)
_S = State
_CHANGE = (walks_ladder, may_change_rung)
_WAIT_STEP = (budget_note, keep_budget_wait)
_WAITS, _NO_BUDGET = Outcome.BUDGET, Outcome.NO_BUDGET
_PARK_STEP = (_park_note, _keep_park)
_RECALL_STEP = (_recall_note, _keep_recall)
TABLE: tuple[Row, ...] = (
    Row(T.SUBMIT, INITIAL, RUNG, keep=_keep_submit, told=True),  # once, onto the first rung only
    Row(T.PIN, INITIAL, State.HANDING_OFF, told=True),  # submit --pin <lane>: no ladder, its lane's command is next
    Row(T.REFUSE, RUNG, State.REFUSED, told=True, outcome=Outcome.REJECTED),  # SLURM refused the first submit
    Row(T.INTERRUPT, LIVE, State.WITHDRAWN, (), _interrupt_note, _keep_recall, True, Outcome.WITHDRAWN_INTERRUPTED),
    Row(T.RECALL, LIVE, State.WITHDRAWN, (), _recall_note, _keep_recall, True, Outcome.WITHDRAWN),  # the user's cancel
    # The controller answers again: the clock runs on first.
    Row(T.RESUME, RUNG, SAME, (window_paused,), keep=_keep_resume),
    Row(T.RESUME, State.PARKED, SAME, (window_paused,), keep=_keep_resume),
    Row(T.RESUME, State.CANCELLED, SAME, (window_paused,), keep=_keep_resume),
    Row(T.START, RUNG, State.RUNNING, (job_started,), note=_start_note),
    # Someone's scancel is a decision, not a rung.
    Row(T.WITHDRAW, RUNG, State.WITHDRAWN, (job_ended_by_others,), _withdraw_note, outcome=Outcome.WITHDRAWN_OUTSIDE),
    Row(T.DROP, RUNG, State.CANCELLED, (job_gone,), keep=_keep_drop),  # gone unstarted: deadline, QoS, lost
    # Held by its owner or an admin: waits, never walked. Moved by someone else: theirs, never walked.
    Row(T.HOLD, RUNG, SAME, (job_held,), keep=_keep_hold, outcome=Outcome.HELD),
    Row(T.DEFER, RUNG, SAME, (job_moved_by_others,), _defer_note, _keep_defer, outcome=Outcome.MOVED_OUTSIDE),
    Row(T.RELEASE, RUNG, SAME, (job_released,), keep=_keep_release),
    # A park is the start of a rung change: it waits for the per-tick bound (may_leave_rung) like the resubmit.
    # The last free rung before a paid lane waits while its paid run would pass the [budget] (its job stays
    # pending there, free); the step says why, once per reason.
    Row(T.BUDGET_WAIT, RUNG, SAME, (rung_expired, *_PARK_GUARDS, budget_newly_refused), *_WAIT_STEP, outcome=_WAITS),
    Row(T.PARK, RUNG, State.PARKED, (rung_expired, *_PARK_GUARDS, *_FREE_TO_LEAVE), *_PARK_STEP),
    Row(T.PARK, RUNG, State.PARKED, (rung_cannot_start, *_PARK_GUARDS, _BUDGET), *_PARK_STEP),
    Row(T.PARK, RUNG, State.PARKED, (cannot_start_in_window, *_PARK_GUARDS, *_FREE_TO_LEAVE), *_PARK_STEP),
    Row(T.START, State.PARKED, State.RUNNING, (job_started,), note=_start_note),  # a late start wins over the cancel
    Row(T.CANCEL, State.PARKED, State.CANCELLED, (job_gone,)),  # the cancel is confirmed (or there was no job)
    Row(T.MOVE, State.PARKED, NEXT_RUNG, (walks_ladder, moved_in_place), keep=_keep_move),  # scontrol, same job
    Row(T.RESUBMIT, State.CANCELLED, NEXT_RUNG, (walks_ladder, may_change_rung), keep=_keep_resubmit),
    Row(T.GIVE_UP, State.CANCELLED, State.FAILED_TO_GCP, (*_CHANGE, budget_fits), keep=_keep_give_up),
    Row(T.NO_BUDGET, State.CANCELLED, State.NO_BUDGET, (*_CHANGE, budget_refused), budget_note, outcome=_NO_BUDGET),
    # Told, never asked: the controller did not answer this tick's look (or no driver watched).
    Row(T.PAUSE, RUNG, SAME, (walks_ladder, window_running), _pause_note, _keep_pause, told=True),
    Row(T.PAUSE, State.PARKED, SAME, (walks_ladder, window_running), _pause_note, _keep_pause, told=True),
    Row(T.PAUSE, State.CANCELLED, SAME, (walks_ladder, window_running), _pause_note, _keep_pause, told=True),
    *ends.ROWS,  # the job started: followed to its end (ends.py); requeued by SLURM: followed where it put it
    *paid_tail.ROWS,  # the paid tail: a pinned dispatch's budget, the lane command, the paid run, its timers
    # A user's cancel of a paid job: WITHDRAWN journaled first, then its one delete (DeletePaid).
    Row(T.RECALL, PAID, State.WITHDRAWN, (), *_RECALL_STEP, True, _WITHDRAWN, paid=PaidStatus.CANCELLING),
    # A command lane's dispatch is that lane's to cancel once its command started; before, a cancel withdraws it.
    Row(T.RECALL, State.HANDING_OFF, State.WITHDRAWN, (command_not_started,), *_RECALL_STEP, True, _WITHDRAWN),
)
# What the ``recall`` row from LIVE leaves alone: a lane's handoff and its ends (a paid state has rows of its own).
_NOT_RECALLED = frozenset(
    {_S.HANDING_OFF, _S.HANDED_OFF, _S.HANDOFF_UNKNOWN, _S.PAID_DONE, _S.PAID_FAILED, _S.NO_BUDGET, _S.ENDED}
)
RECALLABLE = tuple(s for s in State if s not in _NOT_RECALLED and s not in PAID_LIVE_STATES)
"""Besides the rungs, the states a user's cancel withdraws from (a job that runs is scancelled too, its end
journaled ``cancelled``; a paid job
queued or running is deleted: DeletePaid); a dispatch handed to an unfollowed command lane is that lane's to cancel
(the ``recall`` row from HANDING_OFF: only before its command)."""
TRIGGERS = tuple(dict.fromkeys(row.trigger for row in TABLE))
_ROW_OF = {row.trigger: row for row in TABLE}  # a trigger's rows share their note, bookkeeping and outcome


def row_of(trigger: str) -> Row:
    """The row a trigger's note, bookkeeping and outcome are read from."""
    return _ROW_OF[Trigger(trigger)]
