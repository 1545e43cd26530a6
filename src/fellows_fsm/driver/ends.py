"""The jobs that started, followed to their end: a tick looks at them at most once per follow interval (they ride
on the poll's one squeue, and a job that left squeue on its one batched sacct: slurm/observe.py), whatever their
number. Which row an end takes is the table's (core/ends.py); this only says when to look."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ends import dispatch_result
from fellows_fsm.core.vocab import FOLLOWED_STATES
from fellows_fsm.driver.reports import Handle
from fellows_fsm.journal.store import Journal

__all__ = ["Follow", "handle_of", "result"]

_FOLLOWED = frozenset(str(state) for state in FOLLOWED_STATES)
_state = operator.attrgetter("state")


class Follow:
    """When a tick looks at the dispatches whose job runs (RUNNING, REQUEUED): at the first tick, then once per
    ``interval`` (``[router] follow_interval_seconds``); the others are looked at every tick."""

    def __init__(self, interval: float, poll: float) -> None:
        self.interval = interval
        self.slack = min(interval, poll) / 2  # a poll that comes a little early still follows
        self.due = -math.inf

    def looked_at(self, live: Iterable[Dispatch], now: float) -> list[Dispatch]:
        """The dispatches this tick looks at: every one when following is due, else all but the running ones."""
        dispatches = list(live)
        if now >= self.due:
            if not _FOLLOWED.isdisjoint(map(_state, dispatches)):  # (every tick, every live one: no Python loop)
                self.due = now + self.interval - self.slack
            return dispatches
        return [d for d in dispatches if d.state not in _FOLLOWED]


def result(journal: Journal, dispatch_id: str) -> tuple[str | None, int | None]:
    """The dispatch's result word and exit code (None, None: its job has not ended, or it ended without one)."""
    row = journal.dispatch(dispatch_id)
    if row is None:
        return None, None
    end = journal.ends([dispatch_id]).get(dispatch_id)
    word = dispatch_result(row.state, row.outcome, final=row.final, ended=end.result if end is not None else None)
    return word, end.exit_code if end is not None else None


def handle_of(journal: Journal, dispatch_id: str) -> Handle | None:
    """Where a dispatch stands, with its result and exit code once its job ended (None: not in the journal)."""
    row = journal.dispatch(dispatch_id)
    if row is None:
        return None
    word, code = result(journal, dispatch_id) if row.final else (None, None)
    return Handle.from_row(row, result=word, exit_code=code)
