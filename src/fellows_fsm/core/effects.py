"""What the core asks for: effects, and the Decision that carries them with when to look again.

A Decision's effects are ordered: every journal effect (Record, Attach) comes before the port effect it
announces, and the driver commits them before it runs that port call (write-ahead). A decision holds at most one
port effect besides cancels; the answer to it goes back to the dispatch (``submitted``, ``found``, ...), whose
next decision follows. CancelIfPending effects of every dispatch of a tick are run together, in ONE call.
"""

from __future__ import annotations

import attrs

from fellows_fsm.core.ends import EndMark
from fellows_fsm.core.paid import PaidMark
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "Attach",
    "CancelIfPending",
    "CancelJobs",
    "Command",
    "CommandEnd",
    "Decision",
    "DeletePaid",
    "Effect",
    "FindByToken",
    "HandOff",
    "MoveQos",
    "Record",
    "Step",
    "Submit",
    "Walk",
]


@attrs.frozen
class Step:
    """One transition of one dispatch, as it is journaled before anything it announces is done."""

    at: float
    source: str
    """The state left; empty for the first submission."""
    dest: str
    trigger: str
    rung_index: int
    """The rung the dispatch is on (or, in PARKED/CANCELLED, the rung it is leaving) after the step."""
    qos: str
    job_id: str | None
    reason: str | None = None
    note: str = ""


@attrs.frozen
class Command:
    """What a lane command's step journals of the command (its handoffs row): the argv it is started with, or how
    it ended. ``status`` is the command's state the step leaves (the row's ``command``: started, done, ...)."""

    status: str
    lane: str = ""
    argv: tuple[str, ...] = ()
    exit_status: int | None = None
    stdout: str = ""
    stderr: str = ""


@attrs.frozen
class CommandEnd:
    """How a dispatch's lane command ended, as the driver tells its dispatch (whose table picks the row: handed_off,
    handoff_failed, handoff_unknown, paid, paid_unknown): its status, and whether its lane follows the job it made."""

    status: str
    followed: bool


@attrs.frozen
class Walk:
    """Where a step onto the next rung came from, read from the dispatch's own history as it is journaled (the facts
    of its ``rung_changed`` event, journal/outbox.py, without reading its rows back)."""

    from_lane: str | None
    """The lane of the step before this one (None: no step before)."""
    from_qos: str | None
    to_lane: str
    why: str
    """The last park's reason (SLURM's) or note (a policy's), else "no start on <from_qos> within its window"."""


@attrs.frozen
class Record:
    """Journal ``step`` (and the dispatch's new state) before anything it announces is done."""

    dispatch_id: str
    step: Step
    label: str
    """The human label of ``step.dest``."""
    final: bool
    outcome: str = ""
    """What the step leaves in the journal's outcome column (why it ended, is held or was moved; else nothing)."""
    command: Command | None = None
    """A lane command's step: what is journaled of the command with it (in the same transaction)."""
    paid: PaidMark | None = None
    """A paid run's step: what is journaled of the run with it (the paid_runs row, in the same transaction)."""
    end: EndMark | None = None
    """A free job's end step: how it ended (the ends row, in the same transaction)."""
    walk: Walk | None = None
    """A step onto the next rung: where it came from and why (its event's facts); None for every other step."""


@attrs.frozen
class Attach:
    """Journal that the dispatch's job on rung ``rung_index`` is ``job_id`` (the submit's answer, or a move)."""

    dispatch_id: str
    rung_index: int
    job_id: str
    at: float


@attrs.frozen
class Submit:
    """Queue the job on ``qos`` tagged ``token``; answer with ``submitted`` or ``submit_refused``."""

    dispatch_id: str
    spec: JobSpec
    qos: str
    token: str
    deadline: float | None
    lane: str = LADDER_LANE
    """The SLURM lane (cluster) of the rung: the port the sbatch goes through."""


@attrs.frozen
class FindByToken:
    """A submit may have reached the cluster without its answer: look ``token`` up; answer with ``found``."""

    dispatch_id: str
    token: str
    lane: str = LADDER_LANE
    """The SLURM lane (cluster) the lost submit went to: where the token is looked up."""


@attrs.frozen
class CancelIfPending:
    """Cancel the parked job if it is still pending (batched with every other of the tick); answer with
    ``cancel_answered`` when the cancel proves it gone, else the next look reads it back."""

    dispatch_id: str
    job_id: str


@attrs.frozen
class CancelJobs:
    """Cancel these jobs whatever their state (a user's cancel, journaled WITHDRAWN first); safe to run again."""

    dispatch_id: str
    job_ids: tuple[str, ...]


@attrs.frozen
class MoveQos:
    """Move the pending job to ``qos`` keeping its id (scontrol); answer with ``move_answered``."""

    dispatch_id: str
    job_id: str
    qos: str


@attrs.frozen
class HandOff:
    """The ladder is parked out: hand the dispatch to its fallback lane, exactly once."""

    dispatch_id: str


@attrs.frozen
class DeletePaid:
    """Cancel (delete) the dispatch's paid job on its lane, once (journaled first: the step before it says so);
    asked again each poll until the lane takes it."""

    dispatch_id: str


Effect = Record | Attach | Submit | FindByToken | CancelIfPending | CancelJobs | MoveQos | HandOff | DeletePaid


@attrs.frozen
class Decision:
    """What one event led to: the effects to run, in order, and when the dispatch wants its next look."""

    effects: tuple[Effect, ...] = ()
    wake_at: float | None = None
    """When the current window closes (None: no deadline of its own, e.g. held, pinned, or final)."""
