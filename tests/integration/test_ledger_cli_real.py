"""One budget across machines, through the real CLI and background drivers on the real local SLURM and the real
PostgreSQL: two state dirs (two machines' drivers) pinning to the paid lane at once against the last of one
user's budget, a ledger that stops answering (the pin waits, the reason shown; back again, it is handed off), a
ledger that refuses (exit 3, nothing queued), a URL with a password (exit 3), and the password in no output, log
or journal.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.ledger.store import Identity, Ledger

from .cli_harness import cli, json_of, ledger_config, one_error, read_journal, start_cli, stop_background_driver
from .conftest import Cluster
from .ledger_pg import Postgres, frozen_server, stopped
from .settled import LEDGER_CODE, ledger

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

PRICE = 1.0


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[list[Path]]:
    """Two machines' directories (a state dir and a config each); their background drivers stopped after the test."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    for each in dirs:
        each.mkdir()
    yield dirs
    for each in dirs:
        stop_background_driver(each, [signal.SIGCONT, signal.SIGTERM])


def _config(where: Path, url: str, budget: str, ledger_lines: str = "", lane_lines: str = "") -> Path:
    """The ledger command lane ``gcp`` at PRICE a GPU-hour (with ``lane_lines``), a 0.5 s poll, ``budget``, and
    [ledger] at ``url``."""
    command = json.dumps([sys.executable, "-c", LEDGER_CODE, str(where / "gcp.ledger"), "{dispatch_id}"])
    path = ledger_config(
        where,
        cap=1.0,
        poll=0.5,
        router="driver_idle_seconds = 5\n",
        lane=f"command = {command}\nprice_per_gpu_hour = {PRICE}\n{lane_lines}",
    )
    text = path.read_text(encoding="utf-8") + f"\n[budget]\n{budget}\n[ledger]\nurl = {json.dumps(url)}\n"
    path.write_text(text + 'user = "alice"\n' + ledger_lines, encoding="utf-8")
    return path


def _pin(slurm: Cluster, *flags: str) -> list[str]:
    """An 8-GPU, 10-minute job (1.33 GPU-hours at worst) pinned to the paid lane ``gcp``."""
    script = slurm.script(60)
    return ["submit", "--pin", "gcp", *flags, "--gpus", "8", "--time", "10:00", script, "--", *slurm.job_args()]


def _dispatches(where: Path) -> list[str]:
    path = where / "state" / "journal.sqlite3"
    if not path.exists():
        return []
    with read_journal(where) as journal:
        return [row.id for row in journal.dispatches()]


def test_two_machines_pinning_at_once_against_the_last_of_one_budget_exactly_one_is_handed_off(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """alice's two machines, 2 paid GPU-hours a day between them, on_budget = "refuse": each pins a 1.33 GPU-hour
    job at the same moment; exactly one command runs (exit 0), the other ends NO_BUDGET (exit 12) naming the
    ledger's count; the ledger holds one reservation, created or settled, and none released twice."""
    configs = [_config(m, ledger_url, 'paid_gpu_hours_per_day = 2\non_budget = "refuse"\n') for m in machines]
    racing = [start_cli(config, *_pin(slurm, "--detach")) for config in configs]
    codes = []
    for process in racing:
        _, err = process.communicate(timeout=120)
        codes.append(process.returncode)
        assert process.returncode in (0, 12), err
    assert sorted(codes) == [0, 12], codes
    time.sleep(1.0)  # two polls: a command started late would have written its ledger file by now
    handed = [line for m in machines for line in ledger(m)]
    assert len(handed) == 1, handed
    with postgres.connect(ledger_url) as conn:
        rows = conn.execute("SELECT dispatch_id, state, worst_gpu_hours FROM reservations").fetchall()
    assert [(r[0], r[1] in ("created", "settled", "reserved"), round(r[2], 2)) for r in rows] == [
        (handed[0], True, 1.33)
    ]
    # spend --scope user, from either machine: the one handoff, alice's, on gcp, at its worst case while it may run.
    for config in configs:
        shown = json_of(cli(config, "spend", "--scope", "user", "--json"))
        assert shown["scope"] == "user"
        assert shown["ledger"] == ledger_url
        [today] = shown["day"]
        assert (today["user"], today["lane"], today["runs"]) == ("alice", "gcp", 1)
        assert today["gpu_hours"] == pytest.approx(8 * 600 / 3600, abs=0.01)
        assert shown["budget"]["day_gpu_hours"] == pytest.approx(today["gpu_hours"])
    table = cli(configs[0], "spend", "--scope", "user")
    assert table.returncode == 0, table.stderr
    assert "paid handoffs of user alice" in table.stdout, table.stdout
    line = one_error(cli(configs[0], "spend", "--scope", "team"), 3)
    assert "spend --scope team needs [ledger] team" in line, line


def test_a_ledger_that_stops_answering_holds_the_pin_with_its_reason_and_lets_it_go_when_back(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """The ledger's database stops taking connections after the submit: the pin waits (HANDING_OFF, outcome
    budget), ``status --json`` gives the ledger's reason, its command never runs; the database back, the same
    dispatch is handed off once, within the gate's retry time and a few polls."""
    config = _config(machines[0], ledger_url, "paid_gpu_hours_per_day = 10\n", "connect_timeout_seconds = 1\n")
    name = ledger_url.rsplit("/", 1)[1]
    with postgres.connect() as conn:
        conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    try:
        submitted = cli(config, *_pin(slurm, "--detach"))
        assert submitted.returncode == 0, submitted.stderr
        assert "does not answer" in submitted.stderr, submitted.stderr  # the warning: the free lanes go ahead
        dispatch_id = submitted.stdout.strip()

        def reason() -> str:
            [shown] = json_of(cli(config, "status", "--json", dispatch_id))
            return str(shown.get("budget_reason") or "")

        slurm.wait_for(lambda: "shared ledger" in reason(), "the ledger's reason in status", timeout=30, tick=0.5)
        assert "no paid job is handed off until it answers" in reason()
        assert ledger(machines[0]) == []
    finally:
        with postgres.connect() as conn:
            conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    slurm.wait_for(lambda: ledger(machines[0]) == [dispatch_id], "the handoff once the ledger is back", timeout=60)
    history = cli(config, "history", dispatch_id)
    assert history.returncode == 0, history.stderr
    assert "shared ledger" in history.stdout, history.stdout


def test_a_ledger_that_refuses_is_one_line_exit_3_and_nothing_is_queued(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """A wrong password (through password_env) and a database that does not exist: submit exits 3 with one line
    naming the ledger (redacted) and why, the wrong password nowhere in it; no dispatch is journaled."""
    env = {**os.environ, "LEDGER_PW": "not-the-password-42"}
    wrong = _config(machines[0], ledger_url, "paid_gpu_hours_per_day = 10\n", 'password_env = "LEDGER_PW"\n')
    line = one_error(cli(wrong, *_pin(slurm, "--detach"), env=env), 3)
    assert "password authentication failed" in line, line
    assert "not-the-password-42" not in line
    (machines[1] / "other").mkdir()
    missing = _config(machines[1] / "other", postgres.url_of("no_such_ledger"), "paid_gpu_hours_per_day = 10\n")
    line = one_error(cli(missing, *_pin(slurm, "--detach")), 3)
    assert 'database "no_such_ledger" does not exist' in line, line
    assert _dispatches(machines[0]) == []
    assert _dispatches(machines[1]) == []


def test_a_url_with_a_password_is_refused_and_the_password_is_never_shown_logged_or_journaled(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """A URL with the password in it: exit 3, one line saying where a password belongs, the password not in it.
    Then the same password through password_env (no PGPASSFILE): a pin handed off, status, history, spend and
    config check, and no byte of the password in any output or any file of the state dir (journal, driver log)."""
    password = postgres.password
    bad = ledger_url.replace("fellows@", f"fellows:{password}@")
    config = _config(machines[0], bad, "paid_gpu_hours_per_day = 10\n")
    line = one_error(cli(config, *_pin(slurm, "--detach")), 3)
    assert "has a password in it" in line, line
    assert "PGPASSWORD" in line, line
    assert password not in line
    env = {k: v for k, v in os.environ.items() if k != "PGPASSFILE"}
    env["LEDGER_PW"] = password
    config = _config(machines[0], ledger_url, "paid_gpu_hours_per_day = 10\n", 'password_env = "LEDGER_PW"\n')
    outputs = []
    submitted = cli(config, *_pin(slurm, "--detach"), env=env)
    assert submitted.returncode == 0, submitted.stderr
    outputs.append(submitted.stdout + submitted.stderr)
    dispatch_id = submitted.stdout.strip()
    slurm.wait_for(lambda: ledger(machines[0]) == [dispatch_id], "the handoff", timeout=60)
    for args in (["status", "--all"], ["history", dispatch_id], ["spend"], ["config", "check"]):
        result = cli(config, *args, env=env)
        outputs.append(result.stdout + result.stderr)
    for text in outputs:
        assert password not in text
    found = [p for p in (machines[0] / "state").rglob("*") if p.is_file() and password.encode() in p.read_bytes()]
    assert found == []


def _jobs(where: Path, dispatch_id: str) -> list[int]:
    """The rungs the dispatch got a SLURM job on, as its journal has them."""
    with read_journal(where) as journal:
        return [row.rung_index for row in journal.jobs(dispatch_id)]


def test_a_frozen_ledger_holds_no_free_walk_and_the_paid_run_is_settled_once_it_answers(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """A driver follows a paid run (its reservation created: reconciled at every tick). The ledger's server is then
    frozen (SIGSTOP: connections open, nothing answered). Meanwhile two free dispatches (no room anywhere, too big
    for the paid budget so they never ask it) walk every rung, each a real SLURM job, and the paid run is followed
    to its end: the driver's tick never waits for the ledger. Thawed, the reservation is settled once, at what the
    run ran."""
    where = machines[0]
    status = where / "gcp.status"
    asked = json.dumps(["sh", "-c", f'cat "{status}" 2>/dev/null || echo queued'])
    config = _config(
        where, ledger_url, "paid_gpu_hours_per_day = 10\n", "connect_timeout_seconds = 1\n", f"status = {asked}\n"
    )
    submitted = cli(config, *_pin(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    paid = submitted.stdout.strip()

    def reservations() -> list[tuple[str, str]]:
        with postgres.connect(ledger_url) as conn:
            return conn.execute("SELECT dispatch_id, state FROM reservations ORDER BY id").fetchall()  # type: ignore[no-any-return]

    slurm.wait_for(lambda: reservations() == [(paid, "created")], "the paid run's reservation created", timeout=60)
    status.write_text("running\n", encoding="utf-8")
    for qos in ("high-eur", "normal-eur", "low-eur"):
        slurm.occupy(qos, 8, count=4 if qos == "low-eur" else 2)
    with frozen_server(postgres) as frozen:
        free = []
        for _ in range(2):
            walked = cli(config, "submit", "--detach", "--gpus", "8", "--time", "2:00:00", slurm.script(60), "--",
                         *slurm.job_args())  # fmt: skip
            assert walked.returncode == 0, walked.stderr
            free.append(walked.stdout.strip())
        for dispatch_id in free:
            slurm.wait_for(
                lambda d=dispatch_id: _jobs(where, d) == [0, 1, 2], f"{dispatch_id} on every rung", timeout=90
            )
        status.write_text("succeeded\n", encoding="utf-8")
        with read_journal(where) as journal:
            slurm.wait_for(lambda: journal.dispatch(paid).state == "PAID_DONE", "the paid run's end", timeout=60)
        assert stopped(frozen[0])  # its postmaster frozen all along
    slurm.wait_for(lambda: reservations() == [(paid, "settled")], "the reservation settled", timeout=60)
    with postgres.connect(ledger_url) as conn:
        [(hours, cost, updated)] = conn.execute("SELECT gpu_hours, cost, updated_at FROM reservations").fetchall()
    with read_journal(where) as journal:
        run = journal.paid_run(paid)
    assert hours == pytest.approx(run.gpu_hours(time.time()), rel=1e-6)
    assert cost == pytest.approx(hours * PRICE, rel=1e-6)
    time.sleep(1.5)  # three polls: a second settle would have touched the row
    with postgres.connect(ledger_url) as conn:
        assert conn.execute("SELECT state, updated_at FROM reservations").fetchall() == [("settled", updated)]
    assert ledger(where) == [paid]
    for dispatch_id in free:
        assert cli(config, "cancel", dispatch_id).returncode == 0


def test_config_check_asks_the_ledger_a_refusal_is_one_line_and_exit_3(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """``config check`` asks the ledger as submit does: a wrong password, a database that does not exist, a schema
    newer than this version: exit 3, one error line each naming it (the password nowhere); the ledger as it should
    be: config OK."""
    from fellows_fsm.ledger.schema import newest  # noqa: PLC0415

    good = _config(machines[0], ledger_url, "paid_gpu_hours_per_day = 10\n")
    ok = cli(good, "config", "check")
    assert ok.returncode == 0, ok.stderr
    assert "config OK" in ok.stdout
    env = {**os.environ, "LEDGER_PW": "not-the-password-42"}
    wrong = _config(machines[1], ledger_url, "paid_gpu_hours_per_day = 10\n", 'password_env = "LEDGER_PW"\n')
    (machines[1] / "other").mkdir()
    missing = _config(machines[1] / "other", postgres.url_of("no_such_ledger"), "paid_gpu_hours_per_day = 10\n")
    with postgres.connect(ledger_url) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (newest() + 1,))
    cases = [
        (wrong, env, "password authentication failed"),
        (missing, None, 'database "no_such_ledger" does not exist'),
        (good, None, f"schema version {newest() + 1}, newer than this fellows-fsm knows"),
    ]
    for config, environ, words in cases:
        checked = cli(config, "config", "check", env=environ)
        assert checked.returncode == 3, checked.stderr
        errors = [line for line in checked.stderr.splitlines() if line.startswith("fellows-fsm: error: ")]
        assert len(errors) == 1, checked.stderr
        assert words in errors[0], errors[0]
        assert "not-the-password-42" not in checked.stdout + checked.stderr
        assert "config has 1 problem(s)" in checked.stdout


def test_spend_scope_shows_the_free_gpu_hours_per_user_and_cluster_and_what_they_saved(
    slurm: Cluster, postgres: Postgres, ledger_url: str, machines: list[Path]
) -> None:
    """alice's free job runs on the real cluster and ends; her driver, stopping idle, hands its end to the ledger.
    ``spend --scope user`` shows her free GPU-hours (the journal's, the same) and what they saved at gcp's price;
    with bob's free run in the team (another machine's), ``--scope team`` shows both users, each per cluster, in
    the text view and the JSON."""
    config = _config(machines[0], ledger_url, "paid_gpu_hours_per_day = 10\n", 'team = "lab"\n')
    submitted = cli(config, "submit", "--detach", "--gpus", "1", "--time", "5:00", slurm.script(2), "--",
                    *slurm.job_args())  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()

    def free_runs() -> list[tuple[str, str, float]]:
        with postgres.connect(ledger_url) as conn:
            return conn.execute("SELECT user_name, lane, gpu_hours FROM free_runs ORDER BY id").fetchall()  # type: ignore[no-any-return]

    slurm.wait_for(lambda: len(free_runs()) == 1, "alice's free end in the ledger", timeout=120)
    [(user, cluster, hours)] = free_runs()
    with read_journal(machines[0]) as journal:
        [end] = journal.ends([dispatch_id]).values()
    assert (user, cluster, hours) == ("alice", end.lane, pytest.approx(end.gpu_hours))
    assert hours > 0
    shown = json_of(cli(config, "spend", "--scope", "user", "--json"))
    free = shown["free"]
    assert (free["price_lane"], free["price_per_gpu_hour"]) == ("gcp", PRICE)
    assert free["day"]["gpu_hours"] == pytest.approx(hours)
    assert free["day"]["saved"] == pytest.approx(hours * PRICE)
    assert free["day"]["users"] == [
        {"user": "alice", "cluster": end.lane, "jobs": 1, "gpu_hours": pytest.approx(hours),
         "saved": pytest.approx(hours * PRICE)}
    ]  # fmt: skip
    bob = Ledger(LedgerConfig(url=ledger_url, user="bob", team="lab", machine="bobs-box"))
    try:
        who = Identity(team="lab", user="bob", machine="bobs-box", journal="/home/bob/journal.sqlite3")
        bob.add_free(who, [("b1", "77", "other", 4, 2.0, "succeeded", time.time())])
    finally:
        bob.close()
    team = json_of(cli(config, "spend", "--scope", "team", "--json"))
    assert [(r["user"], r["cluster"], r["jobs"]) for r in team["free"]["month"]["users"]] == [
        ("alice", end.lane, 1),
        ("bob", "other", 1),
    ]
    assert team["free"]["month"]["gpu_hours"] == pytest.approx(hours + 2.0)
    assert json_of(cli(config, "spend", "--scope", "user", "--json"))["free"]["month"]["gpu_hours"] == pytest.approx(
        hours
    )
    table = cli(config, "spend", "--scope", "team")
    assert table.returncode == 0, table.stderr
    assert "free clusters, by when their jobs ended (saved: at gcp's" in " ".join(table.stdout.split()), table.stdout
    assert [line for line in table.stdout.splitlines() if "bob" in line and "other" in line], table.stdout
