"""The driver's own move of finished dispatches to the archive (journal/archive.py), at a low cadence.

At most one batch (``journal/archive.py: BATCH`` dispatches, two short transactions) after a poll, only when due: at
the driver's first poll, then every ``COMPACT_EVERY_SECONDS`` of its clock, and at each poll after that while some are
still due (a journal that never moved has its past moved a batch a poll). A move never waits for another (a
`fellows-fsm journal compact` running): it is skipped and tried at the next due time. A failure is logged, never
stops the walk.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fellows_fsm.clock import Clock
from fellows_fsm.config.journal import COMPACT_EVERY_SECONDS
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal.archive import BATCH, compact

__all__ = ["Compaction"]

log = logging.getLogger(__name__)


class Compaction:
    """When the driver of the journal at ``path`` moves what ended more than ``keep_days`` ago, one batch a poll."""

    def __init__(self, path: Path, keep_days: float, clock: Clock, *, batch: int = BATCH) -> None:
        self.path = path
        self.batch = batch
        self.keep_seconds = keep_days * 86_400.0
        self.clock = clock
        self.due_at = clock.now()
        self.moved = 0

    def step(self, _report: object = None) -> None:
        """Move one batch if a move is due (called after each turn of the driver's loop)."""
        now = self.clock.now()
        if now < self.due_at:
            return
        self.due_at = now + COMPACT_EVERY_SECONDS
        try:
            done = compact(
                self.path, before=now - self.keep_seconds, now=now, batch=self.batch, max_batches=1, wait=False
            )
        except (FellowsError, OSError) as exc:
            log.warning("moving finished dispatches to the archive failed (tried again later): %s", exc)
            return
        if done is None:
            return  # another move runs
        self.moved += done.moved
        if done.moved:
            log.info("moved %d finished dispatches to %s (%d still due)", done.moved, done.archive, done.left)
        if done.left:
            self.due_at = now  # the next batch after the next turn
