"""The ledger gate's own rules, on a fake ledger (the real PostgreSQL: tests/integration/test_ledger_*_real.py): one
round trip per dispatch per tick at most, none for what no spending can change, a reservation already held asked
again (the ledger confirms it, or it lapsed and the budget is counted again), the ledger's failure an answer with
its reason, asked again only after the retry time; the reconcile off the tick (a ledger that does not answer holds
no tick), never releasing what the tick asked for since its snapshot."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.driver.ledger import LedgerGate, check_ledger
from fellows_fsm.errors import ConfigError, LedgerUnreachable
from fellows_fsm.ledger.store import Identity, Totals
from fellows_fsm.scheduler.port import JobSpec

URL = "postgresql://fellows@127.0.0.1:1/fellows"
LIMITS = BudgetConfig(paid_gpu_hours_per_day=10, max_paid_gpu_hours_per_job=9)
EIGHT = JobSpec(name="j", script="j.sh", gpus=8, time_limit_seconds=3600)


class FakeLedger:
    """Counts reservations against its own totals (the decision is the gate's ``decide``); one it holds is confirmed
    with no count; or it is down."""

    def __init__(self) -> None:
        self.day = 0.0
        self.reserves: list[str] = []
        self.held: dict[str, float] = {}
        self.down = False
        self.checks = 0

    def reserve(self, who: Identity, *, dispatch_id: str, gpus: int, limit_seconds: float,
                decide: Callable[[Totals], str | None], **_: Any) -> str | None:  # fmt: skip
        if self.down:
            raise LedgerUnreachable("the ledger postgresql://fellows@127.0.0.1:1/fellows does not answer")
        self.reserves.append(dispatch_id)
        if dispatch_id in self.held:
            return None
        why = decide(Totals(self.day, 0.0, 0.0))
        if why is None:
            self.held[dispatch_id] = gpus * limit_seconds / 3600
            self.day += self.held[dispatch_id]
        return why

    def check(self) -> None:
        """What the gate's probe asks: raises while down."""
        self.checks += 1
        if self.down:
            raise LedgerUnreachable("the ledger postgresql://fellows@127.0.0.1:1/fellows does not answer")

    def lapse(self, dispatch_id: str) -> None:
        """Its lease ran out (no renew reached the ledger): it counts nothing and is held no more."""
        self.day -= self.held.pop(dispatch_id)

    def close(self) -> None:
        pass


@pytest.fixture
def fake() -> FakeLedger:
    return FakeLedger()


_MADE: list[LedgerGate] = []
"""The gates a test made: closed after it (a probe, a reconciler or a publisher left running would go on asking)."""


@pytest.fixture(autouse=True)
def _close_gates() -> Iterator[None]:
    yield
    while _MADE:
        _MADE.pop().close()


def _gate(fake: FakeLedger, tmp_path: Path) -> LedgerGate:
    config = LedgerConfig(url=URL, user="alice")
    gate = LedgerGate(config, tmp_path / "j.sqlite3", ledger=fake, probe_ledger=fake, retry_seconds=0.05)  # type: ignore[arg-type]
    _MADE.append(gate)
    return gate


def test_a_fit_is_a_reservation_held_and_confirmed_once_a_tick(fake: FakeLedger, tmp_path: Path) -> None:
    """The first ask reserves (one round trip); asked again this tick, no round trip; at the next tick the ledger is
    asked again and confirms it (counted once); take asks nothing more."""
    gate = _gate(fake, tmp_path)
    assert gate.refusal("d1", EIGHT, None, LIMITS) is None
    assert gate.refusal("d1", EIGHT, None, LIMITS) is None
    gate.tick()
    assert gate.refusal("d1", EIGHT, None, LIMITS) is None
    gate.take("d1", EIGHT, None, LIMITS)
    assert fake.reserves == ["d1", "d1"]
    assert fake.day == 8
    assert gate.held == {"d1"}


def test_a_held_reservation_that_lapsed_is_counted_again_never_handed_off_on_memory(
    fake: FakeLedger, tmp_path: Path
) -> None:
    """A dispatch reserved 8 of 10 GPU-hours, then its reservation lapsed in the ledger (no renew reached it) and
    another machine took the room: asked at its handoff, the gate refuses (the dispatch waits on its last free rung,
    or ends NO_BUDGET), where a gate answering from what it held before would hand it off without a reservation."""
    gate = _gate(fake, tmp_path)
    assert gate.refusal("d1", EIGHT, None, LIMITS) is None
    fake.lapse("d1")
    fake.day = 8.0  # another machine's reservation
    gate.tick()
    assert (
        gate.refusal("d1", EIGHT, None, LIMITS) == "budget: 8 of 10 paid GPU-hours used today; this job's limit needs 8"
    )
    gate.take("d1", EIGHT, None, LIMITS)  # (no row takes a refused dispatch: take asks once more and says so)
    assert "d1" not in fake.held


def test_a_held_reservation_with_the_ledger_down_is_no_handoff(
    fake: FakeLedger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger stops answering after a dispatch reserved: at its handoff (the next tick) the gate answers that
    the ledger cannot be asked (no paid job until it answers): it cannot know the reservation is still there."""
    gate = _gate(fake, tmp_path)
    assert gate.refusal("d1", EIGHT, None, LIMITS) is None
    fake.down = True
    gate.tick()
    reason = gate.refusal("d1", EIGHT, None, LIMITS)
    assert reason is not None
    assert "cannot be asked" in reason


def test_a_refusal_is_asked_once_a_tick_and_again_the_next(fake: FakeLedger, tmp_path: Path) -> None:
    """A dispatch that does not fit is asked once per tick (the rows ask the gate several times a look)."""
    gate = _gate(fake, tmp_path)
    fake.day = 8.0
    first = gate.refusal("d1", EIGHT, None, LIMITS)
    assert first == "budget: 8 of 10 paid GPU-hours used today; this job's limit needs 8"
    assert gate.refusal("d1", EIGHT, None, LIMITS) == first
    gate.tick()
    gate.refusal("d1", EIGHT, None, LIMITS)
    assert fake.reserves == ["d1", "d1"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (JobSpec(name="j", script="j.sh", gpus=1), "has no time limit"),
        (JobSpec(name="j", script="j.sh", gpus=10, time_limit_seconds=3600), "over max_paid_gpu_hours_per_job = 9"),
    ],
    ids=["no-limit", "over-cap"],
)
def test_what_no_spending_changes_is_answered_without_the_ledger(
    fake: FakeLedger, tmp_path: Path, spec: JobSpec, words: str
) -> None:
    """No time limit, or over the per-job cap: refused with the budget's words and no round trip."""
    reason = _gate(fake, tmp_path).refusal("d1", spec, None, LIMITS)
    assert reason is not None
    assert words in reason
    assert fake.reserves == []


def test_no_gpus_need_no_reservation(fake: FakeLedger, tmp_path: Path) -> None:
    """A job with no GPUs costs no paid GPU-hours: it fits, with nothing reserved."""
    assert _gate(fake, tmp_path).refusal("d1", JobSpec(name="j", script="j.sh"), None, LIMITS) is None
    assert fake.reserves == []


def test_the_ledger_down_is_a_reason_and_the_tick_asks_it_again_only_once_the_probe_finds_it_answering(
    fake: FakeLedger, tmp_path: Path
) -> None:
    """Unreachable: the answer names the ledger (redacted) and says no paid job goes until it answers; from then on
    every ask gets that reason with no round trip of the tick's (however long: a ledger that hangs costs the tick
    one ask), while the probe asks off the tick; once the probe finds it answering, the next ask reserves."""
    gate = _gate(fake, tmp_path)
    fake.down = True
    reason = gate.refusal("d1", EIGHT, None, LIMITS)
    assert reason == (f"budget: the shared ledger {URL} cannot be asked, so no paid job is handed off until it answers")
    assert gate.down == reason
    assert fake.reserves == []
    _wait_for(lambda: fake.checks >= 3)  # the probe keeps asking, off the tick
    for _ in range(3):
        gate.tick()
        assert gate.refusal("d2", EIGHT, None, LIMITS) == reason
    assert fake.reserves == []  # the tick never asked again
    assert not gate.probe.answered
    fake.down = False
    assert gate.probe.wait(10)
    gate.tick()
    assert gate.refusal("d1", EIGHT, None, LIMITS) is None
    assert fake.reserves == ["d1"]
    assert gate.down is None
    checks = fake.checks
    fake.down = True  # down again: one failed ask, then a new probe
    gate.tick()
    assert gate.refusal("d2", EIGHT, None, LIMITS) == reason
    _wait_for(lambda: fake.checks > checks)


def _wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for a thread's doing (a bound, not a timed assertion)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "the probe did not ask"
        time.sleep(0.01)


def test_a_ledger_without_psycopg_installed_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the [ledger] extra, what submit asks is a ConfigError (exit 3) naming it, and the gate's answer a
    refusal that says the ledger cannot be asked: never an ImportError in a tick."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # an import of it raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'fellows-fsm\[ledger\]'"):
        check_ledger(LedgerConfig(url=URL, user="alice"))
    gate = LedgerGate(LedgerConfig(url=URL, user="alice"), tmp_path / "j.sqlite3")
    _MADE.append(gate)
    reason = gate.refusal("d1", EIGHT, None, LIMITS)
    assert reason is not None
    assert "(it refused this driver)" in reason
