"""Each reservation's life reconciled off the driver's tick (driver/reconciler.py), on fake ledgers (the real
PostgreSQL: tests/integration/test_ledger_gate_real.py, test_ledger_router_real.py): a ledger that does not answer
the reconcile holds no tick up (every free walk goes on; a handoff still asks the ledger on the tick), the result
is taken in between ticks, and a reservation the tick asked for since the snapshot is never released."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import State
from fellows_fsm.driver.budget import TickGate
from fellows_fsm.driver.reconciler import Snapshot, reconcile_once
from fellows_fsm.driver.roster import Roster
from fellows_fsm.journal.store import Journal
from fellows_fsm.ledger.store import Identity, OpenReservation, Totals
from fellows_fsm.scheduler.port import JobSpec

URL = "postgresql://fellows@127.0.0.1:1/fellows"
LIMITS = BudgetConfig(paid_gpu_hours_per_day=10)
ONE = JobSpec(name="j", script="j.sh", gpus=1, time_limit_seconds=3600)
WHO = Identity(team="", user="alice", machine="m", journal="/j")


class Recording:
    """A ledger that records what the reconcile asks of it; ``open`` may block until ``answer`` is set."""

    def __init__(self, rows: list[OpenReservation], *, blocked: bool = False) -> None:
        self.rows = rows
        self.answer = threading.Event()
        if not blocked:
            self.answer.set()
        self.opened = threading.Event()
        self.opens = 0
        self.renewed: list[int] = []
        self.released: list[int] = []
        self.marked: list[int] = []
        self.settled: list[int] = []
        self.reserves: list[str] = []
        self.day = 0.0

    def open(self, who: Identity) -> list[OpenReservation]:
        self.opens += 1
        self.opened.set()
        self.answer.wait(30)
        return self.rows

    def renew(self, ids: list[int]) -> None:
        self.renewed += ids

    def release(self, rows: list[tuple[int, Any]]) -> int:
        self.released += [r[0] for r in rows]
        self.rows = [r for r in self.rows if r.id not in self.released]
        return len(rows)

    def created(self, ids: list[int], lane: str | None) -> None:
        self.marked += ids

    def settle(self, rid: int, **_: Any) -> None:
        self.settled.append(rid)

    def reserve(
        self, who: Identity, *, dispatch_id: str, decide: Callable[[Totals], str | None], **_: Any
    ) -> str | None:
        self.reserves.append(dispatch_id)
        return decide(Totals(self.day, 0.0, 0.0))

    def add_free(self, *_: Any) -> None:
        pass

    def publish_live(self, *_: Any) -> None:
        pass

    def close(self) -> None:
        self.answer.set()


class Runs:
    """A journal's paid runs (what the reconcile reads)."""

    def __init__(self, runs: dict[str, PaidRun]) -> None:
        self.runs = runs

    def paid_run(self, dispatch_id: str) -> PaidRun | None:
        return self.runs.get(dispatch_id)


def _row(rid: int, dispatch_id: str, *, lapsed: bool = False) -> OpenReservation:
    return OpenReservation(rid, dispatch_id, "reserved", lapsed, f"seen-{rid}")


def test_reconcile_renews_creates_settles_and_releases_but_never_what_the_tick_asked_for_since() -> None:
    """From the snapshot of tick 5: d1 on its way (renewed), d2 not on its way but asked by tick 5 (kept: a
    handoff may be using it), d3 not on its way and last asked at tick 4 (released, with the updated_at read), d4
    lapsed while on its way (released), d5 with a live paid run (created), d6 with an ended one (settled)."""
    ledger = Recording([_row(1, "d1"), _row(2, "d2"), _row(3, "d3"), _row(4, "d4", lapsed=True), _row(5, "d5"),
                        _row(6, "d6")])  # fmt: skip
    runs = Runs({
        "d5": PaidRun("d5", "gcp", 0.0, 1, 3600, 2.0, "queued"),
        "d6": PaidRun("d6", "gcp", 0.0, 1, 3600, 2.0, "succeeded", running_at=0.0, ended_at=1800.0),
    })  # fmt: skip
    asked = {"d2": 5, "d3": 4}
    outcome = reconcile_once(
        ledger,  # type: ignore[arg-type]
        WHO,
        Snapshot(5, frozenset({"d1", "d4"}), 3600.0, runs),
        lambda d: asked.get(d, -1),
    )
    assert (ledger.renewed, ledger.released, ledger.marked, ledger.settled) == ([1], [3, 4], [5], [6])
    assert outcome.kept == {"d1", "d2", "d5"}
    assert (outcome.seq, outcome.released, outcome.settled) == (5, 2, 1)


@pytest.fixture
def ledgers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Recording]]:
    """The ledgers a TickGate's LedgerGate makes, in order: the tick's, the reconciler's (blocked), the publisher's."""
    made: list[Recording] = []

    def make(config: LedgerConfig) -> Recording:
        ledger = Recording([_row(1, "d1")], blocked=len(made) == 1)
        made.append(ledger)
        return ledger

    monkeypatch.setattr("fellows_fsm.driver.ledger.Ledger", make)
    monkeypatch.setattr("fellows_fsm.driver.publisher.Ledger", make)
    yield made
    for ledger in made:
        ledger.answer.set()


def test_the_tick_returns_while_the_reconcile_waits_on_a_ledger_that_does_not_answer(
    ledgers: list[Recording], tmp_path: Path
) -> None:
    """The reconcile's ledger hangs in its first read: every tick returns all the same (the snapshot is handed over,
    one reconcile at a time), a handoff's own ask still reaches the ledger on the tick, and the gate holds what it
    held. Once the ledger answers, the next tick takes the result in."""
    journal = Journal(tmp_path / "j.sqlite3")
    gate = TickGate(journal, LIMITS, dict, None, ledger=LedgerConfig(url=URL, user="alice"))
    try:
        ledger = gate.ledger
        assert ledger is not None
        tick_ledger, reconcile_ledger = ledgers[0], ledgers[1]
        gate.tick(1000.0)  # the first tick: a reconcile is due (a limited budget)
        assert reconcile_ledger.opened.wait(10)
        for n in range(5):
            gate.tick(1001.0 + n)  # returns: the reconcile waits in its thread
        assert ledger.reconciler.busy
        assert reconcile_ledger.opens == 1
        assert gate.refusal("d9", ONE) is None  # a handoff asks the ledger itself, on the tick
        assert tick_ledger.reserves == ["d9"]
        assert ledger.held == {"d9"}
        reconcile_ledger.answer.set()
        assert ledger.reconciler.flush(10)
        gate.tick(1010.0)
        # d1 (not on its way, never asked) released; d9 asked since the snapshot: held
        assert reconcile_ledger.released == [1]
        assert ledger.held == {"d9"}
    finally:
        gate.close()
        journal.close()


def test_a_dispatch_recovered_after_its_give_up_is_handed_off_only_with_its_reservation(
    ledgers: list[Recording], tmp_path: Path
) -> None:
    """A driver restarted with a dispatch journaled FAILED_TO_GCP (its give_up; the paid handoff not started): its
    reservation may have lapsed while no driver ran. The ledger is asked before the handoff: refused (the room is
    another's now), the dispatch is kept for the next poll, not handed off; once it fits, it is handed off. One whose
    command started (HANDING_OFF) is followed, never asked."""
    journal = Journal(tmp_path / "j.sqlite3")
    gate = TickGate(journal, LIMITS, dict, None, ledger=LedgerConfig(url=URL, user="alice"))
    try:
        ledgers[0].day = 10.0
        d = SimpleNamespace(id="d1", state=State.FAILED_TO_GCP, paid_gate=gate, spec=ONE)
        roster = Roster(None)  # type: ignore[arg-type]
        roster.live["d1"] = d  # type: ignore[assignment]
        roster.parked_out = ["d1"]
        gate.tick(1000.0)
        assert roster.take_parked_out(gate.unreserved) == []
        assert roster.parked_out == ["d1"]
        ledgers[0].day = 0.0
        gate.tick(1001.0)
        assert roster.take_parked_out(gate.unreserved) == [d]
        assert ledgers[0].reserves == ["d1", "d1"]
        handing = SimpleNamespace(id="d2", state=State.HANDING_OFF, paid_gate=gate, spec=ONE)
        assert gate.unreserved(handing) is None  # type: ignore[arg-type]
        assert ledgers[0].reserves == ["d1", "d1"]
    finally:
        ledgers[1].answer.set()
        gate.close()
        journal.close()
