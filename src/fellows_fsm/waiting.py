"""Waiting for dispatches to end, for programs and the CLI (``Fellows.wait``, ``Fellows.follow(until="end")``,
``fellows-fsm wait``, ``submit --wait``): a dispatch is final once its job has ended (or it ended without one),
and its result is one word on every lane (core/ends.py). It prints nothing."""

from __future__ import annotations

from fellows_fsm.core.vocab import State
from fellows_fsm.driver.reports import Handle
from fellows_fsm.journal.store import Journal

__all__ = ["UNTIL_END", "ended", "started_or_final"]

UNTIL_END = "end"
"""``Fellows.follow(..., until="end")``: follow the dispatch to its end, not only until its job runs."""
_STARTED = (State.RUNNING, State.REQUEUED, State.PAID_RUNNING)


def ended(journal: Journal, dispatch_id: str) -> bool:
    """Is the dispatch final (its job ended, or it ended without one), or no longer in the journal?"""
    row = journal.dispatch(dispatch_id)
    return row is None or row.final


def started_or_final(handle: Handle) -> bool:
    """Has the dispatch's job started (on a free rung, or paid), or has it ended?"""
    return handle.final or handle.state in _STARTED
