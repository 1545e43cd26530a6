"""Compatibility: the views moved to the ``fellows_fsm.ui`` package, one module per view; import from there.

This module only re-exports their names, so code written against ``fellows_fsm.view`` keeps working.
"""

from __future__ import annotations

from fellows_fsm.core.vocab import State
from fellows_fsm.ui.history import HistoryEntry, history_entries, history_table
from fellows_fsm.ui.ladder import LadderReport, LadderRow, ladder_report, ladder_table
from fellows_fsm.ui.live import dispatch_panel, watch_table
from fellows_fsm.ui.paths import DOT_MISSING, GRAPHVIZ_MISSING, dot_source, path_mermaid, svg
from fellows_fsm.ui.snapshot import Snapshot, dispatch_json, shown_state, status_words
from fellows_fsm.ui.status import status_table
from fellows_fsm.ui.words import explain_reason, gpu_words, iso_utc, span

WITHDRAWN = State.WITHDRAWN
"""Compatibility: the state, now ``fellows_fsm.core.vocab.State.WITHDRAWN``."""

__all__ = [
    "DOT_MISSING",
    "GRAPHVIZ_MISSING",
    "WITHDRAWN",
    "HistoryEntry",
    "LadderReport",
    "LadderRow",
    "Snapshot",
    "dispatch_json",
    "dispatch_panel",
    "dot_source",
    "explain_reason",
    "gpu_words",
    "history_entries",
    "history_table",
    "iso_utc",
    "ladder_report",
    "ladder_table",
    "path_mermaid",
    "shown_state",
    "span",
    "status_table",
    "status_words",
    "svg",
    "watch_table",
]
