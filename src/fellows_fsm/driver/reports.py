"""What the router answers with: a dispatch's handle (where it stands) and a tick's report."""

from __future__ import annotations

import attrs

from fellows_fsm.journal.schema import DispatchRow

__all__ = ["Handle", "Progress", "TickReport"]


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
    """True once its job has ended (or it ended without one): RUNNING is not final, its job is followed."""
    outcome: str = ""
    result: str | None = None
    """How its job ended, one word on every lane (``succeeded``, ``failed``, ``timeout``, ...); None until then."""
    exit_code: int | None = None
    """Its job's exit code, once ended (None: none known)."""

    @classmethod
    def from_row(cls, row: DispatchRow, *, result: str | None = None, exit_code: int | None = None) -> Handle:
        """A handle from a journal row (and its result, read from its end)."""
        return cls(row.id, row.lane, row.label, row.qos, row.job_id, row.final, row.outcome, result, exit_code)


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


@attrs.frozen
class Progress:
    """What ``follow`` and ``watch`` report after each poll (driving) or each journal read (following)."""

    at: float
    driving: bool
    """True while this process drives the journal; False while it follows another process read-only."""
    driver: str | None = None
    """Who drives the journal while this process does not, as its lock file says (``pid 42 on node1``)."""
    report: TickReport | None = None
    """The poll's report while this process drives; None while it follows read-only."""
