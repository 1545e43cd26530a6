"""The ``history`` table: a dispatch's entries (journal/history.py) drawn with times, states and reasons.

``HistoryEntry`` and ``history_entries`` are re-exported from dispatch_history.py, where the read model lives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from rich.console import RenderableType

from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import LADDER_LANE, Trigger
from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.ui.paid import paid_words
from fellows_fsm.ui.snapshot import shown_label
from fellows_fsm.ui.table import Cell, Column, FixedTable
from fellows_fsm.ui.words import clock, explain_reason

__all__ = ["history_table"]


def history_table(
    row: DispatchRow, entries: Sequence[HistoryEntry], *, paid: PaidRun | None = None, now: float | None = None
) -> RenderableType:
    """Every transition of a dispatch with time, from, to, trigger, QoS, SLURM job and pending reason; with a
    ``cluster`` column (each step's SLURM lane) when its ladder walks several clusters. A budget_wait step reads as
    the reason it waits; with a paid run, a line under the table says its lane, GPU-hours and cost (as of ``now``,
    default the wall clock) and, while it may still spend, its bound."""
    several = len({str(r.get("lane", LADDER_LANE)) for r in row.ladder}) > 1
    day = datetime.fromtimestamp(entries[0].at if entries else row.created_at).strftime("%Y-%m-%d")
    columns = [Column("time", min_width=None), Column("trigger", min_width=None), Column("to", min_width=None)]
    if several:
        columns.append(Column("cluster", min_width=None))
    columns += [
        Column("QoS", min_width=None),
        Column("job", min_width=None),
        Column("reason, note", min_width=24, below=True),  # wrapped in its column, or under the row: never cut
    ]
    rows: list[tuple[Cell, ...]] = []
    for entry in entries:
        reason: Cell = ""
        if entry.trigger == Trigger.BUDGET_WAIT:
            # Its note is why it waits: said as a reason, with what happens meanwhile.
            where = f" on {entry.qos}" if entry.qos else ""
            reason = (f"{entry.note or 'budget'}  (its job waits{where} until the budget has room)", "yellow")
        elif entry.reason:
            said = entry.reason
            if entry.trigger == "park":
                said += f": {explain_reason(entry.reason, entry.qos)}"
            reason = said + (f"  {entry.note}" if entry.note else "")
        elif entry.note:
            reason = (entry.note, "italic dim")
        # The state's parentheses repeat the QoS (and cluster) the next columns show: left out there.
        shown = {f"({entry.qos})", f"({entry.qos}@{entry.cluster})"} if several else {f"({entry.qos})"}
        to = entry.dest.split("(", 1)[0] if entry.qos and any(s in entry.dest for s in shown) else entry.dest
        cells: list[Cell] = [clock(entry.at), entry.trigger, (shown_label(to), "cyan")]
        if several:
            cells.append(entry.cluster or "")
        rows.append((*cells, entry.qos or "", entry.slurm_job_id or "", reason))
    caption = None
    if paid is not None:
        caption = (
            f"paid run on {paid.lane} ({row.label}, {paid.status}): "
            f"{paid_words(paid, time.time() if now is None else now)}"
            + (f" at {paid.price_per_gpu_hour:g} per GPU-hour" if paid.price_per_gpu_hour is not None else "")
        )
    return FixedTable(
        columns, rows, title=f"dispatch {row.id} · {row.spec.get('name', '')} · {day} (local time)", caption=caption
    )
