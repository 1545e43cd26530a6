"""The live views: the panel that follows one dispatch (submit, demo) and the table of every dispatch a watch drives.

Renderables only, redrawn by the CLI's live loop with the time passed in as ``now``; nothing here polls or prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import PaidStatus, State
from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.journal.snapshot import Snapshot
from fellows_fsm.ui.paid import cost_words, hours_words, paid_words
from fellows_fsm.ui.snapshot import left_ladder, shown_label, shown_state, state_style
from fellows_fsm.ui.table import Cell, Column, FixedTable
from fellows_fsm.ui.words import clock, explain_reason, gpu_words, span

__all__ = ["dispatch_panel", "watch_table"]


def _ladder_line(snap: Snapshot, next_lane: str | None) -> Text:
    """``high-eur ✗ → normal-eur ● → low-eur → gcp``: the rungs left behind, the current one, those ahead."""
    text = Text()
    current = len(snap.ladder) if left_ladder(snap) else snap.rung_index
    for i in range(len(snap.ladder)):
        qos = snap.where(i)  # inst-high@inst on another cluster
        if i:
            text.append(" → ", style="dim")
        if i < current:
            text.append(f"{qos} ✗", style="dim strike")
        elif i == current:
            text.append(f"{qos} ●", style="bold cyan")
        else:
            text.append(qos)
    lane = snap.lane if snap.lane not in snap.clusters else next_lane  # handed on, or the lane after the ladder
    if lane is not None and not snap.pinned:
        text.append(" → ", style="dim")
        text.append(f"{lane} ●" if current == len(snap.ladder) else lane, style="bold yellow" if current else "yellow")
    return text


def _qos_words(snap: Snapshot) -> str:
    """The QoS in hand, with its cluster off fellows (``inst-high@inst``), or ``-``."""
    i = snap.rung_index
    if snap.qos and i < len(snap.ladder) and snap.ladder[i] == snap.qos:
        return snap.where(i)
    return snap.qos or "-"


def _job_words(snap: Snapshot) -> Text:
    if snap.job_id is None and not snap.ladder:  # pinned to a lane: no SLURM job is ever queued for it
        return Text(f"none: lane {snap.lane} runs it", style="dim")
    if snap.job_id is None:
        return Text("not queued yet", style="dim")
    text = Text(snap.job_id, style="bold")
    if snap.job_state:
        text.append(f" ({snap.job_state})", style="dim")
    return text


def _headline(snap: Snapshot) -> str:
    limit = f", --time {span(snap.time_limit_seconds)}" if snap.time_limit_seconds else ""
    return f"dispatch {snap.dispatch_id} · {snap.name} ({gpu_words(snap.gpus)}{limit})"


def _paid_rows(grid: Table, run: PaidRun, state: str, now: float) -> None:
    """The paid run's rows of the panel: its lane and state, its GPU-hours and cost so far, and while it may still
    spend, the bound its time limit gives."""
    paid = Text(f"{run.lane} · {state}", style=state_style(state)).append(f"  ({run.status})", style="dim")
    grid.add_row("paid", paid)
    if run.status == PaidStatus.UNFOLLOWED:
        grid.add_row("cost", Text(paid_words(run, now), style="yellow"))
        return
    so_far = " so far" if run.live else ""
    hours = Text(f"{hours_words(run.gpu_hours(now))}{so_far}")
    cost = run.cost(now)
    money = Text(f"{cost_words(cost)}{so_far if cost is not None else ''}")
    if run.price_per_gpu_hour is not None:
        money.append(f"  at {run.price_per_gpu_hour:g} per GPU-hour", style="dim")
    else:
        money.append("  (the lane has no price_per_gpu_hour)", style="dim")
    if run.live:
        if math.isinf(run.bound_gpu_hours):
            hours.append("   no bound: the job has no time limit", style="yellow")
        else:
            hours.append(f"   ≤ {hours_words(run.bound_gpu_hours)} by its time limit", style="yellow")
            if run.bound_cost is not None:
                money.append(f"   ≤ {cost_words(run.bound_cost)} by its time limit", style="yellow")
    grid.add_row("GPU-hours", hours)
    grid.add_row("cost", money)


def dispatch_panel(
    snap: Snapshot,
    *,
    now: float,
    steps: Sequence[HistoryEntry] = (),
    next_lane: str | None = None,
    unreachable_since: float | None = None,
    message: str | None = None,
) -> RenderableType:
    """The live view of one dispatch: rung and QoS, SLURM job, why it waits, park countdown, worst case."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    on_ladder = snap.ladder and not left_ladder(snap)
    rung = f"   rung {snap.rung_index + 1} of {len(snap.ladder)}" if on_ladder else ""
    state = shown_state(snap)
    grid.add_row("state", Text(state, style=state_style(state)).append(rung, style="dim"))
    if snap.ladder:
        grid.add_row("ladder", _ladder_line(snap, next_lane))
    grid.add_row("QoS", Text((snap.qos if on_ladder or snap.label == State.RUNNING else None) or "-"))
    if snap.several_clusters and (on_ladder or snap.label == State.RUNNING):
        grid.add_row("cluster", Text(snap.cluster or "-"))
    grid.add_row("SLURM job", _job_words(snap))
    if snap.paid is not None:
        _paid_rows(grid, snap.paid, state, now)
    if snap.budget is not None:
        grid.add_row("budget", Text(snap.budget.removeprefix("budget: "), style="bold yellow"))
    if not snap.final:
        pending = snap.job_state == "PENDING" or (snap.job_id is not None and snap.job_state is None)
        if pending and snap.paid is None:  # a paid run's SLURM job is gone: its lane has it
            words = explain_reason(snap.reason, snap.qos, snap.job_id) if snap.job_state else "looking..."
            why = Text(words)
            if snap.reason:
                why.append(f"  ({snap.reason})", style="dim")
            grid.add_row("waiting", why)
        if snap.pinned:
            where = snap.qos if snap.qos else f"lane {snap.lane}"  # a dispatch pinned to a command lane has no QoS
            grid.add_row("parks in", Text(f"never: pinned to {where}", style="dim"))
        elif snap.budget is not None:
            grid.add_row("parks in", Text("once the budget has room (its job waits here meanwhile)", style="yellow"))
        elif snap.deadline is not None:
            left = snap.deadline - now
            grid.add_row(
                "parks in",
                Text(span(left) if left > 0 else "now", style="bold" if left > 0 else "bold yellow").append(
                    f"   at {clock(snap.deadline)}", style="dim"
                ),
            )
        if snap.worst_case is not None and next_lane is not None and snap.budget is None:
            grid.add_row(
                f"{next_lane} in",
                Text(f"{span(snap.worst_case - now)} at worst", style="yellow").append(
                    f"   at {clock(snap.worst_case)}", style="dim"
                ),
            )
    elif snap.outcome:
        grid.add_row("outcome", Text(snap.outcome, style=state_style(snap.label)))
    if unreachable_since is not None:
        grid.add_row(
            "SLURM",
            Text(f"not answering for {span(now - unreachable_since)}; retrying with back-off", style="bold red"),
        )
    if message:
        grid.add_row("", Text(message, style="yellow"))
    panel = Panel(grid, title=_headline(snap), title_align="left", border_style="cyan", expand=False)
    parts: list[RenderableType] = [panel]
    if steps:
        parts.append(_steps_tail(steps))
    return Group(*parts)


def _steps_tail(entries: Sequence[HistoryEntry], keep: int = 6) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(style="dim")
    for entry in entries[-keep:]:
        table.add_row(clock(entry.at), entry.trigger, f"→ {shown_label(entry.dest)}", entry.detail())
    return table


def watch_table(snaps: Sequence[Snapshot], *, now: float, next_lane: str | None = None) -> RenderableType:
    """Every dispatch a watch drives, one row each, with its countdowns; at 80 columns the ids stay whole, the QoS
    (which the state repeats) gives way and what it waits for goes under its row (ui/table.py)."""
    columns = (
        Column("dispatch", min_width=None),
        Column("name", max_width=24, min_width=8),
        Column("state", min_width=None),
        Column("QoS", min_width=None, drop=3),
        Column("job", min_width=None),
        Column("waiting", min_width=20, below=True),
        Column("parks in", min_width=None, drop=1, below=True, labelled=True),
        Column(f"{next_lane or 'next'} in", min_width=None, drop=2, below=True, labelled=True),
    )
    rows: list[tuple[Cell, ...]] = []
    for snap in snaps:
        waiting = explain_reason(snap.reason, snap.qos, snap.job_id) if snap.job_state == "PENDING" else ""
        if snap.budget is not None:
            waiting = snap.budget
        elif snap.paid is not None:
            waiting = f"{snap.paid.lane}: {paid_words(snap.paid, now)}"
        parks = "pinned" if snap.pinned else (span(snap.deadline - now) if snap.deadline is not None else "")
        worst = span(snap.worst_case - now) if snap.worst_case is not None and next_lane else ""
        if snap.budget is not None:
            parks, worst = "budget", "budget"
        state = shown_state(snap)
        styled = (state, state_style(state))
        rows.append((snap.dispatch_id, snap.name, styled, _qos_words(snap), snap.job_id or "-", waiting, parks, worst))
    return FixedTable(columns, rows, title=f"live dispatches ({len(snaps)})")
