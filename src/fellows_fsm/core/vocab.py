"""Every word the lifecycle persists or shows, defined once as enums (the journal, the views and the CLI import
these; the table in lifecycle.py uses them; the diagram draws them). Each is a ``StrEnum``: its members are the
strings the journal stores.

A ladder dispatch lives in one state per rung (``SUBMITTED_<qos>``, ``RESUBMITTED_<qos>``, made by
``Rung.state_name``) and the fixed states below. A dispatch pinned straight to a command lane never enters the
ladder: it lives in the lane states, through rows of the same table. The outcome is the one word a final (or held)
dispatch ends with.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "FINAL_STATES",
    "FIXED_STATES",
    "FOLLOWED_STATES",
    "LADDER_LANE",
    "LANE_STATES",
    "MEANING",
    "PAID_LIVE_STATES",
    "HandoffStatus",
    "Outcome",
    "PaidStatus",
    "Result",
    "State",
    "Trigger",
    "is_final_state",
]

LADDER_LANE = "fellows"
"""The lane of a dispatch that walks the ladder, as the journal and the ports name it: the first SLURM lane's
(``[fellows]``); every rung carries its own lane, and a dispatch pinned to another lane is journaled under that
lane's name."""


class State(StrEnum):
    """The fixed states (the rung states come from the ladder)."""

    PARKED = "PARKED"
    CANCELLED = "CANCELLED"
    RUNNING = "RUNNING"
    REQUEUED = "REQUEUED"
    ENDED = "ENDED"
    FAILED_TO_GCP = "FAILED_TO_GCP"
    WITHDRAWN = "WITHDRAWN"
    REFUSED = "REFUSED"
    HANDING_OFF = "HANDING_OFF"
    HANDED_OFF = "HANDED_OFF"
    HANDOFF_FAILED = "HANDOFF_FAILED"
    HANDOFF_UNKNOWN = "HANDOFF_UNKNOWN"
    NO_LANE_LEFT = "NO_LANE_LEFT"
    PAID_QUEUED = "PAID_QUEUED"
    PAID_RUNNING = "PAID_RUNNING"
    PAID_UNKNOWN = "PAID_UNKNOWN"
    PAID_DONE = "PAID_DONE"
    PAID_FAILED = "PAID_FAILED"
    NO_BUDGET = "NO_BUDGET"


class Trigger(StrEnum):
    """The triggers of the table (lifecycle.py), in table order."""

    SUBMIT = "submit"
    PIN = "pin"
    REFUSE = "refuse"
    INTERRUPT = "interrupt"
    RECALL = "recall"
    RESUME = "resume"
    START = "start"
    WITHDRAW = "withdraw"
    DROP = "drop"
    HOLD = "hold"
    DEFER = "defer"
    RELEASE = "release"
    PARK = "park"
    CANCEL = "cancel"
    MOVE = "move"
    RESUBMIT = "resubmit"
    GIVE_UP = "give_up"
    PAUSE = "pause"
    HAND_OFF = "hand_off"
    RE_RUN = "re_run"
    NO_LANE = "no_lane"
    HANDED_OFF = "handed_off"
    HANDOFF_FAILED = "handoff_failed"
    HANDOFF_UNKNOWN = "handoff_unknown"
    PAID_UNKNOWN = "paid_unknown"
    BUDGET_WAIT = "budget_wait"
    NO_BUDGET = "no_budget"
    PAID = "paid"
    PAID_FOUND = "paid_found"
    PAID_START = "paid_start"
    PAID_END = "paid_end"
    PAID_FAIL = "paid_fail"
    PAID_GONE = "paid_gone"
    PAID_STUCK = "paid_stuck"
    PAID_OVERRUN = "paid_overrun"
    REQUEUE = "requeue"
    RUN_AGAIN = "run_again"
    END = "end"
    LOST = "lost"


class Outcome(StrEnum):
    """The journal's ``outcome`` column: why a dispatch ended (or is held, or was moved by someone else)."""

    HELD = "held"
    MOVED_OUTSIDE = "moved-outside"
    """Someone else moved the job (scontrol update of its QoS, partition or time limit): it is not walked."""
    WITHDRAWN = "withdrawn"
    """Withdrawn by ``fellows-fsm cancel``."""
    WITHDRAWN_OUTSIDE = "withdrawn-outside"
    WITHDRAWN_INTERRUPTED = "withdrawn-interrupted"
    """Withdrawn by Ctrl-C while its first job was being queued."""
    NO_FALLBACK = "no-fallback-lane"
    HANDED_OFF = "handed-off"
    HANDOFF_FAILED = "handoff-failed"
    HANDOFF_UNKNOWN = "handoff-unknown"
    """The lane's command was started, its wrapper killed before it said how it ended, and no probe can tell."""
    PAID_DONE = "paid-succeeded"
    PAID_FAILED = "paid-failed"
    PAID_STUCK = "paid-stuck-queued"
    """Deleted by fellows-fsm after ``queue_timeout_seconds`` in the paid lane's queue."""
    PAID_OVERRUN = "paid-over-its-limit"
    """Deleted by fellows-fsm: it ran past its time limit (a lane that does not stop it itself), so past its bound."""
    NO_BUDGET = "no-budget"
    """Its paid run would have passed the budget, and ``on_budget = "refuse"``."""
    BUDGET = "budget"
    """Waiting on its last free rung: the paid run its limit needs would pass the budget."""
    ENDED = "ended"
    """An end step's mark: the journal's outcome is the job's result word (``succeeded``, ``failed``, ...)."""
    REJECTED = "rejected: "
    """The prefix of a refused first submit's outcome; SLURM's one-line reason follows."""


class Result(StrEnum):
    """How a job ended, one word on every lane (the journal's ends ``result``; ``result`` in every JSON)."""

    SUCCEEDED = "succeeded"
    """COMPLETED with exit 0 (a paid lane: PAID_DONE)."""
    FAILED = "failed"
    """FAILED or a non-zero exit, BOOT_FAIL, DEADLINE (SLURM's word in the note; a paid lane: PAID_FAILED)."""
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    """Someone's scancel (who, where sacct says), or ``fellows-fsm cancel`` of a running job."""
    UNKNOWN = "unknown"
    """SLURM no longer knows the job and accounting cannot say: never a guess of success."""


class HandoffStatus(StrEnum):
    """The journal's handoffs ``status`` column: the state a lane command's step leaves its command in (a row's
    ``command``)."""

    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"


class PaidStatus(StrEnum):
    """Where a paid job stands, as its lane reports it at one poll (a lane's ``look``); the journal's paid_runs
    ``status`` column keeps the last one that moved the dispatch (``starting`` before the lane has it)."""

    STARTING = "starting"
    """The handoff is under way: the lane has not said it has the job yet (its worst case already counts)."""
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLING = "cancelling"
    """Withdrawn (or stuck queued): its delete is asked until the lane takes it; it may still spend till then."""
    CANCELLED = "cancelled"
    """Ended by a cancel (ours, or someone else's)."""
    UNFOLLOWED = "unfollowed"
    """Handed to a lane with no ``status``: how long it ran is never known (counted at its worst case)."""
    GONE = "gone"
    """The lane has no such job (deleted outside, or never made)."""
    UNKNOWN = "unknown"
    """The lane could not tell this poll (asked again next poll; never read as an end)."""


FIXED_STATES = tuple(State)
"""The machine's fixed states (besides one per rung): every one is reached through a row of the table."""
PAID_LIVE_STATES = (State.PAID_QUEUED, State.PAID_RUNNING, State.PAID_UNKNOWN)
"""A paid job the lane has (or may have: its command was lost, and the lane's status is asked): live until it ends
(followed each poll, cancellable)."""
LANE_STATES = (
    State.HANDING_OFF,
    State.HANDED_OFF,
    State.HANDOFF_FAILED,
    State.HANDOFF_UNKNOWN,
    State.WITHDRAWN,
    *PAID_LIVE_STATES,
    State.PAID_DONE,
    State.PAID_FAILED,
    State.NO_BUDGET,
)
"""The states a dispatch pinned straight to a command lane can reach (its machine: ``machine.build_machine(None)``);
a ladder dispatch reaches them through the same rows."""

FINAL_STATES = frozenset(
    {
        State.ENDED,
        State.WITHDRAWN,
        State.REFUSED,
        State.HANDED_OFF,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.NO_LANE_LEFT,
        State.PAID_DONE,
        State.PAID_FAILED,
        State.NO_BUDGET,
    }
)
"""The states nothing leaves (a pinned dispatch's CANCELLED too: ``is_final_state``). RUNNING is the walk's goal,
not an end: its job is followed until it ends (ENDED, or WITHDRAWN by a cancel)."""
FOLLOWED_STATES = (State.RUNNING, State.REQUEUED)
"""A free job that started: followed (one look per follow interval) until it ends."""

MEANING: dict[str, str] = {
    State.PARKED: "the rung's window closed (or it can never start the job); cancelling, only if still pending",
    State.CANCELLED: "the rung's job is confirmed gone, never started; next rung or GCP",
    State.RUNNING: "the job started on a free cluster: the walk's goal; followed until it ends",
    State.REQUEUED: "SLURM requeued the running job: followed pending where SLURM put it, never walked again",
    State.ENDED: "its job ended: the result (succeeded, failed, timeout, ...) and exit code are journaled (final)",
    State.FAILED_TO_GCP: "every rung parked out: the fallback lane is next (handed to it once)",
    State.WITHDRAWN: "its job was cancelled by someone else, by `fellows-fsm cancel` or by Ctrl-C while queued (final)",
    State.REFUSED: "SLURM refused the first submit: nothing was queued (final)",
    State.HANDING_OFF: "a lane's command runs for it (pinned to that lane, or after FAILED_TO_GCP)",
    State.HANDED_OFF: "the lane's command exited 0, and the lane has no status to follow its job by (final)",
    State.HANDOFF_FAILED: "the lane's command failed or timed out (final)",
    State.HANDOFF_UNKNOWN: "the lane's command ran, but how it ended is unknown: check the lane (final, never re-run)",
    State.NO_LANE_LEFT: "it parked out of every rung and no fallback lane is configured (final)",
    State.PAID_QUEUED: "the paid lane has its job, not started yet (followed each poll; `cancel` deletes it)",
    State.PAID_RUNNING: "its paid job runs: GPU-hours and cost counted (followed each poll; `cancel` deletes it)",
    State.PAID_UNKNOWN: (
        "the lane's command was lost, how it ended unknown: the lane's status is asked each poll until it tells "
        "(counted at its worst case till then; `cancel` deletes it)"
    ),
    State.PAID_DONE: "its paid job succeeded (final; its cost journaled)",
    State.PAID_FAILED: "its paid job failed, sat queued past queue_timeout_seconds or ran past its limit (final)",
    State.NO_BUDGET: 'its paid run would pass the [budget], with on_budget = "refuse": nothing paid (final)',
}
"""What each fixed and lane state means, as the generated state-diagram page says it."""


def is_final_state(state: str, *, pinned: bool) -> bool:
    """Is a dispatch in ``state`` final: ENDED, WITHDRAWN, REFUSED, a lane's end, or a pinned job gone?

    FAILED_TO_GCP is not final here: the dispatch is final once its handoff is recorded.
    """
    return state in FINAL_STATES or (pinned and state == State.CANCELLED)  # (pinned first: no Enum member read)
