"""Reading the journal for people: a dispatch by its id or a prefix, the rows `status` shows, what an end means.

Shared by the Python API and the command line; it only reads, and never renders or prints.
"""

from __future__ import annotations

import shlex
import sys
import time

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.budget import Spend, Windows, spend
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.paid import LIVE_PAID
from fellows_fsm.core.vocab import LADDER_LANE, PAID_LIVE_STATES, Outcome, PaidStatus, State
from fellows_fsm.errors import (
    FellowsError,
    HandoffUnknown,
    JournalFull,
    LaneError,
    NoBudget,
    PaidLaneError,
    SchedulerError,
    SubmitRejected,
    UsageError,
)
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.statefs import full_words
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.handoff import unknown_note
from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "RECENT",
    "find",
    "journaled_failure",
    "outcome_error",
    "pending_delete",
    "read_spend",
    "refuse_handed_off",
    "restore",
    "select",
    "spec_of",
]

RECENT = 20
"""How many of the most recent dispatches ``status`` reports besides the live ones, by default."""


def find(journal: Journal, dispatch_id: str) -> DispatchRow:
    """The dispatch with this id, or the one whose id starts with it; UsageError (exit 2) otherwise."""
    row = journal.dispatch(dispatch_id)
    if row is not None:
        return row
    matches = journal.with_prefix(dispatch_id)
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(r.id for r in matches)
        raise UsageError(f"{dispatch_id!r} matches several dispatches ({ids}); give more of the id")
    raise UsageError(f"no dispatch {dispatch_id!r} in the journal {journal.path}; `fellows-fsm status` lists them")


def select(
    journal: Journal, dispatch_id: str | None = None, *, live_only: bool = False, last: int | None = RECENT
) -> list[DispatchRow]:
    """The rows ``status`` shows: one dispatch; or the live ones and the ``last`` most recent (``last=None``: every
    one), oldest first; ``live_only`` leaves out the final ones."""
    if dispatch_id:
        return [find(journal, dispatch_id)]
    if last is None:
        return journal.dispatches(live_only=live_only)
    live = journal.dispatches(live_only=True)
    recent = [] if live_only else journal.recent(last)
    chosen = {r.id: r for r in [*recent, *live]}
    return sorted(chosen.values(), key=lambda r: (r.created_at, r.id))


def journaled_failure(journal: Journal, dispatch_id: str, exc: FellowsError) -> FellowsError | None:
    """The error a command that journaled dispatch ``dispatch_id`` ends with when ``exc`` stopped it after that: it
    names the dispatch, says when its paid job exists (or is being made) and never to submit it again, which could
    pay twice. None when the dispatch ended with nothing queued or paid (``exc`` says what is true then)."""
    row = journal.dispatch(dispatch_id)
    if row is None:
        return None
    handoff = journal.handoff(dispatch_id)
    paid = journal.paid_run(dispatch_id)
    lane = paid.lane if paid is not None else handoff.lane if handoff is not None else None
    if lane is None and row.final:
        return None  # refused or withdrawn before anything ran: nothing to lose by submitting again
    why = f"{full_words(journal.path.parent)}: free some space there" if isinstance(exc, JournalFull) else str(exc)
    if lane is not None:
        what = f"dispatch {row.id}'s paid job on lane {lane} was made (or is being made)"
    else:
        what = f"dispatch {row.id} is journaled ({row.state}) and its walk goes on"
    error = FellowsError(
        f"{what}: do not submit it again (that could run or pay for it twice); {why.rstrip('.')}, then "
        f"`fellows-fsm watch` follows it to its end (`fellows-fsm status {row.id}` shows it, "
        f"`fellows-fsm cancel {row.id}` withdraws it)"
    )
    error.exit_code = exc.exit_code
    return error


def outcome_error(journal: Journal, dispatch_id: str) -> FellowsError | None:
    """The error a finished dispatch ends a command with, or None for RUNNING or ENDED (its job ran: how it ended is
    ``wait``'s exit code), handed off, a paid job that succeeded, or still live."""
    row = journal.dispatch(dispatch_id)
    if row is None or not row.final or row.label in (State.RUNNING, State.ENDED) or row.outcome in _FINE:
        return None
    if row.outcome == Outcome.NO_BUDGET:
        return NoBudget(f"dispatch {row.id} ended NO_BUDGET, nothing paid: {journal.steps(row.id)[-1].note}")
    if row.outcome in (Outcome.PAID_FAILED, Outcome.PAID_STUCK):
        run = journal.paid_run(row.id)
        where = run.lane if run is not None else "its paid lane"
        return LaneError(f"dispatch {row.id}: its paid job on {where} failed: {journal.steps(row.id)[-1].note}")
    handoff = journal.handoff(dispatch_id)
    if row.outcome == Outcome.HANDOFF_FAILED and handoff is not None:
        last = ((handoff.stderr or "").strip().splitlines() or ["(no stderr)"])[-1]
        return LaneError(
            f"dispatch {row.id}: the {handoff.lane} command exited {handoff.exit_status}: {last} "
            f"(argv: {shlex.join(handoff.argv)})"
        )
    if row.outcome == Outcome.HANDOFF_UNKNOWN and handoff is not None:
        output = journal.path.parent / "handoffs" / f"{row.id}.out"
        return HandoffUnknown(f"dispatch {row.id}: {unknown_note(handoff.lane, row.id, output)}")
    if row.outcome == Outcome.NO_FALLBACK:
        last = (
            str(row.ladder[-1].get("lane", LADDER_LANE)) if row.ladder else LADDER_LANE
        )  # its ladder's last SLURM lane
        return LaneError(
            f"dispatch {row.id} parked out of every rung and [router] order has no lane after {last!r}; "
            "add a [lanes.gcp] table and put 'gcp' in the order"
        )
    if row.outcome.startswith(Outcome.REJECTED):
        return SubmitRejected(f"dispatch {row.id}: {row.outcome}")
    if row.outcome == Outcome.WITHDRAWN:
        return FellowsError(f"dispatch {row.id} was withdrawn (fellows-fsm cancel)")
    if row.outcome == Outcome.WITHDRAWN_OUTSIDE:
        return FellowsError(f"dispatch {row.id} was withdrawn: its job {row.job_id} was cancelled outside fellows-fsm")
    if row.pinned and row.state == "CANCELLED":
        return SchedulerError(
            f"dispatch {row.id} was pinned to {row.qos} and its job {row.job_id} left the queue without starting"
        )
    return FellowsError(f"dispatch {row.id} ended as {row.label} ({row.outcome or 'no outcome'})")


_FINE = (Outcome.HANDED_OFF, Outcome.PAID_DONE)


def restore(
    journal: Journal,
    row: DispatchRow,
    *,
    controller_deadline: bool = False,
    in_place: bool = False,
    ladders: dict[Ladder, Ladder] | None = None,
    specs: dict[JobSpec, JobSpec] | None = None,
) -> Dispatch:
    """A ladder dispatch rebuilt from its journaled steps and jobs, exactly where it stood (its window's deadline
    included): what a driver recovers, and what a follower reads its countdowns from. The two keyword defaults
    serve a row journaled before dispatches carried them; ``ladders`` and ``specs`` (a driver's) keep one object
    per distinct ladder and job, however many dispatches walk it."""
    settings = row.settings
    ladder = Ladder(tuple(Rung(**r) for r in row.ladder))
    if ladders is not None:
        ladder = ladders.setdefault(ladder, ladder)
    spec = spec_of(row)
    if specs is not None:
        spec = specs.setdefault(spec, spec)
    return Dispatch.restore(
        row.id,
        spec,
        ladder,
        history=journal.steps(row.id),
        jobs={j.rung_index: j.job_id for j in journal.jobs(row.id)},
        pinned=row.pinned,
        controller_deadline=bool(settings.get("controller_deadline", controller_deadline)),
        in_place=bool(settings.get("in_place", in_place)),
        # A dispatch journaled before park_early existed keeps waiting out its windows, as it was promised.
        park_early=sys.intern(str(settings.get("park_early", "off"))),  # one string, not one a dispatch
        park_early_last_rung=bool(settings.get("park_early_last_rung", False)),
    )


def pending_delete(dispatch_id: str, lane: str, why: str) -> str:
    """What ``cancel`` says of a withdrawn dispatch whose paid job its lane has not deleted yet."""
    return (
        f"dispatch {dispatch_id} is withdrawn, but its paid job on lane {lane} is not deleted yet ({why}): the driver "
        f"asks {lane} to delete it again each poll until it does, and it may run and spend till then; "
        f"`fellows-fsm status` shows it cancelling (or delete fsm-{dispatch_id} on {lane} yourself)"
    )


def refuse_handed_off(journal: Journal, row: DispatchRow, *, handing: bool = False) -> None:
    """Raise FellowsError if the dispatch was handed to a lane that cannot be followed (fellows-fsm cannot take it
    back), or its paid job already ended. A paid job followed (PAID_QUEUED, PAID_RUNNING) is the driver's to delete;
    so is one HANDING_OFF, which only the driver can tell (``handing``: leave it to the driver). A withdrawn one
    whose delete its lane has not taken yet raises PaidLaneError (exit 8) saying so; one deleted, FellowsError."""
    if row.state in PAID_LIVE_STATES or (handing and row.state == State.HANDING_OFF):
        return
    run = journal.paid_run(row.id) if row.state == State.WITHDRAWN else None
    if run is not None and run.status == PaidStatus.CANCELLING:
        raise PaidLaneError(pending_delete(row.id, run.lane, run.note or "no answer yet"))
    if run is not None and run.status == PaidStatus.CANCELLED:
        raise FellowsError(f"dispatch {row.id} is withdrawn already, and its paid job on lane {run.lane} deleted")
    if row.state in (State.PAID_DONE, State.PAID_FAILED):
        raise FellowsError(f"dispatch {row.id}'s paid job already ended ({row.state}): nothing to cancel")
    handoff = journal.handoff(row.id)
    if handoff is not None and handoff.status != "failed":
        raise FellowsError(
            f"dispatch {row.id} was handed to lane {handoff.lane} ({shlex.join(handoff.argv)}); "
            f"fellows-fsm cannot take it back: cancel it there (its name carries fsm-{row.id})"
        )


def spec_of(row: DispatchRow) -> JobSpec:
    """The job a dispatch row was journaled with."""
    values = dict(row.spec)
    values["extra_args"] = tuple(values.get("extra_args", ()))
    return JobSpec(**values)


def read_spend(journal: Journal, budget: BudgetConfig, now: float | None = None) -> Spend:
    """What the journal's paid runs spent in the windows ``now`` (default: the wall clock) falls in: the ended runs
    handed since the earliest window began summed in ONE query (journal/store.py: ``paid_sums``), the live ones read
    as runs, counted by core/budget.py's ``spend``."""
    at = time.time() if now is None else now
    zone = budget.zone
    windows = Windows.at(at, zone)
    live = journal.paid_runs(since=windows.earliest, status=sorted(LIVE_PAID))
    return spend(live, at, zone, ended=journal.paid_sums(windows, at))
