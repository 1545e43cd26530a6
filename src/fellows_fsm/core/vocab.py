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
    "FELLOWS",
    "FINAL_STATES",
    "FIXED_STATES",
    "LANE_STATES",
    "MEANING",
    "HandoffStatus",
    "Outcome",
    "State",
    "Trigger",
    "is_final_state",
]

FELLOWS = "fellows"
"""The lane name of the SLURM ladder (every other lane is a command lane, e.g. gcp)."""


class State(StrEnum):
    """The fixed states (the rung states come from the ladder)."""

    PARKED = "PARKED"
    CANCELLED = "CANCELLED"
    RUNNING = "RUNNING"
    FAILED_TO_GCP = "FAILED_TO_GCP"
    WITHDRAWN = "WITHDRAWN"
    REFUSED = "REFUSED"
    HANDING_OFF = "HANDING_OFF"
    HANDED_OFF = "HANDED_OFF"
    HANDOFF_FAILED = "HANDOFF_FAILED"
    HANDOFF_UNKNOWN = "HANDOFF_UNKNOWN"
    NO_LANE_LEFT = "NO_LANE_LEFT"


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
    REJECTED = "rejected: "
    """The prefix of a refused first submit's outcome; SLURM's one-line reason follows."""


class HandoffStatus(StrEnum):
    """The journal's handoffs ``status`` column: the state a lane command's step leaves its command in (a row's
    ``command``)."""

    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"


FIXED_STATES = tuple(State)
"""The machine's fixed states (besides one per rung): every one is reached through a row of the table."""
LANE_STATES = (State.HANDING_OFF, State.HANDED_OFF, State.HANDOFF_FAILED, State.HANDOFF_UNKNOWN, State.WITHDRAWN)
"""The states a dispatch pinned straight to a command lane can reach (its machine: ``machine.build_machine(None)``);
a ladder dispatch reaches them through the same rows."""

FINAL_STATES = frozenset(
    {
        State.RUNNING,
        State.WITHDRAWN,
        State.REFUSED,
        State.HANDED_OFF,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.NO_LANE_LEFT,
    }
)
"""The states nothing leaves (a pinned dispatch's CANCELLED too: ``is_final_state``)."""

MEANING: dict[str, str] = {
    State.PARKED: "the rung's window closed (or it can never start the job); cancelling, only if still pending",
    State.CANCELLED: "the rung's job is confirmed gone, never started; next rung or GCP",
    State.RUNNING: "the job started on the free cluster (final)",
    State.FAILED_TO_GCP: "every rung parked out: the fallback lane is next (handed to it once)",
    State.WITHDRAWN: "its job was cancelled by someone else, by `fellows-fsm cancel` or by Ctrl-C while queued (final)",
    State.REFUSED: "SLURM refused the first submit: nothing was queued (final)",
    State.HANDING_OFF: "a lane's command runs for it (pinned to that lane, or after FAILED_TO_GCP)",
    State.HANDED_OFF: "the lane's command exited 0 (final)",
    State.HANDOFF_FAILED: "the lane's command failed or timed out (final)",
    State.HANDOFF_UNKNOWN: "the lane's command ran, but how it ended is unknown: check the lane (final, never re-run)",
    State.NO_LANE_LEFT: "it parked out of every rung and no fallback lane is configured (final)",
}
"""What each fixed and lane state means, as the generated state-diagram page says it."""


def is_final_state(state: str, *, pinned: bool) -> bool:
    """Is a dispatch in ``state`` final: RUNNING, WITHDRAWN, REFUSED, a lane's end, or a pinned job gone?

    FAILED_TO_GCP is not final here: the dispatch is final once its handoff is recorded.
    """
    return state in FINAL_STATES or (pinned and state == State.CANCELLED)  # (pinned first: no Enum member read)
