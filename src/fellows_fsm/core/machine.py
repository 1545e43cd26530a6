"""The transition table: the one statement of what a dispatch may do and in which order it tries.

It is read top to bottom the way a dispatch lives it, and it is the step order: on every look, a dispatch fires
the first row of its state whose guards all hold, then looks again, until none holds (``Dispatch._settle``).
transitions' Machine is built from it and fires every step (re-checking the guards, journaling through its
``before_state_change`` hook), and the diagrams are drawn from it. Nothing else restates it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import attrs
from transitions import Machine

from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.vocab import CANCELLED, FAILED_TO_GCP, FIXED_STATES, PARKED, RUNNING, WITHDRAWN

__all__ = [
    "EXTERNAL",
    "NEXT_RUNG",
    "RUNG",
    "SAME",
    "TABLE",
    "TRIGGERS",
    "Step",
    "StepOrder",
    "build_machine",
    "dispatch_token",
    "machine_definition",
    "state_label",
    "step_order",
]

# RUNG stands for every rung state; NEXT_RUNG for the rung after the one the dispatch is leaving; SAME stays in
# the state (a step that is journaled but moves nowhere). Guards are questions asked of the Dispatch, in the order
# written (the one most often false first: a look tries every row of its state).
RUNG = "ANY_RUNG"
NEXT_RUNG = "NEXT_RUNG"
SAME = "SAME"
TABLE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # trigger    source     dest         guards
    ("resume", RUNG, SAME, ("window_paused",)),  # the controller answers again: the clock runs on first
    ("resume", PARKED, SAME, ("window_paused",)),
    ("resume", CANCELLED, SAME, ("window_paused",)),
    ("start", RUNG, RUNNING, ("job_started",)),
    ("withdraw", RUNG, WITHDRAWN, ("job_ended_by_others",)),  # someone's scancel is a decision, not a rung
    ("drop", RUNG, CANCELLED, ("job_gone",)),  # gone without starting (deadline, refused QoS, lost)
    ("hold", RUNG, SAME, ("job_held",)),  # held by its owner or an admin: waits, never walked away from
    ("defer", RUNG, SAME, ("job_moved_by_others",)),  # scontrol update by someone else: theirs, never walked
    ("release", RUNG, SAME, ("job_released",)),
    # A park is the start of a rung change: it waits for the tick's budget (may_leave_rung) like the resubmit.
    (
        "park",
        RUNG,
        PARKED,
        ("rung_expired", "walks_ladder", "may_leave_rung", "job_known", "job_not_held", "job_not_moved"),
    ),
    ("park", RUNG, PARKED, ("rung_cannot_start", "walks_ladder", "may_leave_rung", "job_not_moved")),
    (
        "park",
        RUNG,
        PARKED,
        ("cannot_start_in_window", "walks_ladder", "may_leave_rung", "job_known", "job_not_held", "job_not_moved"),
    ),
    ("start", PARKED, RUNNING, ("job_started",)),  # a late start wins over the cancel
    ("cancel", PARKED, CANCELLED, ("job_gone",)),  # the cancel is confirmed (or there was no job)
    ("move", PARKED, NEXT_RUNG, ("walks_ladder", "moved_in_place", "left_previous_rung")),  # scontrol, same job
    ("resubmit", CANCELLED, NEXT_RUNG, ("walks_ladder", "may_change_rung", "left_previous_rung")),
    ("give_up", CANCELLED, FAILED_TO_GCP, ("walks_ladder", "may_change_rung", "left_last_rung")),
    # Told, never tried: the controller did not answer this tick's look.
    ("pause", RUNG, SAME, ("walks_ladder", "window_running")),
    ("pause", PARKED, SAME, ("walks_ladder", "window_running")),
    ("pause", CANCELLED, SAME, ("walks_ladder", "window_running")),
)
EXTERNAL = frozenset({"submit", "pause"})
"""Triggers a dispatch is told (the first submit, a controller outage); every other row is tried on each look."""
TRIGGERS = ("submit", *dict.fromkeys(row[0] for row in TABLE))


def dispatch_token(dispatch_id: str, rung_index: int) -> str:
    """The tag (sbatch --comment) of a dispatch's job on one rung: ``fsm-<dispatch id>-r<rung index>``."""
    return f"fsm-{dispatch_id}-r{rung_index}"


def state_label(ladder: Ladder, state: str) -> str:
    """The human label of a state name, e.g. ``RESUBMITTED(normal-eur)`` for ``RESUBMITTED_normal_eur``."""
    for rung in ladder.rungs:
        if rung.state_name == state:
            return rung.label
    return state


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


def _left_rung_guard(rung: Rung) -> Callable[[Any], bool]:
    """A guard, named after ``rung``, that holds when the dispatch is leaving that rung."""

    def guard(event: Any) -> bool:
        model = getattr(event, "model", event)  # transitions passes an EventData; the step loop the Dispatch
        return bool(model.rung_index == rung.index)

    guard.__name__ = f"left_{rung.state_name.split('_', 1)[1]}"
    guard.rung_index = rung.index  # type: ignore[attr-defined]  # read by step_order's generated code
    return guard


def machine_definition(ladder: Ladder) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Expand TABLE over ``ladder``: the states (with human labels) and the transitions, in table order."""
    states: list[dict[str, Any]] = [{"name": r.state_name, "label": r.label} for r in ladder.rungs]
    states += [{"name": s, "label": s} for s in FIXED_STATES]
    transitions: list[dict[str, Any]] = []
    for trigger, source, dest, guards in TABLE:
        if dest == NEXT_RUNG:
            for previous, following in zip(ladder.rungs, ladder.rungs[1:], strict=False):
                conditions = [g for g in guards if g != "left_previous_rung"] + [_left_rung_guard(previous)]
                transitions.append(
                    {"trigger": trigger, "source": source, "dest": following.state_name, "conditions": conditions}
                )
            continue
        if "left_last_rung" in guards:
            conditions = [g for g in guards if g != "left_last_rung"] + [_left_rung_guard(ladder.last)]
            transitions.append({"trigger": trigger, "source": source, "dest": dest, "conditions": conditions})
            continue
        sources = [r.state_name for r in ladder.rungs] if source == RUNG else [source]
        for src in sources:
            target = None if dest == SAME else dest  # None: an internal transition (journaled, no state change)
            transitions.append({"trigger": trigger, "source": src, "dest": target, "conditions": list(guards)})
    return states, transitions


@cache
def build_machine(ladder: Ladder) -> Machine:
    """The (shared, cached) machine for a ladder; models are passed per event, never registered.

    ``model_override=True``: transitions binds nothing onto the model, since Dispatch has a typed method for
    every trigger.
    """
    states, transitions = machine_definition(ladder)
    return Machine(
        model=None,
        states=[s["name"] for s in states],  # labels are for diagrams (GraphMachine) only
        transitions=transitions,
        initial=ladder.first.state_name,
        auto_transitions=False,
        send_event=True,
        before_state_change=["record_step"],
        model_override=True,
    )


StepOrder = dict[str, Callable[[Any], str | None]]
"""Per state: a function of the model that returns the trigger of the first row whose guards all hold, or None."""


@cache
def step_order(ladder: Ladder) -> StepOrder:
    """For each state, the rows a look tries, in table order, compiled into one function of the model.

    The function is generated from TABLE (as namedtuple generates its class): one ``if`` per row, its guards joined
    with ``and`` in the order written, so a look asks the same questions in the same order as the table says, at the
    cost of plain method calls. External triggers (submit, pause) are left out: they are told, never tried.
    """
    _, transitions = machine_definition(ladder)
    rows: dict[str, list[str]] = {}
    for t in transitions:
        if t["trigger"] in EXTERNAL:
            continue
        tests = [f"d.{g}()" if isinstance(g, str) else f"d.rung_index == {g.rung_index}" for g in t["conditions"]]
        rows.setdefault(t["source"], []).append(
            f"    if {' and '.join(tests) or 'True'}:\n        return {t['trigger']!r}"
        )
    order: StepOrder = {}
    for state, body in rows.items():
        source = "def next_step(d):\n" + "\n".join(body) + "\n    return None\n"
        namespace: dict[str, Any] = {}
        exec(compile(source, f"<step order of {state}>", "exec"), namespace)  # noqa: S102 - our own table, no input
        function = namespace["next_step"]
        function.__doc__ = source
        order[state] = function
    return order
