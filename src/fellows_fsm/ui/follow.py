"""Following dispatches live: the panel of one dispatch (submit) or the table of all (watch), redrawn between polls
while this process drives the journal, or while it reads what another process drives."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs
import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from fellows_fsm.api import Fellows
from fellows_fsm.core.effects import Step
from fellows_fsm.core.vocab import LADDER_LANE, PAID_LIVE_STATES, Outcome, State, Trigger
from fellows_fsm.driver.reports import Progress
from fellows_fsm.journal.history import budget_reason, history_entries
from fellows_fsm.journal.snapshot import Snapshot, cluster_of, journaled, paid_facts
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui.app import REFRESH_SECONDS, next_lane_of
from fellows_fsm.ui.live import dispatch_panel, watch_table
from fellows_fsm.ui.paid import paid_words
from fellows_fsm.ui.wait import end_words
from fellows_fsm.ui.words import span

__all__ = ["LiveState", "follow_live", "live", "summary", "watch_view"]

COUNTDOWN_ROWS = 200
"""The most live dispatches the watch table rebuilds from their steps for countdowns on every redraw."""


def summary(dispatch_id: str, journal: Journal) -> str:
    row = journal.dispatch(dispatch_id)
    assert row is not None
    handoff = journal.handoff(dispatch_id)
    last = (
        str(row.ladder[-1].get("lane", LADDER_LANE)) if row.ladder else LADDER_LANE
    )  # the last SLURM lane of its ladder
    end = journal.ends([dispatch_id]).get(dispatch_id) if row.label == State.ENDED else None
    if end is not None:
        return f"dispatch {row.id} ended: {end_words(end)} (SLURM job {end.job_id or '-'})"
    if row.label == "RUNNING":
        cluster = cluster_of(row.job_id) or LADDER_LANE
        where = row.qos if cluster == LADDER_LANE else f"{row.qos}@{cluster}"  # as the rung's label says it
        return f"dispatch {row.id} is RUNNING on {where} as SLURM job {row.job_id}"
    if handoff is not None and row.label == State.HANDED_OFF:
        return f"dispatch {row.id} was handed to {handoff.lane} ({shlex.join(handoff.argv)}: exit 0)"
    if handoff is not None and row.label == State.HANDOFF_UNKNOWN:
        return f"dispatch {row.id} went to {handoff.lane}, but how its command ended is unknown: check {handoff.lane}"
    run = journal.paid_run(dispatch_id) if handoff is not None else None
    if run is not None and row.label in (*PAID_LIVE_STATES, State.PAID_DONE, State.PAID_FAILED):
        if row.final:
            return f"dispatch {row.id} ended {row.label} on {run.lane}: {paid_words(run, time.time())}"
        return f"dispatch {row.id} is {row.label} on {run.lane}: {paid_words(run, time.time())}; the driver follows it"
    if not row.final:
        return f"dispatch {row.id} is {row.label} (SLURM job {row.job_id or '-'}); the background driver walks it"
    if row.label == State.REFUSED:
        return f"dispatch {row.id} was refused by SLURM ({row.outcome.removeprefix(Outcome.REJECTED)})"
    if row.label == State.NO_LANE_LEFT:
        return f"dispatch {row.id} parked out of every rung, and no lane follows {last} in [router] order"
    return f"dispatch {row.id} ended as {row.label} ({row.outcome})"


@attrs.define
class LiveState:
    """What the live view shows besides the journal: since when SLURM has not answered, the last failures."""

    unreachable_since: float | None = None
    message: str | None = None


def follow_live(fellows: Fellows, dispatch_id: str, console: Console) -> None:
    """Follow one dispatch with a live view until it is final: driving every live dispatch while this process
    drives the journal, else reading the journal that the driver writes (its countdowns included)."""
    journal = fellows.journal
    next_lane = next_lane_of(fellows.config)
    state = LiveState()

    def render() -> RenderableType:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        handoff = journal.handoff(dispatch_id)
        router = fellows.router
        live = next((d for d in router.on_ladder if d.id == dispatch_id), None) if router is not None else None
        if live is not None:
            budget = paid_facts(journal, row, handoff)[1]
            snap = attrs.evolve(Snapshot.of_dispatch(live), budget=budget)
        else:
            snap = journaled(journal, row, handoff)
        entries = history_entries(row, journal.steps(dispatch_id), journal.jobs(dispatch_id), handoff)
        return dispatch_panel(
            snap,
            now=fellows.clock.now(),
            steps=entries,
            next_lane=next_lane,
            unreachable_since=state.unreachable_since,
            message=state.message,
        )

    live(console, render, state, lambda on_tick, sleep: fellows.follow(dispatch_id, on_tick=on_tick, sleep=sleep))


_T = TypeVar("_T")


def live(
    console: Console,
    render: Callable[[], RenderableType],
    state: LiveState,
    run: Callable[[Callable[[Progress], None], Callable[[float], None]], _T],
) -> _T:
    """Run ``run(on_tick, sleep)`` (a follow or a watch) under a rich Live view, redrawn between polls too."""
    was_driving: list[bool] = []
    with Live(render(), console=console, auto_refresh=False, transient=False) as live:

        def on_tick(progress: Progress) -> None:
            if was_driving and not was_driving[-1] and progress.driving:
                click.echo(
                    "fellows-fsm: note: the router that drove the journal stopped; this process drives it now "
                    "(every live dispatch)",
                    err=True,
                )
            was_driving[:] = [progress.driving]
            report = progress.report
            if report is not None and report.unreachable:
                state.unreachable_since = state.unreachable_since or report.at
            else:
                state.unreachable_since = None
            state.message = "; ".join(report.failures) or None if report is not None else None
            live.update(render(), refresh=True)

        def sleep(seconds: float) -> None:
            end = time.monotonic() + seconds
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(REFRESH_SECONDS, left))
                live.update(render(), refresh=True)

        try:
            result = run(on_tick, sleep)
            live.update(render(), refresh=True)
        finally:
            if not console.is_terminal:
                # rich ends the last frame with a newline only on a terminal: end it here, also when Ctrl-C or an
                # error stops the follow, so what is said next (detached: ..., an error) starts a line of its own.
                live.stop()
                console.line()
    return result


def _waiting(steps: Sequence[Step]) -> str | None:
    """Why the budget keeps a driven dispatch on its last free rung, while its last step says it waits for it."""
    return budget_reason(steps) if steps and steps[-1].trigger == Trigger.BUDGET_WAIT else None


def watch_view(fellows: Fellows, state: LiveState, next_lane: str | None) -> RenderableType:
    """The watch table: the router's live dispatches while this process drives, else the journal's."""
    now = fellows.clock.now()
    router = fellows.router
    if router is not None:
        snaps = [attrs.evolve(Snapshot.of_dispatch(d), budget=_waiting(d.history)) for d in router.on_ladder]
        # A paid job the lane has is live too, off the ladder: from the journal.
        journal = fellows.journal
        paid = [r for r in journal.dispatches(live_only=True) if r.state in PAID_LIVE_STATES]
        snaps += [journaled(journal, r, journal.handoff(r.id)) for r in paid]
        busy = router.busy
    else:
        journal = fellows.journal
        rows = journal.dispatches(live_only=True)
        # Countdowns are rebuilt from each live row's steps; past a few hundred rows the table shows states only.
        read = journaled if len(rows) <= COUNTDOWN_ROWS else (lambda _, r, h: Snapshot.of_row(r, h))
        snaps = [read(journal, r, journal.handoff(r.id)) for r in rows]
        busy = bool(rows)
    if not snaps and not busy:
        return Text("every dispatch is final:", style="dim")
    parts: list[RenderableType] = [watch_table(snaps, now=now, next_lane=next_lane)]
    if state.unreachable_since is not None:
        gone = span(now - state.unreachable_since)
        parts.append(Text(f"SLURM not answering for {gone}; retrying with back-off", style="bold red"))
    if state.message:
        parts.append(Text(state.message, style="yellow"))
    return Group(*parts)
