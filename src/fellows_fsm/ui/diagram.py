"""State diagrams drawn from the live machine definition (transitions' GraphMachine), never by hand.

Renders mermaid (no graphviz needed) and the generated page docs/state-diagram.md: the spine by default (the seed's
states, their park/cancel/resubmit/give-up loop and the paid tail, labelled by trigger only), every row on request.
It reads the machine definition and the guards' docstrings; it never runs a dispatch or touches the cluster.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from transitions import State
from transitions.extensions import GraphMachine

from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.lifecycle import TABLE
from fellows_fsm.core.machine import machine_definition
from fellows_fsm.core.vocab import FIXED_STATES, LANE_STATES, MEANING
from fellows_fsm.core.vocab import State as LifecycleState
from fellows_fsm.lanes.slurm.config import SlurmSettings

__all__ = [
    "SPINE_TAIL",
    "DiagramMachine",
    "graph_machine",
    "guard_names",
    "mermaid",
    "spine_definition",
    "spine_mermaid",
    "state_diagram_page",
]

SPINE_TAIL = (
    LifecycleState.HANDING_OFF,
    LifecycleState.PAID_QUEUED,
    LifecycleState.PAID_RUNNING,
    LifecycleState.PAID_DONE,
    LifecycleState.PAID_FAILED,
)
"""The paid tail the spine draws after FAILED_TO_GCP: handed to a followed paid lane, to its end."""
_SEED = (LifecycleState.PARKED, LifecycleState.CANCELLED, LifecycleState.RUNNING, LifecycleState.FAILED_TO_GCP)
_FREE_END = (LifecycleState.ENDED,)
"""The end the spine draws after RUNNING: its job followed until it ended (the walk's goal is RUNNING, its end
this)."""


def guards() -> tuple[Any, ...]:
    """Every guard the table names, in order of first use (the left_<qos> guards are made per rung)."""
    return tuple(dict.fromkeys(g for row in TABLE for g in row.guards))


def guard_names() -> tuple[str, ...]:
    """The names of the table's guards, in order of first use."""
    return tuple(g.__name__ for g in guards())


class _LabelledState(State):
    """A diagram state that carries its human label, e.g. ``SUBMITTED(high-eur)``."""

    def __init__(self, *args: Any, label: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.label = label or self.name


class DiagramMachine(GraphMachine):
    """A GraphMachine whose states carry human labels; drawing only, it never drives a Dispatch."""

    state_cls = _LabelledState


class _Drawing:
    """A stand-in model: the diagram machine needs one to draw, and it must never be a real Dispatch."""


def graph_machine(
    ladder: Ladder | None,
    *,
    title: str,
    engine: Literal["mermaid", "graphviz"] = "mermaid",
    states: list[dict[str, Any]] | None = None,
    transitions: list[dict[str, Any]] | None = None,
) -> tuple[GraphMachine, Any]:
    """A drawing machine for ``ladder`` (its definition, or the given states and transitions; None: the machine of a
    dispatch pinned straight to a command lane) and its model."""
    default_states, default_transitions = machine_definition(ladder)
    model = _Drawing()
    machine = DiagramMachine(
        model=model,
        states=default_states if states is None else states,
        transitions=default_transitions if transitions is None else transitions,
        initial=LifecycleState.HANDING_OFF if ladder is None else ladder.first.state_name,
        auto_transitions=False,
        graph_engine=engine,  # explicit: without it transitions silently picks another engine
        show_conditions=True,
        show_state_attributes=False,
        title=title,
    )
    return machine, model


def mermaid(ladder: Ladder | None, *, title: str = "dispatch lifecycle") -> str:
    """The mermaid ``stateDiagram-v2`` of the machine for ``ladder`` (None: a lane-pinned dispatch's), every row,
    guards on the edges."""
    return _draw(ladder, title)


def spine_definition(ladder: Ladder) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The spine of ``ladder``'s machine: the seed's states (its rungs, PARKED, CANCELLED, RUNNING, FAILED_TO_GCP), a
    free job's end (ENDED) and the paid tail, with every row between two of them that moves (one edge per trigger,
    no guards: a chart for a person; ``mermaid`` draws every row)."""
    states, transitions = machine_definition(ladder)
    names = {r.state_name for r in ladder.rungs} | set(_SEED) | set(_FREE_END) | set(SPINE_TAIL)
    kept: dict[tuple[str, str, str], dict[str, Any]] = {}
    for t in transitions:
        if t["source"] in names and t["dest"] in names and t["dest"] != t["source"]:
            key = (t["trigger"], t["source"], t["dest"])
            kept.setdefault(key, {"trigger": t["trigger"], "source": t["source"], "dest": t["dest"]})
    return [s for s in states if s["name"] in names], list(kept.values())


def spine_mermaid(ladder: Ladder, *, title: str = "dispatch lifecycle (spine)") -> str:
    """The mermaid ``stateDiagram-v2`` of ``ladder``'s spine (``spine_definition``), labelled by trigger only."""
    states, transitions = spine_definition(ladder)
    return _draw(ladder, title, states, transitions)


def _draw(
    ladder: Ladder | None,
    title: str,
    states: list[dict[str, Any]] | None = None,
    transitions: list[dict[str, Any]] | None = None,
) -> str:
    _, model = graph_machine(ladder, title=title, states=states, transitions=transitions)
    raw: str = model.get_graph().draw(None)  # get_graph is bound onto the model by GraphMachine
    lines = []
    for line in raw.splitlines():
        stripped = line.strip()
        if stripped == title:
            lines.append(f"title: {title}")  # transitions writes a bare title; front matter wants a key
        elif not stripped.startswith(("Class ", "classDef ")):
            # live-state styling is for a dispatch's own path, not the reference diagram
            lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.splitlines()[0] if doc else ""


def state_diagram_page(config: SlurmSettings | None = None) -> str:
    """The whole of docs/state-diagram.md: the diagram, its states, triggers and guards."""
    config = config or SlurmSettings(park_cap_seconds=600.0)
    ladder = config.ladder
    out = [
        "# The dispatch lifecycle",
        "",
        "<!-- Generated from the machine definition by `fellows-fsm diagram --format markdown "
        "-o docs/state-diagram.md`; do not edit by hand (a test fails when this file drifts). -->",
        "",
        f"The default fellows ladder ({' -> '.join(ladder.qos_names)}), each rung with its own park cap "
        f"(worst case before GCP: the sum of the caps, {config.worst_case_seconds:g} s at the default "
        "600 s).",
        "",
        "## The spine",
        "",
        "The seed's states, their park/cancel/resubmit/give-up loop and the paid tail, one edge per trigger "
        "(`fellows-fsm diagram`):",
        "",
        "```mermaid",
        spine_mermaid(ladder).rstrip("\n"),
        "```",
        "",
        "## Every row",
        "",
        "Every row of the table with its guards (`fellows-fsm diagram --full`):",
        "",
        "```mermaid",
        mermaid(ladder).rstrip("\n"),
        "```",
        "",
        "## States",
        "",
        "| state (label) | name in code | meaning |",
        "|---|---|---|",
    ]
    for rung in ladder.rungs:
        first = "first" if rung.index == 0 else f"rung {rung.index + 1}"
        out.append(
            f"| {rung.label} | `{rung.state_name}` | pending on {rung.qos} ({first}); "
            f"parks after its window of {rung.park_cap_seconds:g} s |"
        )
    out += [f"| {state} | `{state}` | {MEANING[state]} |" for state in FIXED_STATES]
    out += [
        "",
        "## A dispatch pinned straight to a command lane",
        "",
        "`submit --pin <lane>` never enters the ladder: its first step is `pin` (to HANDING_OFF), then the [budget]'s",
        "rows a walk asks on its last free rung (no_budget, budget_wait: before its command starts), then the lane",
        "command's rows of the same table (hand_off, re_run, handed_off, handoff_failed, handoff_unknown, and recall",
        "before its command ran), fired by the same engine on a `LaneDispatch` (core/lane.py), in the lane states",
        f"({', '.join(LANE_STATES)}). A ladder dispatch takes the same command rows after FAILED_TO_GCP.",
        "",
        "```mermaid",
        mermaid(None, title="a dispatch pinned to a command lane").rstrip("\n"),
        "```",
        "",
        "## Triggers",
        "",
        "| trigger | from | to | guards |",
        "|---|---|---|---|",
        "| submit | (new) | first rung | allowed once, only onto the first rung |",
        "| pin | (new) | HANDING_OFF | once, a dispatch pinned straight to a command lane (no ladder) |",
    ]
    for row in TABLE[2:]:
        told = " (told: fired by an event, never asked on a look)" if row.told else ""
        names = " & ".join(g.__name__ for g in row.guards) or "-"
        out.append(f"| {row.trigger} | {row.source} | {row.dest} | {names}{told} |")
    out += ["", "## Guards", "", "| guard | question |", "|---|---|"]
    for guard in guards():
        out.append(f"| `{guard.__name__}` | {_first_line(guard)} |")
    out.append("| `left_<qos>` | Is the job on that rung confirmed gone (one guard per rung, so rungs go in order)? |")
    return "\n".join(out) + "\n"
