"""What the router answers with: a dispatch's handle (where it stands) and a tick's report."""

from __future__ import annotations

import attrs

from fellows_fsm.journal.schema import DispatchRow

__all__ = ["Handle", "TickReport"]


@attrs.frozen
class Handle:
    """What ``dispatch`` returns at once, and what ``status`` reports: where a dispatch stands."""

    dispatch_id: str
    lane: str
    state: str
    """The state label, e.g. ``SUBMITTED(high-eur)``, ``RESUBMITTED(normal-eur)``, ``RUNNING``."""
    qos: str | None
    slurm_job_id: str | None
    final: bool = False
    outcome: str = ""

    @classmethod
    def from_row(cls, row: DispatchRow) -> Handle:
        """A handle from a journal row."""
        return cls(row.id, row.lane, row.label, row.qos, row.job_id, row.final, row.outcome)


@attrs.frozen
class TickReport:
    """What one poll did: for the live view, the logs and the tests that count scheduler calls."""

    at: float
    live: int
    observed: int
    rung_changes: int
    deferred: int
    """Dispatches that wanted to change rung but waited for the per-tick bound."""
    handoffs: tuple[str, ...]
    failures: tuple[str, ...]
    """One line per dispatch that failed this tick (a failed handoff command, a refused submit)."""
    unreachable: bool
