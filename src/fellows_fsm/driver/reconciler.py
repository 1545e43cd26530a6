"""Each ledger reservation brought in line with its driver's journal, off the driver's tick (driver/ledger.py:
``LedgerGate``): one daemon thread with a connection of its own, so a ledger that hangs or stops answering holds no
walk up; only a paid handoff waits on the ledger (its own reservation, asked by the gate on the tick).

The tick hands the thread a snapshot (``Snapshot``: its tick's number, the dispatches then on their way to a paid
lane, the clock); the thread reads this machine's open reservations, then each one's paid run from the journal
(read after the snapshot, so a paid run journaled before it is seen), and renews, marks created, settles or
releases each as ``reconcile_once`` says. The race with the tick: a release is never sent for a dispatch the tick
asked the ledger about in the snapshot's tick or later (``asked_at``), and the release itself holds only if the
row was not touched since it was read (``Ledger.release``: its ``updated_at`` unchanged; every answer of the gate
touches its row), so a reservation the tick has just made or confirmed for a handoff is never released under it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from fellows_fsm.core.paid import PaidRun
from fellows_fsm.driver.ledger_thread import LedgerThread
from fellows_fsm.errors import FellowsError
from fellows_fsm.ledger.store import Identity, Ledger

__all__ = ["Outcome", "PaidRuns", "Reconciler", "Snapshot", "reconcile_once"]

log = logging.getLogger(__name__)


class PaidRuns(Protocol):
    """What the reconcile reads of a journal: a dispatch's paid run (journal/reads.py: ``JournalReads``)."""

    def paid_run(self, dispatch_id: str) -> PaidRun | None: ...


@attrs.frozen
class Snapshot:
    """What the tick numbered ``seq`` knew: the dispatches then on their way to a paid lane, its clock, its journal."""

    seq: int
    waiting: frozenset[str]
    now: float
    journal: PaidRuns = attrs.field(eq=False)


@attrs.frozen
class Outcome:
    """A reconcile's result, from the snapshot of tick ``seq``: the dispatches whose reservation is kept (renewed,
    or created), and how many were released and settled."""

    seq: int
    kept: frozenset[str]
    released: int = 0
    settled: int = 0


def reconcile_once(
    ledger: Ledger, who: Identity, snapshot: Snapshot, asked_at: Callable[[str], int] = lambda _: -1
) -> Outcome:
    """Bring this machine's journal's open reservations in line with the journal: renew those whose dispatch was on
    its way to a paid lane at the snapshot and whose lease has not run out, mark created those with a live paid
    run, settle those whose run ended, release the rest (a lapsed one whose dispatch is on its way is released too:
    another machine may have its room now, so the gate asks the budget again), but never one the tick asked about
    since the snapshot (``asked_at``: the tick number it last did). Raises LedgerUnreachable, LedgerRefused,
    ConfigError (the ledger), JournalError (the journal)."""
    rows = ledger.open(who)
    renew: list[int] = []
    release: list[tuple[int, Any]] = []
    created: dict[str, list[int]] = {}
    kept: set[str] = set()
    settled = 0
    for row in rows:
        run = snapshot.journal.paid_run(row.dispatch_id)
        if run is None:
            if asked_at(row.dispatch_id) >= snapshot.seq:
                kept.add(row.dispatch_id)  # the tick has asked since the snapshot: a handoff may be using it
            elif row.dispatch_id in snapshot.waiting and not row.lapsed:
                renew.append(row.id)
                kept.add(row.dispatch_id)
            else:  # never handed off; or its lease ran out, so its room may be another's: the gate asks again
                release.append((row.id, row.seen))
        elif run.live:
            created.setdefault(run.lane, []).append(row.id)
            kept.add(row.dispatch_id)
        else:
            ledger.settle(row.id, lane=run.lane, gpu_hours=run.gpu_hours(snapshot.now), cost=run.cost(snapshot.now),
                          status=run.status)  # fmt: skip
            settled += 1
    ledger.renew(renew)
    released = ledger.release(release)
    for lane, ids in created.items():
        ledger.created(ids, lane)
    if released:
        log.info("released %d ledger reservation(s): not on their way to a paid lane, or lapsed", released)
    return Outcome(snapshot.seq, frozenset(kept), released, settled)


class Reconciler(LedgerThread):
    """The thread that reconciles a driver's reservations from the latest snapshot the tick offered."""

    thread_name = "ledger-reconcile"
    retried = (FellowsError,)  # the ledger did not answer or refused; the journal could not be read
    failed_words = "this driver's reconcile with the shared ledger did not finish"

    def __init__(self, ledger: Ledger, who: Identity, asked_at: Callable[[str], int], *, retry_seconds: float) -> None:
        super().__init__(ledger, retry_seconds=retry_seconds)
        self._who = who
        self._asked_at = asked_at
        self._pending: Snapshot | None = None
        self._outcome: Outcome | None = None
        self.runs = 0
        """How many reconciles were done."""

    def offer(self, snapshot: Snapshot) -> None:
        """Reconcile from ``snapshot`` (it replaces one not started yet); returns at once."""
        with self._lock:
            self._pending = snapshot
            self._offered()

    def outcome(self) -> Outcome | None:
        """The latest reconcile's result not taken yet (once), or None."""
        with self._lock:
            outcome, self._outcome = self._outcome, None
        return outcome

    def _round(self) -> None:
        with self._lock:
            snapshot = self._pending
        if snapshot is None:
            return
        outcome = reconcile_once(self._ledger, self._who, snapshot, self._asked_at)
        self.runs += 1
        with self._lock:
            self._outcome = outcome
            if self._pending is snapshot:
                self._pending = None

    def _left(self) -> bool:
        return self._pending is not None
