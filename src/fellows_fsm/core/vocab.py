"""Every word the lifecycle persists or shows as a state, defined once (the journal, the views and the CLI import
these; the diagram draws them).

A ladder dispatch lives in the machine's states: one per rung (``SUBMITTED_<qos>``, ``RESUBMITTED_<qos>``, made
by ``Rung.state_name``) and the fixed ones below. A dispatch pinned straight to a command lane never enters the
ladder: it lives in the lane states. The outcome is the one word a final dispatch ends with.
"""

from __future__ import annotations

__all__ = [
    "CANCELLED",
    "FAILED_TO_GCP",
    "FELLOWS",
    "FIXED_STATES",
    "HANDED_OFF",
    "HANDING_OFF",
    "HANDOFF_FAILED",
    "LANE_EDGES",
    "LANE_STATES",
    "MEANING",
    "NO_LANE_LEFT",
    "OUTCOME_HANDED_OFF",
    "OUTCOME_HANDOFF_FAILED",
    "OUTCOME_HELD",
    "OUTCOME_MOVED_OUTSIDE",
    "OUTCOME_NO_FALLBACK",
    "OUTCOME_REJECTED",
    "OUTCOME_WITHDRAWN",
    "OUTCOME_WITHDRAWN_INTERRUPTED",
    "OUTCOME_WITHDRAWN_OUTSIDE",
    "PARKED",
    "REFUSED",
    "RUNNING",
    "WITHDRAWN",
    "is_final_state",
]

FELLOWS = "fellows"
"""The lane name of the SLURM ladder (every other lane is a command lane, e.g. gcp)."""

# The machine's fixed states (the rung states come from the ladder).
PARKED = "PARKED"
"""The rung's window closed (or it cannot start the job): its job is being cancelled, if still pending."""
CANCELLED = "CANCELLED"
"""The rung's job is confirmed gone without starting: the next rung (or the fallback lane) is next."""
RUNNING = "RUNNING"
"""Final: the job started on the cluster."""
FAILED_TO_GCP = "FAILED_TO_GCP"
"""The whole ladder parked out: the dispatch is handed to the fallback lane (final once the handoff is recorded)."""
WITHDRAWN = "WITHDRAWN"
"""Final: the job was cancelled by someone else (its owner, an admin), by ``fellows-fsm cancel``, or by Ctrl-C."""
FIXED_STATES = (PARKED, CANCELLED, RUNNING, FAILED_TO_GCP, WITHDRAWN)

# A dispatch pinned straight to a command lane, and the views' words for a ladder dispatch's handoff.
HANDING_OFF = "HANDING_OFF"
HANDED_OFF = "HANDED_OFF"
HANDOFF_FAILED = "HANDOFF_FAILED"
LANE_STATES = (HANDING_OFF, HANDED_OFF, HANDOFF_FAILED)
REFUSED = "REFUSED"
"""How views name a dispatch whose first submit SLURM refused (outcome ``rejected: ...``)."""
NO_LANE_LEFT = "NO_LANE_LEFT"
"""How views name a dispatch that parked out of the ladder with no fallback lane configured."""

# Outcomes (the journal's ``outcome`` column).
OUTCOME_HELD = "held"
OUTCOME_MOVED_OUTSIDE = "moved-outside"
"""Someone else moved the job (scontrol update of its QoS, partition or time limit): it is not walked."""
OUTCOME_WITHDRAWN = "withdrawn"
"""Withdrawn by ``fellows-fsm cancel``."""
OUTCOME_WITHDRAWN_OUTSIDE = "withdrawn-outside"
OUTCOME_WITHDRAWN_INTERRUPTED = "withdrawn-interrupted"
"""Withdrawn by Ctrl-C while its first job was being queued."""
OUTCOME_NO_FALLBACK = "no-fallback-lane"
OUTCOME_HANDED_OFF = "handed-off"
OUTCOME_HANDOFF_FAILED = "handoff-failed"
OUTCOME_REJECTED = "rejected: "
"""The prefix of a refused first submit's outcome; SLURM's one-line reason follows."""


MEANING: dict[str, str] = {
    PARKED: "the rung's window closed (or it can never start the job); cancelling, only if still pending",
    CANCELLED: "the rung's job is confirmed gone, never started; next rung or GCP",
    RUNNING: "the job started on the free cluster (final)",
    FAILED_TO_GCP: "every rung parked out; handed to the fallback lane once (final once the handoff is recorded)",
    WITHDRAWN: "its job was cancelled by someone else, by `fellows-fsm cancel`, or by Ctrl-C while queued (final)",
    HANDING_OFF: "a lane's command runs for it (pinned to that lane, or after FAILED_TO_GCP)",
    HANDED_OFF: "the lane's command exited 0 (final)",
    HANDOFF_FAILED: "the lane's command failed or timed out (final)",
}
"""What each fixed and lane state means, as the generated state-diagram page says it."""

LANE_EDGES: tuple[tuple[str, str, str, str], ...] = (
    ("pin", "[*]", HANDING_OFF, "submitted with --pin <lane>: never on the ladder"),
    ("hand_off", FAILED_TO_GCP, HANDING_OFF, "the HandOff effect: the fallback lane's command starts, journaled first"),
    ("handed_off", HANDING_OFF, HANDED_OFF, "the command exited 0"),
    ("handoff_failed", HANDING_OFF, HANDOFF_FAILED, "the command exited non-zero, or its timeout killed its group"),
)
"""The handoff, after the machine: run by the router's Handoffs (handoffs.py) and recorded by
``Journal.finish_handoff``. A ladder dispatch keeps FAILED_TO_GCP in the journal's state column, with the outcome
``handed-off`` or ``handoff-failed``; the views show it in the lane state."""


def is_final_state(state: str, *, pinned: bool) -> bool:
    """Is a ladder dispatch in ``state`` final: RUNNING, WITHDRAWN, or the job of a pinned dispatch gone?

    FAILED_TO_GCP is not final here: the dispatch is final once its handoff is recorded.
    """
    return state in (RUNNING, WITHDRAWN) or (state == CANCELLED and pinned)
