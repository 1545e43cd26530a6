"""Two real Routers (two journals: two machines' drivers) walking the fake cluster to the fake paid lane, their one
[budget] counted in the real PostgreSQL ledger: the walk's own rows decide (budget_wait journals the ledger's
words), exactly one of two is handed off when only one fits, the paid run is followed to its end and settled at what
it ran, which frees the room the other one waits for; a restarted driver releases what it reserved for a dispatch no
longer on its way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.testing import FakePaidLane

from .cli_harness import cli, json_of
from .ledger_pg import Postgres

pytestmark = pytest.mark.postgres

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200)  # at worst 16 GPU-hours
GCP = CommandSettings(name="gcp", command=("unused",))
PRIORITY = {"dev-eur": 200000, "high-eur": 100000, "normal-eur": 50000, "low-eur": 10000}


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    with freeze_time("2026-11-30 12:00:00") as f:
        yield f


@pytest.fixture
def lane() -> FakePaidLane:
    """The paid lane both machines hand to (one cloud account)."""
    return FakePaidLane(GCP, price_per_gpu_hour=2.5)


@pytest.fixture
def machine(tmp_path: Path, ledger_url: str, lane: FakePaidLane, frozen: FrozenDateTimeFactory) -> Iterator[Any]:
    """Start a router for machine ``name`` (its own state dir and journal, its own fake cluster where nothing
    starts) with the given [budget], its [ledger] the test's database; journals and ledger connections closed
    after."""
    routers: list[Router] = []

    def make(name: str, **budget: object) -> Router:
        fake = FakeScheduler(qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16, "normal-eur": 16}, total_gpus=0)
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=60.0),
            lanes=(GCP,),
            budget=BudgetConfig(**budget),  # type: ignore[arg-type]
            ledger=LedgerConfig(url=ledger_url, user="alice", team="lab"),
            state_dir=tmp_path / name,
        )
        router = Router(config, fake, Journal(config.journal_path), lanes={"gcp": lane}).start()
        routers.append(router)
        return router

    yield make
    for router in routers:
        if router.gate.ledger is not None:
            router.gate.ledger.close()
        router.journal.close()


def _ticks(
    routers: list[Router], frozen: FrozenDateTimeFactory, n: int, step: float = 10, *, published: bool = True
) -> None:
    """Poll each router ``n`` times, ``step`` frozen seconds apart; each poll's report to the ledger written before
    the clock moves on (psycopg's connect deadline reads the frozen monotonic clock too)."""
    for _ in range(n):
        frozen.tick(step)
        for router in routers:
            router.poll()
            if published:
                _published(router, 2.0)


def _published(router: Router, timeout: float = 10.0) -> bool:
    """Wait (``timeout`` at most) until the router's publisher and reconciler threads did what its ticks handed
    them (the reconcile's result is taken in by the next tick)."""
    gate = router.gate.ledger
    return gate is not None and gate.publisher.flush(timeout) and gate.reconciler.flush(timeout)


def _rows(postgres: Postgres, url: str) -> list[tuple[Any, ...]]:
    with postgres.connect(url) as conn:
        return conn.execute(  # type: ignore[no-any-return]
            "SELECT dispatch_id, state, lane, gpu_hours, cost FROM reservations ORDER BY id"
        ).fetchall()


def test_two_machines_walks_share_one_budget_in_the_ledger_and_a_settled_run_frees_its_room(
    machine: Callable[..., Router],
    lane: FakePaidLane,
    frozen: FrozenDateTimeFactory,
    postgres: Postgres,
    ledger_url: str,
) -> None:
    """25 paid GPU-hours a day for the team; each machine walks one 16 GPU-hour job to its last rung: one is
    handed off (reserved, then created), the other waits on low-eur with the ledger's count in its budget_wait
    step. The paid run ends after an hour (8 GPU-hours, 20 at 2.5): settled at that, and the waiting one fits
    (8 + 16 <= 25) and is handed off."""
    a = machine("a", paid_gpu_hours_per_day=25, scope="team")
    b = machine("b", paid_gpu_hours_per_day=25, scope="team")
    first = a.dispatch(SPEC).dispatch_id
    second = b.dispatch(SPEC).dispatch_id
    _ticks([a, b], frozen, 40)
    states = {first: a.handle(first).state, second: b.handle(second).state}
    assert sorted(states.values()) == ["PAID_QUEUED", "RESUBMITTED(low-eur)"], states
    paid, waiting = (first, second) if states[first] == "PAID_QUEUED" else (second, first)
    paid_router, waiting_router = (a, b) if paid == first else (b, a)
    assert lane.created == [paid]
    note = waiting_router.journal.steps(waiting)[-1]
    assert (note.trigger, note.note) == (
        "budget_wait",
        "budget: 16 of 25 paid GPU-hours used today; this job's limit needs 16",
    )
    assert [(r[0], r[1]) for r in _rows(postgres, ledger_url)] == [(paid, "created")]

    lane.move(paid, PaidStatus.RUNNING)
    _ticks([a, b], frozen, 1)
    _ticks([a, b], frozen, 36, step=100)  # an hour: 8 GPU-hours
    lane.move(paid, PaidStatus.SUCCEEDED)
    _ticks([a, b], frozen, 4)
    assert paid_router.handle(paid).state == "PAID_DONE"
    assert waiting_router.handle(waiting).state == "PAID_QUEUED"
    rows = {r[0]: r for r in _rows(postgres, ledger_url)}
    assert rows[paid][1:3] == ("settled", "gcp")
    assert rows[paid][3] == pytest.approx(8.0, rel=0.05)
    assert rows[paid][4] == pytest.approx(20.0, rel=0.05)
    assert rows[waiting][1] == "created"


def test_with_the_ledger_unreachable_the_walk_waits_on_its_last_rung_with_the_reason(
    tmp_path: Path, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A [ledger] nobody listens on: the walk still takes every free rung, then waits on low-eur (budget_wait, the
    ledger's reason journaled once); no paid job is made; with on_budget = "refuse" it ends NO_BUDGET instead."""
    for on_budget, end in (("wait", "RESUBMITTED(low-eur)"), ("refuse", "NO_BUDGET")):
        fake = FakeScheduler(qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16}, total_gpus=0)
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=60.0),
            lanes=(GCP,),
            budget=BudgetConfig(paid_gpu_hours_per_day=100, on_budget=on_budget),
            ledger=LedgerConfig(url="postgresql://fellows@127.0.0.1:9/nobody", connect_timeout_seconds=1),
            state_dir=tmp_path / on_budget,
        )
        router = Router(config, fake, Journal(config.journal_path), lanes={"gcp": lane}).start()
        try:
            d = router.dispatch(SPEC).dispatch_id
            _ticks([router], frozen, 40, published=False)  # (its reports are never written: nobody listens)
            assert router.handle(d).state == end
            steps = router.journal.steps(d)
            said = [s.note for s in steps if "shared ledger" in s.note]
            assert said, [(s.trigger, s.note) for s in steps]
            assert said[0].startswith("budget: the shared ledger postgresql://fellows@127.0.0.1:9/nobody cannot be")
            if on_budget == "wait":
                assert [s.trigger for s in steps].count("budget_wait") == 1
        finally:
            router.gate.close()
            router.journal.close()
    assert lane.created == []


def _restart(router: Router, machine: Callable[..., Router], name: str, **budget: object) -> Router:
    """The driver of ``name`` dies (its lock released, its connection dropped: nothing else is done) and a new one
    starts on the same state dir."""
    if router.gate.ledger is not None:
        router.gate.ledger.close()
    router.journal.release_driver()
    return machine(name, **budget)


class _Killed(BaseException):
    """The driver's process dying at this point (nothing after it runs)."""


@pytest.mark.parametrize("after_create", [False, True], ids=["before-the-create", "after-the-create"])
def test_a_driver_killed_at_its_handoff_holds_one_reservation_and_one_paid_job_counted_once(
    machine: Callable[..., Router],
    lane: FakePaidLane,
    frozen: FrozenDateTimeFactory,
    postgres: Postgres,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    after_create: bool,
) -> None:
    """The driver dies in its handoff, after the ledger reservation and the journaled hand_off step: before the paid
    lane's create, or after it and before its answer is journaled. The restarted driver (same state dir) keeps the
    one reservation (created), ends with one paid job, and settles the run once at its end: one row, never a
    second reservation."""
    budget = {"paid_gpu_hours_per_day": 20}
    real = FakePaidLane.start

    def dying(self: FakePaidLane, dispatch_id: str, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(FakePaidLane, "start", real)  # it dies once
        if after_create:
            real(self, dispatch_id, *args, **kwargs)
        raise _Killed

    monkeypatch.setattr(FakePaidLane, "start", dying)
    a = machine("a", **budget)
    d = a.dispatch(SPEC).dispatch_id
    with pytest.raises(_Killed):
        _ticks([a], frozen, 60)
    assert lane.created == ([d] if after_create else [])
    assert [r[0] for r in _rows(postgres, ledger_url)] == [d]
    a = _restart(a, machine, "a", **budget)
    _ticks([a], frozen, 10)
    assert a.handle(d).state == "PAID_QUEUED"
    assert lane.created == [d]
    assert [(r[0], r[1]) for r in _rows(postgres, ledger_url)] == [(d, "created")]
    lane.move(d, PaidStatus.RUNNING)
    _ticks([a], frozen, 19, step=100)  # about half an hour: 4 GPU-hours
    lane.move(d, PaidStatus.SUCCEEDED)
    _ticks([a], frozen, 4)
    assert a.handle(d).state == "PAID_DONE"
    assert lane.created == [d]
    [(dispatch_id, state, lane_name, hours, _)] = _rows(postgres, ledger_url)
    assert (dispatch_id, state, lane_name) == (d, "settled", "gcp")
    assert hours == pytest.approx(4.0, rel=0.1)


def test_each_free_job_s_gpu_hours_reach_the_ledger_at_its_end_once(
    tmp_path: Path, ledger_url: str, lane: FakePaidLane, frozen: FrozenDateTimeFactory, postgres: Postgres
) -> None:
    """Three free jobs start and end on the fake cluster (2 GPUs, 30 minutes): their ends, journaled, are written
    to the ledger's free_runs with the team, user, machine, journal, dispatch, job and GPU-hours, each once (a
    restarted driver writes none again). No [budget] limit is needed for that."""
    fake = FakeScheduler(qos_priority=PRIORITY, total_gpus=64)
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=600.0),
        lanes=(GCP,),
        ledger=LedgerConfig(url=ledger_url, user="alice", team="lab"),
        state_dir=tmp_path / "free",
    )
    router = Router(config, fake, Journal(config.journal_path), lanes={"gcp": lane}).start()
    try:
        ids = [router.dispatch(JobSpec(f"j{i}", "train.sbatch", gpus=2)).dispatch_id for i in range(3)]
        for _ in range(5):
            fake.schedule()
            _ticks([router], frozen, 1)
        assert all(router.handle(i).state == "RUNNING" for i in ids), [router.handle(i).state for i in ids]
        jobs = {i: router.handle(i).slurm_job_id for i in ids}
        frozen.tick(1800)
        for i in ids:
            fake.end(jobs[i], "COMPLETED")  # type: ignore[arg-type]
        _ticks([router], frozen, 10)  # the ends' sacct, then the minute's write
        _ticks([router], frozen, 7)
        assert len(router.journal.ends()) == 3
        assert _published(router)
        with postgres.connect(ledger_url) as conn:
            rows = conn.execute(
                "SELECT dispatch_id, job_id, lane, gpus, gpu_hours, team, user_name, journal FROM free_runs"
            ).fetchall()
        assert sorted(r[0] for r in rows) == sorted(ids)
        for r in rows:
            assert r[1:4] == (jobs[r[0]], "fellows", 2)
            assert r[4] == pytest.approx(1.0, abs=0.1)  # 2 GPUs x about 30 minutes
            assert r[5:] == ("lab", "alice", str(config.journal_path.absolute()))
        router.gate.close()
        router.journal.release_driver()
        router.journal.close()
        router = Router(config, fake, Journal(config.journal_path), lanes={"gcp": lane}).start()
        _ticks([router], frozen, 8)
        assert _published(router)
        with postgres.connect(ledger_url) as conn:
            [(count,)] = conn.execute("SELECT count(*) FROM free_runs").fetchall()
        assert count == 3
    finally:
        router.gate.close()
        router.journal.close()


def test_status_team_shows_every_machine_s_live_dispatches_as_last_published(
    machine: Callable[..., Router], frozen: FrozenDateTimeFactory, ledger_url: str, tmp_path: Path
) -> None:
    """Two machines of the team walk a dispatch each: ``status --team --json`` (the real CLI, from a third
    directory) lists both with their user, machine, journal and state; one withdrawn is gone at its driver's next
    publish; a driver that stops with nothing live leaves nothing."""
    a = machine("a", paid_gpu_hours_per_day=25, scope="team")
    b = machine("b", paid_gpu_hours_per_day=25, scope="team")
    first = a.dispatch(SPEC).dispatch_id
    second = b.dispatch(SPEC).dispatch_id
    _ticks([a, b], frozen, 2)
    assert _published(a)
    assert _published(b)
    viewer = tmp_path / "viewer.toml"
    viewer.write_text(
        f'state_dir = "{tmp_path / "viewer"}"\n[ledger]\nurl = "{ledger_url}"\nuser = "carol"\nteam = "lab"\n',
        encoding="utf-8",
    )

    def shown() -> dict[str, Any]:
        return {d["dispatch_id"]: d for d in json_of(cli(viewer, "status", "--team", "--json"))["dispatches"]}

    seen = shown()
    assert set(seen) == {first, second}
    assert seen[first]["journal"] == str(a.journal.path.absolute())
    assert seen[second]["journal"] == str(b.journal.path.absolute())
    assert {d["user"] for d in seen.values()} == {"alice"}
    assert {d["label"] for d in seen.values()} == {"SUBMITTED(high-eur)"}
    b.withdraw(second)
    _ticks([a, b], frozen, 4)  # past the 30 s between two publishes
    assert _published(b)
    assert set(shown()) == {first}
    a.withdraw(first)
    a.gate.close()  # the driver stops: it publishes what it leaves, nothing live
    assert shown() == {}
    table = cli(viewer, "status", "--team")
    assert table.returncode == 0, table.stderr
    assert "live dispatches of team lab" in table.stdout
