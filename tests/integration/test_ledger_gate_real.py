"""The shared ledger's gate against the real PostgreSQL of scripts/dev-postgres (no SLURM): drivers of different
journals (machines) racing for the last of one budget, many processes against a budget of N jobs, a driver killed
between its reservation and its paid create, a lease that lapses, a reservation followed to its settlement, the
ledger gone and back, and every way a ledger can refuse this tool, in one line with no password in it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.driver.ledger import LedgerGate, check_ledger
from fellows_fsm.errors import ConfigError, LedgerRefused
from fellows_fsm.ledger.schema import newest
from fellows_fsm.ledger.store import Ledger
from fellows_fsm.scheduler.port import JobSpec

from .ledger_pg import Postgres, frozen_server
from .test_faults3_time_real import _wallstep

pytestmark = pytest.mark.postgres

ONE_GPU_HOUR = JobSpec(name="job", script="job.sh", gpus=1, time_limit_seconds=3600)
EIGHT_GPU_HOURS = JobSpec(name="big", script="big.sh", gpus=8, time_limit_seconds=3600)
FOUR_GPU_HOURS = JobSpec(name="half", script="half.sh", gpus=4, time_limit_seconds=3600)


_OPEN: list[LedgerGate | Ledger] = []


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    """Every gate and ledger a test made is closed after it."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def _gate(url: str, journal: Path, *, user: str = "alice", team: str | None = None, **extra: Any) -> LedgerGate:
    """A driver's ledger gate for the journal at ``journal`` (each journal: another machine's driver)."""
    gate = LedgerGate(LedgerConfig(url=url, user=user, team=team, **extra), journal)
    _OPEN.append(gate)
    return gate


def _ledger(config: LedgerConfig) -> Ledger:
    """A ledger connection closed after the test."""
    ledger = Ledger(config)
    _OPEN.append(ledger)
    return ledger


def _rows(postgres: Postgres, url: str) -> list[tuple[Any, ...]]:
    """Every reservation: (dispatch id, journal, state), oldest first."""
    with postgres.connect(url) as conn:
        return conn.execute("SELECT dispatch_id, journal, state FROM reservations ORDER BY id").fetchall()  # type: ignore[no-any-return]


def _ask(
    barrier: threading.Barrier, gate: LedgerGate, dispatch_id: str, limits: BudgetConfig, into: list[Any], i: int
) -> None:
    """One driver's ask, at the barrier: its answer into ``into[i]``."""
    barrier.wait()
    into[i] = gate.refusal(dispatch_id, EIGHT_GPU_HOURS, None, limits)


def test_two_machines_racing_for_the_last_gpu_hours_exactly_one_passes(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """Ten rounds, each with a fresh user whose day allows 10 paid GPU-hours: two drivers of two journals ask for
    an 8 GPU-hour run at the same instant (a barrier); exactly one is reserved each round, the other refused with
    the budget's words."""
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    for round_ in range(10):
        gates = [_gate(ledger_url, tmp_path / f"m{i}" / "journal.sqlite3", user=f"u{round_}") for i in range(2)]
        for gate in gates:
            gate.ledger.check()  # connected first, so the race is the reservation's, not the connection's
        barrier = threading.Barrier(2)
        answers: list[str | None] = [None, None]
        threads = [
            threading.Thread(target=_ask, args=(barrier, gates[i], f"d{round_}-{i}", limits, answers, i))
            for i in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        passed = [a for a in answers if a is None]
        assert len(passed) == 1, (round_, answers)
        [refused] = [a for a in answers if a is not None]
        assert refused.startswith("budget: 8 of 10 paid GPU-hours used today"), refused
    assert sum(1 for r in _rows(postgres, ledger_url) if r[2] == "reserved") == 10


_WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from fellows_fsm.config.budget import BudgetConfig
    from fellows_fsm.config.ledger import LedgerConfig
    from fellows_fsm.driver.ledger import LedgerGate
    from fellows_fsm.scheduler.port import JobSpec
    url, journal, start, count = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    gate = LedgerGate(LedgerConfig(url=url, user="alice", team="lab"), journal)
    gate.ledger.check()
    open(journal.parent / "ready", "w").close()
    while not (journal.parent.parent / "go").exists():
        pass
    spec = JobSpec(name="job", script="job.sh", gpus=1, time_limit_seconds=3600)
    limits = BudgetConfig(paid_gpu_hours_per_day=10, scope="team")
    passed = sum(gate.refusal(f"{start}-{i}", spec, 2.0, limits) is None for i in range(count))
    print(passed)
    """
)


def test_a_hundred_handoffs_from_four_machines_never_pass_a_budget_of_ten_jobs(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """Four processes (four machines' drivers of one team), 25 one-GPU-hour handoffs each, all at once, against a
    team budget of 10 paid GPU-hours a day: exactly 10 are reserved in all, never more."""
    procs = []
    for m in range(4):
        journal = tmp_path / f"m{m}" / "journal.sqlite3"
        journal.parent.mkdir(parents=True)
        argv = [sys.executable, "-c", _WORKER, ledger_url, str(journal), f"m{m}", "25"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"m{m}" / "ready").exists() for m in range(4)):
        assert time.monotonic() < deadline, "the workers did not connect"
        time.sleep(0.05)
    (tmp_path / "go").touch()
    passed = 0
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        passed += int(out.strip())
    assert passed == 10
    reserved = [r for r in _rows(postgres, ledger_url) if r[2] == "reserved"]
    assert len(reserved) == 10
    with postgres.connect(ledger_url) as conn:
        [(hours, cost)] = conn.execute(
            "SELECT sum(worst_gpu_hours), sum(worst_cost) FROM reservations WHERE state = 'reserved'"
        ).fetchall()
    assert (hours, cost) == (10.0, 20.0)


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from fellows_fsm.config.budget import BudgetConfig
    from fellows_fsm.config.ledger import LedgerConfig
    from fellows_fsm.driver.ledger import LedgerGate
    from fellows_fsm.scheduler.port import JobSpec
    gate = LedgerGate(LedgerConfig(url=sys.argv[1], user="alice"), Path(sys.argv[2]))
    spec = JobSpec(name="big", script="big.sh", gpus=8, time_limit_seconds=3600)
    assert gate.refusal("d1", spec, None, BudgetConfig(paid_gpu_hours_per_day=10)) is None
    os.kill(os.getpid(), signal.SIGKILL)  # between its reservation and the paid create (nothing journaled)
    """
)


class _Journal:
    """What reconcile reads of a journal: each dispatch's paid run (a stand-in for the SQLite journal)."""

    def __init__(self, runs: dict[str, PaidRun] | None = None) -> None:
        self.runs = runs or {}

    def paid_run(self, dispatch_id: str) -> PaidRun | None:
        return self.runs.get(dispatch_id)


def _reconcile(gate: LedgerGate, journal: _Journal, waiting: Any, now: float, *, asked: bool) -> None:
    """One reconcile by the gate's thread (driver/reconciler.py) at a new tick, waited for, and its result taken in
    (at the next tick)."""
    gate.tick()
    gate.reconcile(journal, waiting, now, asked=asked)
    assert gate.reconciler.flush(30)
    gate.tick()


def test_a_driver_killed_between_its_reservation_and_the_create_releases_it_on_restart(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """A process reserves 8 of 10 GPU-hours and is SIGKILLed before anything is journaled: another machine is
    refused meanwhile; the killed driver's restart (same journal) finds the dispatch not on its way and releases the
    reservation at its first tick; the other machine passes then."""
    journal = tmp_path / "a" / "journal.sqlite3"
    argv = [sys.executable, "-c", _KILLED, ledger_url, str(journal)]
    killed = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    other = _gate(ledger_url, tmp_path / "b" / "journal.sqlite3")
    assert other.refusal("e1", EIGHT_GPU_HOURS, None, limits) is not None
    restarted = _gate(ledger_url, journal)
    _reconcile(restarted, _Journal(), waiting=tuple, now=time.time(), asked=True)
    assert [r[2] for r in _rows(postgres, ledger_url)] == ["released"]
    other.tick()
    assert other.refusal("e1", EIGHT_GPU_HOURS, None, limits) is None


def test_a_reservation_no_driver_renews_lapses_after_its_lease(ledger_url: str, tmp_path: Path) -> None:
    """With a 1 s lease, a reservation whose driver never comes back stops counting after it: the other machine is
    refused at once and passes 1.5 s later, by the server's clock."""
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    gone = _gate(ledger_url, tmp_path / "a" / "journal.sqlite3", lease_seconds=1)
    assert gone.refusal("d1", EIGHT_GPU_HOURS, None, limits) is None
    other = _gate(ledger_url, tmp_path / "b" / "journal.sqlite3", lease_seconds=1)
    assert other.refusal("e1", EIGHT_GPU_HOURS, None, limits) is not None
    time.sleep(1.5)
    other.tick()
    assert other.refusal("e1", EIGHT_GPU_HOURS, None, limits) is None


def test_a_lapsed_reservation_is_not_renewed_over_the_room_another_machine_took(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """A driver reserves 8 of 10 GPU-hours (1 s lease), then stops longer than its lease; another machine takes the
    room. Back, the first driver finds its dispatch still on its way: the lapsed reservation is released, not
    renewed, and its gate asks the budget again and is refused (8 + 8 > 10): one machine's paid run, never two."""
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    first = _gate(ledger_url, tmp_path / "a" / "journal.sqlite3", lease_seconds=1)
    assert first.refusal("d1", EIGHT_GPU_HOURS, None, limits) is None
    time.sleep(1.5)
    other = _gate(ledger_url, tmp_path / "b" / "journal.sqlite3")
    assert other.refusal("e1", EIGHT_GPU_HOURS, None, limits) is None  # the lapsed one counts nothing
    _reconcile(first, _Journal(), waiting=lambda: ("d1",), now=time.time(), asked=True)
    assert sorted((r[0], r[2]) for r in _rows(postgres, ledger_url)) == [("d1", "released"), ("e1", "reserved")]
    first.tick()
    assert first.refusal("d1", EIGHT_GPU_HOURS, None, limits) is not None


def test_a_created_reservation_is_kept_past_its_lease_and_settled_at_the_run_s_real_cost(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """Once a paid run is journaled the reservation is created: it outlives its 1 s lease (still counted at its
    worst case, 8 GPU-hours); once the run ended after 30 minutes it is settled at 4 GPU-hours and their cost, and
    a second 8 GPU-hour run fits no more (12 > 10) while a 4 GPU-hour one does."""
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    path = tmp_path / "a" / "journal.sqlite3"
    gate = _gate(ledger_url, path, lease_seconds=1)
    assert gate.refusal("d1", EIGHT_GPU_HOURS, 2.0, limits) is None
    now = time.time()
    run = PaidRun("d1", "gcp", now, 8, 3600, 2.0, "queued")
    _reconcile(gate, _Journal({"d1": run}), waiting=tuple, now=now, asked=True)
    time.sleep(1.5)
    other = _gate(ledger_url, tmp_path / "b" / "journal.sqlite3")
    assert other.refusal("e1", FOUR_GPU_HOURS, 2.0, limits) is not None  # 8 (kept past its lease) + 4 > 10
    ended = PaidRun("d1", "gcp", now, 8, 3600, 2.0, "succeeded", running_at=now, ended_at=now + 1800)
    _reconcile(gate, _Journal({"d1": ended}), waiting=tuple, now=now + 1800, asked=True)
    with postgres.connect(ledger_url) as conn:
        [(state, hours, cost, lane)] = conn.execute(
            "SELECT state, gpu_hours, cost, lane FROM reservations WHERE dispatch_id = 'd1'"
        ).fetchall()
    assert (state, hours, cost, lane) == ("settled", 4.0, 8.0, "gcp")
    other.tick()
    assert other.refusal("e2", EIGHT_GPU_HOURS, 2.0, limits) is not None
    assert other.refusal("e3", FOUR_GPU_HOURS, 2.0, limits) is None


def test_the_ledger_gone_is_a_refusal_with_its_reason_and_back_again_a_reservation(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """The ledger's database stops taking connections (its sessions ended): the gate answers "cannot be asked" (the
    reason status and history show) and asks it no more on the tick, while its probe asks off the tick; once the
    database is back the probe finds it answering and the same dispatch is reserved."""
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    gate = LedgerGate(
        LedgerConfig(url=ledger_url, user="alice", connect_timeout_seconds=1), tmp_path / "journal.sqlite3",
        retry_seconds=1.0,
    )  # fmt: skip
    _OPEN.append(gate)
    gate.ledger.check()
    name = ledger_url.rsplit("/", 1)[1]
    with postgres.connect() as conn:
        conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    try:
        reason = gate.refusal("d1", ONE_GPU_HOUR, None, limits)
        assert reason is not None
        assert reason.startswith("budget: the shared ledger postgresql://"), reason
        assert "no paid job is handed off until it answers" in reason
        trips = gate.round_trips
        gate.tick()
        assert gate.refusal("d1", ONE_GPU_HOUR, None, limits) == reason
        assert gate.round_trips == trips  # not asked again on the tick
        deadline = time.monotonic() + 30
        while gate.probe.tries < 2:  # the probe asks, and is refused, off the tick
            assert time.monotonic() < deadline, "the probe did not ask"
            time.sleep(0.05)
        assert not gate.probe.answered
        gate.tick()
        assert gate.refusal("d1", ONE_GPU_HOUR, None, limits) == reason
        assert gate.round_trips == trips
    finally:
        with postgres.connect() as conn:
            conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    assert gate.probe.wait(30)
    gate.tick()
    assert gate.refusal("d1", ONE_GPU_HOUR, None, limits) is None
    assert [r[2] for r in _rows(postgres, ledger_url)] == ["reserved"]


def test_a_wrong_password_a_missing_database_and_a_newer_schema_are_each_one_line_without_the_password(
    postgres: Postgres, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check_ledger`` (what submit asks before anything is queued) raises LedgerRefused (exit 3) in one line for a
    wrong password (given through password_env), a database that does not exist, a schema newer than this version
    knows (written by a later fellows-fsm); an unset password_env is a ConfigError naming the variable; the password
    is in none of them."""
    secret = "Sw0rdfish-not-this-one"
    monkeypatch.setenv("LEDGER_PW", secret)
    lines = []
    with pytest.raises(LedgerRefused) as wrong:
        check_ledger(LedgerConfig(url=ledger_url, password_env="LEDGER_PW"))
    lines.append(str(wrong.value))
    assert "password authentication failed" in lines[-1]
    with pytest.raises(LedgerRefused) as missing:
        check_ledger(LedgerConfig(url=postgres.url_of("no_such_ledger")))
    lines.append(str(missing.value))
    assert 'database "no_such_ledger" does not exist' in lines[-1]
    monkeypatch.delenv("LEDGER_PW")
    with pytest.raises(ConfigError) as unset:
        check_ledger(LedgerConfig(url=ledger_url, password_env="LEDGER_PW"))
    lines.append(str(unset.value))
    assert "$LEDGER_PW is not set" in lines[-1]
    _ledger(LedgerConfig(url=ledger_url)).check()  # schema 1 applied
    with postgres.connect(ledger_url) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (newest() + 1,))
    with pytest.raises(LedgerRefused) as newer:
        check_ledger(LedgerConfig(url=ledger_url, user="bob"))
    lines.append(str(newer.value))
    assert f"schema version {newest() + 1}, newer than this fellows-fsm knows ({newest()})" in lines[-1]
    for line in lines:
        assert "\n" not in line, line
        assert secret not in line, line
        assert postgres.password not in line, line


def test_two_machines_starting_at_once_apply_the_migrations_once(ledger_url: str, postgres: Postgres) -> None:
    """Four connections to an empty ledger at once: the schema is made once (one schema_version row per
    migration), and every one of them works."""
    ledgers = [_ledger(LedgerConfig(url=ledger_url, user=f"u{i}")) for i in range(4)]
    errors: list[BaseException] = []

    def check(ledger: Ledger) -> None:
        try:
            ledger.check()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=check, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    with postgres.connect(ledger_url) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]
    assert versions == list(range(1, newest() + 1))


_SHIFTED = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from fellows_fsm.config.budget import BudgetConfig
    from fellows_fsm.config.ledger import LedgerConfig
    from fellows_fsm.driver.ledger import LedgerGate
    from fellows_fsm.scheduler.port import JobSpec
    gate = LedgerGate(LedgerConfig(url=sys.argv[1], user="alice"), Path(sys.argv[2]))
    spec = JobSpec(name="big", script="big.sh", gpus=8, time_limit_seconds=3600)
    why = gate.refusal(sys.argv[3], spec, None, BudgetConfig(paid_gpu_hours_per_day=10, timezone="UTC"))
    gate.close()
    print(time.time(), why)
    """
)


@pytest.mark.parametrize("step", [3600.0, -3600.0, 25 * 3600.0], ids=["hour-ahead", "hour-behind", "a-day-ahead"])
def test_machines_whose_clocks_differ_count_the_same_windows(
    postgres: Postgres, ledger_url: str, tmp_path: Path, step: float
) -> None:
    """A machine whose wall clock is ``step`` seconds off (an LD_PRELOAD library steps its CLOCK_REALTIME) reserves 8
    of alice's 10 GPU-hours a day: a machine with a right clock is refused in the same day, and every row carries the
    ledger server's time, never a machine's."""
    step_file = tmp_path / "step"
    step_file.write_text(str(step), encoding="utf-8")
    env = {**os.environ, "LD_PRELOAD": str(_wallstep()), "WALLSTEP_FILE": str(step_file)}
    argv = [sys.executable, "-c", _SHIFTED, ledger_url, str(tmp_path / "a" / "journal.sqlite3"), "d1"]
    shifted = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert shifted.returncode == 0, shifted.stderr
    their_time, why = shifted.stdout.split(" ", 1)
    assert float(their_time) - time.time() == pytest.approx(step, abs=30)  # its clock really is off
    assert why.strip() == "None"
    limits = BudgetConfig(paid_gpu_hours_per_day=10, timezone="UTC")
    other = _gate(ledger_url, tmp_path / "b" / "journal.sqlite3")
    assert other.refusal("e1", EIGHT_GPU_HOURS, None, limits) == (
        "budget: 8 of 10 paid GPU-hours used today; this job's limit needs 8"
    )
    with postgres.connect(ledger_url) as conn:
        [(off,)] = conn.execute("SELECT max(abs(extract(epoch FROM now() - reserved_at))) FROM reservations").fetchall()
    assert float(off) < 30


def test_the_publisher_keeps_free_ends_while_the_ledger_is_gone_and_writes_each_once_when_back(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """Free ends handed to the publisher (its own thread) while the ledger takes no connection are kept and
    retried, the handing over never waits; once the ledger is back each is written once, even one handed twice."""
    name = ledger_url.rsplit("/", 1)[1]
    _ledger(LedgerConfig(url=ledger_url)).check()  # the schema, before the database closes
    with postgres.connect() as conn:
        conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    gate = LedgerGate(
        LedgerConfig(url=ledger_url, user="alice", connect_timeout_seconds=1), tmp_path / "journal.sqlite3",
        retry_seconds=0.5,
    )  # fmt: skip
    _OPEN.append(gate)
    end = ("d1", "17", "fellows", 2, 1.0, "succeeded", time.time())
    try:
        started = time.monotonic()
        gate.publisher.offer(free=[end])
        assert time.monotonic() - started < 0.5  # handed over, not written
        assert not gate.publisher.flush(1.5)
        assert gate.publisher.failures >= 1
    finally:
        with postgres.connect() as conn:
            conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    gate.publisher.offer(free=[end])
    assert gate.publisher.flush(10.0)
    with postgres.connect(ledger_url) as conn:
        assert conn.execute("SELECT dispatch_id, job_id, gpu_hours FROM free_runs").fetchall() == [("d1", "17", 1.0)]


def test_a_handoff_asked_of_a_frozen_ledger_is_refused_within_its_deadline_never_hung(
    postgres: Postgres, ledger_url: str, tmp_path: Path
) -> None:
    """The gate's connection is open when the server freezes (SIGSTOP: the kernel acknowledges every packet, nothing
    answers): the next handoff's ask does not hang its tick; past the call's deadline (ledger/deadline.py) the
    connection is cut and the answer is the ledger's reason (no paid job). The next ask gets that reason without a
    round trip (the probe asks, off the tick, and cannot connect). Thawed, the probe finds it answering and the same
    dispatch reserves."""
    limits = BudgetConfig(paid_gpu_hours_per_day=10)
    config = LedgerConfig(url=ledger_url, user="alice", connect_timeout_seconds=1)
    gate = LedgerGate(config, tmp_path / "journal.sqlite3", retry_seconds=0)
    _OPEN.append(gate)
    assert gate.refusal("d1", ONE_GPU_HOUR, None, limits) is None
    answer: list[str | None] = []
    with frozen_server(postgres):
        for _ in range(2):  # on the open connection (cut at its deadline), then answered by the gate alone
            gate.tick()
            asking = threading.Thread(target=lambda: answer.append(gate.refusal("d2", ONE_GPU_HOUR, None, limits)))
            asking.start()
            asking.join(gate.ledger.deadline_seconds + 30)  # (a hang detector, far past the deadline)
            assert not asking.is_alive(), "the ask hung on a frozen ledger"
        assert gate.round_trips == 2  # the tick asked once while frozen (before it, once to reserve d1)
        deadline = time.monotonic() + 30
        while gate.probe.tries < 1:  # the probe asks, off the tick
            assert time.monotonic() < deadline, "the probe did not ask"
            time.sleep(0.05)
        assert not gate.probe.answered
    assert len(answer) == 2
    for each in answer:
        assert each is not None
        assert "cannot be asked" in each
    assert gate.probe.wait(60)
    gate.tick()
    assert gate.refusal("d2", ONE_GPU_HOUR, None, limits) is None
    assert [r[2] for r in _rows(postgres, ledger_url)] == ["reserved", "reserved"]
