"""``fellows-fsm status``: the journal's dispatches, one row each, within 80 columns.

Renders the rows the CLI read; it never reads the journal itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.ui.snapshot import Snapshot, shown_state, state_style, status_words
from fellows_fsm.ui.words import short_when

__all__ = ["status_table"]


def status_table(rows: Sequence[Snapshot], *, updated: Mapping[str, float]) -> RenderableType:
    """The journal's dispatches, one row each (``updated`` maps a dispatch id to its last change); fits 80 columns."""
    today = datetime.now().strftime("%Y-%m-%d")
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("dispatch", no_wrap=True)
    table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=24)
    table.add_column("state", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    for snap in rows:
        at = updated.get(snap.dispatch_id)
        words = status_words(snap)
        table.add_row(
            snap.dispatch_id,
            snap.name,
            Text(words, style=state_style(shown_state(snap)) if snap.final else "cyan"),
            snap.job_id or "-",
            short_when(at, today) if at is not None else "",
        )
    return table
