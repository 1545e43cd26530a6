"""Which steps a user is told of: the notification events, chosen from a journaled step by two small tables (sans
I/O). The journal writes an event row for each name ``events_of`` gives, in the same transaction as the step
(journal/outbox.py), so an event exists only for a step that happened, and a step never without its events.

A step is told by its trigger (``BY_TRIGGER``), and a final step also by the state it ends in (``ENDED``). A new
end of a job (a SLURM job's end after RUNNING) is told by adding its state (or trigger) here: one line.
"""

from __future__ import annotations

from enum import StrEnum

from fellows_fsm.core.effects import Step
from fellows_fsm.core.vocab import State, Trigger

__all__ = ["BY_TRIGGER", "ENDED", "Event", "events_of"]


class Event(StrEnum):
    """The events a sink may ask for (``[notify.<name>] events``), as the JSON's ``event`` names them."""

    QUEUED = "queued"
    RUNG_CHANGED = "rung_changed"
    STARTED = "started"
    HANDED_OFF = "handed_off"
    BUDGET_WAIT = "budget_wait"
    BUDGET_THRESHOLD = "budget_threshold"
    ENDED = "ended"
    ATTENTION = "attention"
    TEST = "test"
    """Only ``fellows-fsm notify test`` sends it (never journaled)."""


T, E = Trigger, Event
BY_TRIGGER: dict[str, tuple[Event, ...]] = {
    T.SUBMIT: (E.QUEUED,),  # onto its first rung
    T.PIN: (E.QUEUED,),  # pinned to a lane: its command is next
    T.RESUBMIT: (E.RUNG_CHANGED,),  # onto the next rung (a new job)
    T.MOVE: (E.RUNG_CHANGED,),  # onto the next rung (the same job, moved in place)
    T.START: (E.STARTED,),  # a SLURM job started
    T.PAID_START: (E.STARTED,),  # a paid job started
    T.PAID: (E.HANDED_OFF,),  # the paid lane has the job (followed)
    T.HANDED_OFF: (E.HANDED_OFF,),  # the lane's command handed it over (not followed)
    T.BUDGET_WAIT: (E.BUDGET_WAIT,),
    T.HANDOFF_FAILED: (E.ATTENTION,),
    T.HANDOFF_UNKNOWN: (E.ATTENTION,),
    T.PAID_UNKNOWN: (E.ATTENTION,),  # the lane's command was lost: the paid job is looked for
    T.PAID_STUCK: (E.ATTENTION,),  # a paid job stuck in its lane's queue (deleted): also ended
}
"""A step's events by its trigger (a rung change: ``rung_changed``; a start: ``started``; ...)."""

ENDED = frozenset(
    {
        State.ENDED,
        State.PAID_DONE,
        State.PAID_FAILED,
        State.WITHDRAWN,
        State.REFUSED,
        State.NO_BUDGET,
        State.NO_LANE_LEFT,
    }
)
"""The final states a dispatch is told ``ended`` in (ENDED: a free job's end after RUNNING, issue 38).
RUNNING itself is not an end (the job runs), nor HANDED_OFF (told ``handed_off``), nor HANDOFF_FAILED and
HANDOFF_UNKNOWN (told ``attention``)."""


def events_of(step: Step, *, final: bool) -> tuple[Event, ...]:
    """The events one journaled step is told as, in order (none for most steps: a park, a pause, a hold)."""
    told = BY_TRIGGER.get(step.trigger, ())
    if final and step.dest in ENDED and E.ENDED not in told:
        told = (*told, E.ENDED)
    return told
