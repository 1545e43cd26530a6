"""``fellows-fsm status``: the journal's dispatches, one row each, within 80 columns.

Renders the rows the CLI read (a FixedTable: ``--all`` may list tens of thousands); it never reads the journal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rich.console import RenderableType

from fellows_fsm.core.vocab import FELLOWS
from fellows_fsm.ui.snapshot import Listed, cluster_of, shown_state, state_style, status_words
from fellows_fsm.ui.table import Column, FixedTable
from fellows_fsm.ui.words import short_when

__all__ = ["STATUS_COLUMNS", "status_table"]

STATUS_COLUMNS = (
    Column("dispatch"),
    Column("name", max_width=24),
    Column("state"),
    Column("job"),
    Column("updated"),
)
CLUSTER_COLUMN = Column("cluster", max_width=16)
"""Shown after ``state`` once a listed dispatch is on another cluster than fellows (one cluster: as before)."""


def status_table(rows: Sequence[Listed], *, updated: Mapping[str, float]) -> RenderableType:
    """The journal's dispatches, one row each (``updated`` maps a dispatch id to its last change); fits 80 columns.

    ``rows`` are Snapshots, or the journal's Listings (what ``status --all`` reads). Once one of them is on another
    SLURM cluster than fellows, a ``cluster`` column names each one's (that of its job, or of the rung in hand).
    """
    today = datetime.now().strftime("%Y-%m-%d")
    styles: dict[str, str] = {}  # a style per shown state, looked up once
    clusters = [cluster_of(snap.job_id, snap.label) or (FELLOWS if snap.qos else None) for snap in rows]
    several = any(c not in (None, FELLOWS) for c in clusters)

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

    if not several:
        return FixedTable(STATUS_COLUMNS, (row(snap) for snap in rows))
    columns = (*STATUS_COLUMNS[:3], CLUSTER_COLUMN, *STATUS_COLUMNS[3:])
    cells = (row(snap) for snap in rows)
    return FixedTable(columns, ((*r[:3], c or "-", *r[3:]) for r, c in zip(cells, clusters, strict=True)))
