"""The end of a free job, as rows of the one table (lifecycle.py assembles them): RUNNING is the walk's goal, and
from it the dispatch follows its job until SLURM says it ended. SLURM's end is read into one word (``Result``),
the same on every lane, with the exit code where there is one; what a step journals of it is an ``EndMark``.

A requeued job (preemption with requeue, ``scontrol requeue``) is followed pending where SLURM put it, never
walked again (REQUEUED). An end is decided only on accounting's word (``Observation.end``): a job SLURM no longer
knows and accounting cannot tell of is ``unknown``, never a guess of success. Nothing here does I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from fellows_fsm.core.row import Row
from fellows_fsm.core.vocab import FOLLOWED_STATES, Outcome, Result, State, Trigger
from fellows_fsm.scheduler.port import Phase

if TYPE_CHECKING:
    from fellows_fsm.core.dispatch import Dispatch
    from fellows_fsm.core.lane import LaneDispatch

__all__ = [
    "ROWS",
    "EndMark",
    "dispatch_result",
    "end_mark",
    "job_ended",
    "job_lost",
    "job_requeued",
    "job_runs_again",
    "paid_result",
    "result_of",
]

_WORDS = {
    "TIMEOUT": Result.TIMEOUT,
    "OUT_OF_MEMORY": Result.OUT_OF_MEMORY,
    "NODE_FAIL": Result.NODE_FAIL,
    "PREEMPTED": Result.PREEMPTED,
    "CANCELLED": Result.CANCELLED,
}
_REQUEUED_WORDS = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
_RUNNING_WORDS = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING"})


def result_of(state: str, exit_code: int | None) -> Result:
    """SLURM's end word (``COMPLETED``, ``CANCELLED by 1000``, ...) and exit code as one ``Result``: COMPLETED
    with exit 0 is ``succeeded``; FAILED, a non-zero exit, BOOT_FAIL and DEADLINE are ``failed``."""
    word = state.split(" ", 1)[0].rstrip("+")
    if word in _WORDS:
        return _WORDS[word]
    if word == "COMPLETED":
        return Result.SUCCEEDED if exit_code in (0, None) else Result.FAILED
    if word in ("FAILED", "BOOT_FAIL", "DEADLINE"):
        return Result.FAILED
    return Result.UNKNOWN


def paid_result(state: str, outcome: str) -> Result | None:
    """A paid lane's end in the same words (PAID_DONE is ``succeeded``, ...); None while it has not ended."""
    if state == State.PAID_DONE:
        return Result.SUCCEEDED
    if state == State.PAID_FAILED:
        return Result.TIMEOUT if outcome == Outcome.PAID_OVERRUN else Result.FAILED
    if state == State.WITHDRAWN and outcome == Outcome.WITHDRAWN_OUTSIDE:
        return Result.CANCELLED
    if state == State.HANDOFF_UNKNOWN:
        return Result.UNKNOWN
    return None


def dispatch_result(state: str, outcome: str, *, final: bool, ended: str | None) -> str | None:
    """A dispatch's one result word, as its JSON, ``wait`` and the views give it: how its free job ended
    (``ended``: the journal's ends row), its paid job's end in the same words, ``cancelled`` for a dispatch
    withdrawn before its job ran; None while its job has not ended, or for one that ended without a job (refused,
    no lane or budget left, handed to a lane that does not follow its job)."""
    if ended is not None:
        return ended
    paid = paid_result(state, outcome)
    if paid is not None:
        return str(paid)
    return str(Result.CANCELLED) if final and state == State.WITHDRAWN else None


@attrs.frozen
class EndMark:
    """What an end step journals of the job (the journal's ends row, in the same transaction as the step)."""

    result: str
    exit_code: int | None
    slurm_state: str
    """SLURM's own word (``COMPLETED``, ``CANCELLED by 1000``); empty when it gave none."""
    lane: str
    job_id: str | None
    started_at: float | None
    ended_at: float
    elapsed_seconds: float | None
    """How long it ran: sacct's Elapsed, else from its start to its end as the polls saw them."""
    gpus: int
    note: str = ""

    @property
    def gpu_hours(self) -> float:
        """Its GPUs times how long it ran, in hours (0 when how long is not known)."""
        return self.gpus * (self.elapsed_seconds or 0.0) / 3600.0


# ----------------------------------------------------------------- the guards (questions, no side effects)
def _word(d: Dispatch) -> str:
    look = d.look
    return look.state.split(" ", 1)[0] if look is not None else ""


def job_ended(d: Dispatch) -> bool:
    """Does accounting say the started job ended (``Observation.end``: its word, exit code, how long it ran)?"""
    look = d.look
    return look is not None and look.end is not None


def job_lost(d: Dispatch) -> bool:
    """Is the started job gone from squeue and from accounting (purged, accounting off) for longer than a lost
    job is waited for (looks.py), or its id another's job?"""
    look = d.look
    return look is not None and look.phase is Phase.GONE


def job_requeued(d: Dispatch) -> bool:
    """Is the running job seen pending again (SLURM requeued it), not ended?"""
    look = d.look
    return look is not None and look.end is None and look.phase is Phase.STARTED and _word(d) in _REQUEUED_WORDS


def job_runs_again(d: Dispatch) -> bool:
    """Is the requeued job seen running again?"""
    look = d.look
    return look is not None and look.end is None and look.phase is Phase.STARTED and _word(d) in _RUNNING_WORDS


# ----------------------------------------------------------------- what each step keeps
def _started_at(d: Dispatch | LaneDispatch) -> float | None:
    look = d.look
    if look is not None and look.start_time is not None and look.end is not None:
        return look.start_time
    return next((s.at for s in reversed(d.history) if s.trigger in (Trigger.START, Trigger.RUN_AGAIN)), None)


def end_mark(d: Dispatch | LaneDispatch, trigger: str) -> EndMark | None:
    """What the step ``trigger`` journals of the job's end (None: the step ends no started job)."""
    if d.ladder is None or d.state not in FOLLOWED_STATES:
        return None
    ended = trigger == Trigger.END
    if not ended and trigger not in (Trigger.LOST, Trigger.RECALL, Trigger.INTERRUPT):
        return None
    look, started, rung = d.look, _started_at(d), d.ladder.rungs[d.rung_index]
    end = look.end if look is not None and ended else None
    at = end.ended_at if end is not None and end.ended_at is not None else d.now
    elapsed = end.elapsed_seconds if end is not None else None
    if elapsed is None and started is not None:
        elapsed = max(0.0, at - started)
    if end is not None:
        result, code, word = result_of(end.state, end.exit_code), end.exit_code, end.state
    elif ended or trigger == Trigger.LOST:
        result, code, word = Result.UNKNOWN, None, ""
    else:
        result, code, word = Result.CANCELLED, None, ""
    gpus = end.gpus if end is not None and end.gpus is not None else d.spec.gpus
    return EndMark(str(result), code, word, rung.lane, d.job_id, started, at, elapsed, gpus, d.note)


def _end_note(d: Dispatch) -> str:
    look = d.look
    end = look.end if look is not None else None
    if end is None:
        return d.note
    result = result_of(end.state, end.exit_code)
    code = f", exit {end.exit_code}" if end.exit_code is not None else ""
    words = f"job {d.job_id} {result}{code} (SLURM: {end.state})"
    if result == Result.CANCELLED and " by " in end.state:
        words += f": scancel by uid {end.state.split(' by ', 1)[1]}"
    if end.elapsed_seconds is not None:
        gpus = end.gpus if end.gpus is not None else d.spec.gpus
        words += (
            f"; ran {end.elapsed_seconds:.0f} s on {gpus} GPU(s): {gpus * end.elapsed_seconds / 3600:.2f} GPU-hours"
        )
    if not end.accounted:
        words += "; accounting has no record of it (squeue's word alone)"
    return words


def _lost_note(d: Dispatch) -> str:
    return d.note or f"job {d.job_id} is known to neither squeue nor sacct (accounting off, or purged): unknown"


def _requeue_note(d: Dispatch) -> str:
    return f"SLURM requeued job {d.job_id} ({_word(d)}): followed where SLURM put it, never walked again"


# ----------------------------------------------------------------- the rows
T = Trigger
_RUN, _AGAIN, _ENDED = State.RUNNING, State.REQUEUED, State.ENDED
ROWS: tuple[Row, ...] = (
    # The job started: followed (one look per follow interval) until accounting says how it ended.
    Row(T.END, _RUN, _ENDED, (job_ended,), _end_note, outcome=Outcome.ENDED),
    Row(T.LOST, _RUN, _ENDED, (job_lost,), _lost_note, outcome=Outcome.ENDED),
    # SLURM requeued it (someone else's decision): followed pending where SLURM put it, never walked again.
    Row(T.REQUEUE, _RUN, _AGAIN, (job_requeued,), _requeue_note),
    Row(T.END, _AGAIN, _ENDED, (job_ended,), _end_note, outcome=Outcome.ENDED),
    Row(T.LOST, _AGAIN, _ENDED, (job_lost,), _lost_note, outcome=Outcome.ENDED),
    Row(T.RUN_AGAIN, _AGAIN, _RUN, (job_runs_again,)),
)
