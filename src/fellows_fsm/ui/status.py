"""``fellows-fsm status``: the journal's dispatches, one row each, within 80 columns.

Renders the rows the CLI read (a FixedTable: ``--all`` may list tens of thousands); it never reads the journal.
A dispatch with a paid run shows its GPU-hours and cost in a ``GPU-h·cost`` column (only when one is listed);
one that may still spend says its bound, and one the budget keeps on its last free rung says why, on a line
under the table (few: they cost money or wait for it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from rich.console import Group, RenderableType
from rich.text import Text

from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import LADDER_LANE, PaidStatus
from fellows_fsm.journal.snapshot import cluster_of
from fellows_fsm.ui.paid import paid_cell, paid_words
from fellows_fsm.ui.snapshot import Listed, shown_state, state_style, status_words
from fellows_fsm.ui.table import Cell, Column, FixedTable
from fellows_fsm.ui.words import short_when

__all__ = ["STATUS_COLUMNS", "status_table"]

STATUS_COLUMNS = (
    Column("dispatch", min_width=None),  # the id a user copies: never cut
    Column("name", max_width=24, min_width=8),
    Column("state", min_width=None),
    Column("job", min_width=None),
    Column("updated", min_width=5, drop=1),
)
CLUSTER_COLUMN = Column("cluster", max_width=16, min_width=7, drop=2)
"""Shown after ``state`` once a listed dispatch is on another cluster than fellows (one cluster: as before); on a
narrow console it gives way first, since the state and the job id name a cluster other than fellows too."""
PAID_COLUMN = Column("GPU-h·cost", min_width=None)
"""Shown after ``job`` once a listed dispatch has a paid run (none: as before)."""


def status_table(
    rows: Sequence[Listed],
    *,
    updated: Mapping[str, float],
    paid: Mapping[str, PaidRun] | None = None,
    budget: Mapping[str, str] | None = None,
    now: float | None = None,
    ended: Mapping[str, str] | None = None,
) -> RenderableType:
    """The journal's dispatches, one row each (``updated`` maps a dispatch id to its last change); fits 80 columns.

    ``rows`` are Snapshots, or the journal's Listings (what ``status --all`` reads). Once one of them is on another
    SLURM cluster than fellows, a ``cluster`` column names each one's (that of its job, or of the rung in hand).
    ``paid`` maps a dispatch id to its paid run: once one listed has one, a ``GPU-h·cost`` column says its
    GPU-hours and cost as of ``now`` (default: the wall clock), and a line under the table the bound of each that
    may still spend. ``budget`` maps a dispatch id to why the budget keeps it on its last free rung: one line each
    under the table; ``ended`` to how its job ended (result, exit code, when, how long, GPU-hours): one line each.
    """
    at = time.time() if now is None else now
    runs = paid or {}
    lines = []
    for snap in rows:
        run = runs.get(snap.dispatch_id)
        if run is not None and run.status == PaidStatus.CANCELLING:
            said = f" ({run.note})" if run.note else ""
            lines.append(
                Text(
                    f"{snap.dispatch_id} on {run.lane}: being cancelled, its delete not taken yet{said}; asked again "
                    f"each poll: {paid_words(run, at)}",
                    style="yellow",
                )
            )
        elif run is not None and run.live:
            lines.append(Text(f"{snap.dispatch_id} on {run.lane}: {paid_words(run, at)}", style="yellow"))
        why = (budget or {}).get(snap.dispatch_id)
        if why:
            lines.append(Text(f"{snap.dispatch_id} waits on its last free rung: {why}", style="yellow"))
        words = (ended or {}).get(snap.dispatch_id)
        if words:
            lines.append(Text(f"{snap.dispatch_id} ended: {words}", style="dim"))
    table = _table(rows, updated, runs, at)
    return Group(table, *lines) if lines else table


def _table(
    rows: Sequence[Listed], updated: Mapping[str, float], paid: Mapping[str, PaidRun], now: float
) -> RenderableType:
    today = datetime.now().strftime("%Y-%m-%d")
    styles: dict[str, str] = {}  # a style per shown state, looked up once
    clusters = [cluster_of(snap.job_id, snap.label) or (LADDER_LANE if snap.qos else None) for snap in rows]
    several = any(c not in (None, LADDER_LANE) for c in clusters)

    def row(snap: Listed) -> tuple[str, str, tuple[str, str], str, str]:
        at = updated.get(snap.dispatch_id)
        style = "cyan"
        if snap.final:
            shown = shown_state(snap)
            style = styles.get(shown) or styles.setdefault(shown, state_style(shown))
        return (
            snap.dispatch_id,
            snap.name,
            (status_words(snap), style),
            snap.job_id or "-",
            short_when(at, today) if at is not None else "",
        )

    columns = list(STATUS_COLUMNS)
    cells: Iterable[tuple[Cell, ...]] = (row(snap) for snap in rows)
    if any(snap.dispatch_id in paid for snap in rows):
        columns.insert(4, PAID_COLUMN)
        cells = (
            (*r[:4], paid_cell(run, now) if (run := paid.get(snap.dispatch_id)) is not None else "", *r[4:])
            for r, snap in zip(cells, rows, strict=True)
        )
    if several:
        columns.insert(3, CLUSTER_COLUMN)
        cells = ((*r[:3], c or "-", *r[3:]) for r, c in zip(cells, clusters, strict=True))
    return FixedTable(columns, cells)
