"""The ``history`` table: a dispatch's entries (journal/history.py) drawn with times, states and reasons.

``HistoryEntry`` and ``history_entries`` are re-exported from dispatch_history.py, where the read model lives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import LADDER_LANE, Trigger
from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.ui.paid import paid_words
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
    table = Table(
        title=f"dispatch {row.id} · {row.spec.get('name', '')} · {day} (local time)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("time", no_wrap=True)
    table.add_column("trigger", no_wrap=True)
    table.add_column("to", style="cyan", no_wrap=True)
    if several:
        table.add_column("cluster", no_wrap=True)
    table.add_column("QoS", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("reason, note", min_width=20, ratio=1, overflow="fold")
    for entry in entries:
        reason = Text()
        if entry.reason:
            reason.append(entry.reason)
            if entry.trigger == "park":
                reason.append(f": {explain_reason(entry.reason, entry.qos)}", style="dim")
        if entry.trigger == Trigger.BUDGET_WAIT:
            # Its note is why it waits: said as a reason, with what happens meanwhile.
            reason.append(entry.note or "budget", style="yellow")
            where = f" on {entry.qos}" if entry.qos else ""
            reason.append(f"  (its job waits{where} until the budget has room)", style="dim")
        elif entry.note:
            reason.append(("  " if entry.reason else "") + entry.note, style="italic dim")
        # The state's parentheses repeat the QoS (and cluster) the next columns show: left out there.
        said = {f"({entry.qos})", f"({entry.qos}@{entry.cluster})"} if several else {f"({entry.qos})"}
        to = entry.dest.split("(", 1)[0] if entry.qos and any(s in entry.dest for s in said) else entry.dest
        cells = [clock(entry.at), entry.trigger, to]
        if several:
            cells.append(entry.cluster or "")
        table.add_row(*cells, entry.qos or "", entry.slurm_job_id or "", reason)
    if paid is not None:
        table.caption = (
            f"paid run on {paid.lane} ({row.label}, {paid.status}): "
            f"{paid_words(paid, time.time() if now is None else now)}"
            + (f" at {paid.price_per_gpu_hour:g} per GPU-hour" if paid.price_per_gpu_hour is not None else "")
        )
        table.caption_justify = "left"
    return table
