"""A dispatch's path drawn on the state diagram: mermaid text, Graphviz DOT and SVG, visited states and edges marked.

Returns text or bytes; the optional graphviz package and Graphviz's ``dot`` are looked for only when asked for.
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from collections.abc import Sequence
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.machine import machine_definition
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.ui.words import clock

__all__ = ["DOT_MISSING", "GRAPHVIZ_MISSING", "dot_source", "path_mermaid", "svg"]


def _visits(entries: Sequence[HistoryEntry]) -> tuple[dict[str, list[str]], dict[tuple[str, str], list[str]]]:
    """State names -> the times entered; (source, dest) names -> the times taken ('[*]' is the start)."""
    states: dict[str, list[str]] = defaultdict(list)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for entry in entries:
        when = clock(entry.at)
        states[entry.dest_name].append(when)
        edges[(entry.source_name or "[*]", entry.dest_name)].append(when)
    return states, edges


def _graph_states(ladder: Ladder, entries: Sequence[HistoryEntry]) -> list[dict[str, Any]]:
    states, _ = machine_definition(ladder)
    visits, _ = _visits(entries)
    for state in states:
        times = visits.get(state["name"])
        if times:
            state["label"] = f"{state['label']}\\n{', '.join(times)}"
    return states


def path_mermaid(ladder: Ladder, entries: Sequence[HistoryEntry], *, title: str) -> str:
    """The mermaid diagram of ``ladder`` with a dispatch's path marked: visited states, taken edges, times."""
    from fellows_fsm.ui.diagram import mermaid  # noqa: PLC0415 - diagram imports GraphMachine; only this needs it

    visits, edges = _visits(entries)
    current = entries[-1].dest_name if entries else None
    out: list[str] = []
    state_line = re.compile(r'^(\s*)state "([^"]*)" as (\S+)$')
    edge_line = re.compile(r"^(\s*)(\S+) --> (\S+): (.*)$")
    start_line = re.compile(r"^(\s*)\[\*\] --> (\S+)$")
    for line in mermaid(ladder, title=title).splitlines():
        if match := state_line.match(line):
            indent, label, name = match.groups()
            times = visits.get(name)
            out.append(f'{indent}state "{label} · {", ".join(times)}" as {name}' if times else line)
        elif match := edge_line.match(line):
            indent, src, dst, label = match.groups()
            taken = edges.get((src, dst))
            out.append(f"{indent}{src} --> {dst}: {label} ✔ {', '.join(taken)}" if taken else line)
        elif (match := start_line.match(line)) and edges.get(("[*]", match[2])):
            out.append(f"{line}: submit ✔ {', '.join(edges[('[*]', match[2])])}")
        else:
            out.append(line)
    extra = [name for name in visits if name not in {s["name"] for s in machine_definition(ladder)[0]}]
    for entry in entries:
        if entry.dest_name in extra and entry.source_name:
            out.append(f"  {entry.source_name} --> {entry.dest_name}: {entry.trigger} ✔ {clock(entry.at)}")
    visited = [name for name in visits if name != current]
    out.append("  classDef visited fill:#dbeafe,stroke:#2563eb,stroke-width:2px")
    out.append("  classDef current fill:#bbf7d0,stroke:#15803d,stroke-width:3px")
    if visited:
        out.append(f"  class {','.join(visited)} visited")
    if current is not None:
        out.append(f"  class {current} current")
    return "\n".join(out) + "\n"


GRAPHVIZ_MISSING = (
    "this format needs the graphviz Python package: pip install 'fellows-fsm[graphviz]' "
    "(and for svg Debian's graphviz: apt-get install graphviz)"
)
DOT_MISSING = "--format svg needs Graphviz's dot program: apt-get install graphviz (Debian/Ubuntu)"


def dot_source(
    ladder: Ladder, entries: Sequence[HistoryEntry] = (), *, title: str = "dispatch lifecycle", spine: bool = False
) -> str:
    """The Graphviz DOT of ``ladder`` (transitions' GraphMachine, graphviz engine), a dispatch's path marked;
    ``spine``: only its spine (diagram.py: ``spine_definition``), no path.

    Raises FellowsError naming what to install when the graphviz Python package is missing.
    """
    if find_spec("graphviz") is None:
        raise FellowsError(GRAPHVIZ_MISSING)
    from fellows_fsm.ui.diagram import graph_machine, spine_definition  # noqa: PLC0415 - only diagrams need graphs

    if spine:
        spine_states, spine_transitions = spine_definition(ladder)
        _, drawing = graph_machine(
            ladder, title=title, engine="graphviz", states=spine_states, transitions=spine_transitions
        )
        spine_source: str = drawing.get_graph().source  # get_graph is bound onto the model by GraphMachine
        return spine_source

    _, transitions = machine_definition(ladder)
    visits, edges = _visits(entries)
    current = entries[-1].dest_name if entries else None
    known = {s["name"] for s in machine_definition(ladder)[0]}
    states = _graph_states(ladder, entries)
    for entry in entries:  # handed off / withdrawn are outside the ladder machine: drawn as extra states
        if entry.dest_name not in known:
            known.add(entry.dest_name)
            states.append({"name": entry.dest_name, "label": f"{entry.dest}\\n{clock(entry.at)}"})
            if entry.source_name:
                transitions = [
                    *transitions,
                    {"trigger": entry.trigger, "source": entry.source_name, "dest": entry.dest_name},
                ]

    machine, model = graph_machine(ladder, title=title, engine="graphviz", states=states, transitions=transitions)
    graph = machine.model_graphs[id(model)]
    for src, dst in edges:
        if src != "[*]":
            graph.set_previous_transition(src, dst)
    for name in visits:
        graph.set_node_style(name, "previous")
    if current is not None:
        graph.set_node_style(current, "active")
    digraph = model.get_graph()  # get_graph is bound onto the model by GraphMachine
    for i, line in enumerate(digraph.body):
        match = re.match(r'^\t(\S+) -> (\S+) \[label="(.*?)"(.*)\]$', line.rstrip("\n"))
        if match is None:
            continue
        src, dst, label, rest = match.groups()
        taken = edges.get((src, dst))
        if taken:
            digraph.body[i] = f'\t{src} -> {dst} [label="{label}\\n✔ {", ".join(taken)}"{rest} penwidth=2.5]\n'
    source: str = digraph.source
    return source


def svg(dot: str) -> bytes:
    """Render DOT text to SVG with Graphviz's ``dot``; FellowsError naming what to install if it is missing."""
    if find_spec("graphviz") is None:
        raise FellowsError(GRAPHVIZ_MISSING)
    if shutil.which("dot") is None:
        raise FellowsError(DOT_MISSING)
    graphviz = import_module("graphviz")  # the optional [graphviz] extra
    rendered: bytes = graphviz.Source(dot).pipe(format="svg")
    return rendered
