"""The ``history`` table: a dispatch's entries (journal/history.py) drawn with times, states and reasons.

``HistoryEntry`` and ``history_entries`` are re-exported from dispatch_history.py, where the read model lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.ui.words import clock, explain_reason

__all__ = ["history_table"]


def history_table(row: DispatchRow, entries: Sequence[HistoryEntry]) -> RenderableType:
    """Every transition of a dispatch with time, from, to, trigger, QoS, SLURM job and pending reason."""
    day = datetime.fromtimestamp(entries[0].at if entries else row.created_at).strftime("%Y-%m-%d")
    table = Table(
        title=f"dispatch {row.id} · {row.spec.get('name', '')} · {day} (local time)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("time", no_wrap=True)
    table.add_column("trigger", no_wrap=True)
    table.add_column("to", style="cyan", no_wrap=True)
    table.add_column("QoS", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("reason, note", min_width=20, ratio=1, overflow="fold")
    for entry in entries:
        reason = Text()
        if entry.reason:
            reason.append(entry.reason)
            if entry.trigger == "park":
                reason.append(f": {explain_reason(entry.reason, entry.qos)}", style="dim")
        if entry.note:
            reason.append(("  " if entry.reason else "") + entry.note, style="italic dim")
        table.add_row(
            clock(entry.at),
            entry.trigger,
            entry.dest.split("(", 1)[0] if entry.qos and f"({entry.qos})" in entry.dest else entry.dest,
            entry.qos or "",
            entry.slurm_job_id or "",
            reason,
        )
    return table
