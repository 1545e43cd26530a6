# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""Every view shows the paid run (issue 27): status (table and --json), history, the live view, watch's table, the
submit summary and the API show its lane, state, GPU-hours and cost (the bound while it may still spend); a
dispatch the budget keeps on its last free rung says why; a one-cluster dispatch with no paid run shows what it
always did. Driven through a router on the fake cluster and the fake paid lane, as tests/unit/driver/test_paid.py."""

from __future__ import annotations

import datetime
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory
from rich.console import Console, RenderableType

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.api import Fellows
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.history import history_entries
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.snapshot import dispatch_json, journaled
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.scheduler.port import JobSpec as Spec
from fellows_fsm.testing import FakePaidLane
from fellows_fsm.ui import app as ui_app
from fellows_fsm.ui.follow import summary
from fellows_fsm.ui.history import history_table
from fellows_fsm.ui.live import dispatch_panel, watch_table
from tests.unit.cli_helpers import run
from tests.unit.driver.fixtures import CAP, fake, frozen  # noqa: F401

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200)
GCP = CommandSettings(name="gcp", command=("unused",))
PAID_KEYS = [
    "lane",
    "status",
    "gpu_hours",
    "cost",
    "bound_gpu_hours",
    "bound_cost",
    "price_per_gpu_hour",
    "running_at",
    "ended_at",
]
REASON = "budget: 3.5 of 4 paid GPU-hours used today; this job's limit needs 16"


def text(renderable: RenderableType) -> str:
    """What ``renderable`` prints on a 200-column console, without styles."""
    console = Console(file=io.StringIO(), width=200)
    console.print(renderable)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def words(renderable: RenderableType) -> str:
    """What ``renderable`` prints, its runs of spaces (and the panel's borders) as one space."""
    return " ".join(text(renderable).replace("│", " ").split())


class HeldBack:
    """A budget (core/paid.py ``Gate``) that refuses every dispatch with one reason until ``room`` is set."""

    refuse = False

    def __init__(self) -> None:
        self.room = False

    def refusal(self, dispatch_id: str, spec: Spec) -> str | None:
        """The reason while there is no room."""
        return None if self.room else REASON

    def take(self, dispatch_id: str, spec: Spec) -> None:
        """Nothing to reserve here."""


@pytest.fixture
def lane(request: pytest.FixtureRequest) -> FakePaidLane:
    """The paid lane at 2.5 per GPU-hour (or at the price a test gives indirectly: None, no price)."""
    return FakePaidLane(GCP, price_per_gpu_hour=getattr(request, "param", 2.5))


@pytest.fixture
def budget(request: pytest.FixtureRequest) -> BudgetConfig:
    """The router's [budget]: none (or the one a test gives indirectly)."""
    return getattr(request, "param", BudgetConfig())


@pytest.fixture
def router(tmp_path: Path, fake: FakeScheduler, lane: FakePaidLane, budget: BudgetConfig) -> Iterator[Router]:
    """A started router on the fake cluster (nothing can start), the fake paid lane and the test's [budget]."""
    fake.total_gpus = 0
    fellows = SlurmSettings(park_cap_seconds=CAP)
    config = Config(fellows=fellows, lanes=(GCP,), budget=budget, state_dir=tmp_path / "state")
    journal = Journal(config.journal_path)
    yield Router(config, fake, journal, lanes={"gcp": lane}).start()
    journal.close()


@pytest.fixture
def cli(tmp_path: Path, router: Router, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Run fellows-fsm on the router's journal (read-only commands: the router drives it); return its stdout."""
    config = tmp_path / "fellows.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n\n[lanes.gcp]\ncommand = ["unused"]\n', encoding="utf-8")
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(config))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(ui_app, "start_driver", lambda config, journal: None)

    def invoke(*args: str) -> str:
        result = run(*args)
        assert result.exit_code == 0, result.output
        return result.stdout

    return invoke


def ticks(r: Router, frozen: FrozenDateTimeFactory, n: int, step: float = 10) -> None:
    """Poll ``n`` times, ``step`` seconds apart."""
    for _ in range(n):
        frozen.tick(step)
        r.poll()


def to_paid(r: Router, frozen: FrozenDateTimeFactory) -> str:
    """Dispatch SPEC and walk it (nothing can start) until its paid job is made."""
    dispatch_id = r.dispatch(SPEC).dispatch_id
    for _ in range(100):
        ticks(r, frozen, 1)
        if r.handle(dispatch_id).state == "PAID_QUEUED":
            return dispatch_id
    raise AssertionError(f"dispatch {dispatch_id} never reached its paid lane: {r.handle(dispatch_id).state}")


def running_an_hour(r: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory) -> str:
    """A paid job seen running, then followed for exactly an hour (8 GPU-hours at 8 GPUs)."""
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    assert r.handle(d).state == "PAID_RUNNING"
    frozen.tick(3600)
    return d


def row_of(r: Router, dispatch_id: str) -> DispatchRow:
    """The dispatch's journal row."""
    row = r.journal.dispatch(dispatch_id)
    assert row is not None
    return row


def one(cli: Callable[..., str], dispatch_id: str) -> dict[str, object]:
    """``status ID --json``'s one object."""
    listed = json.loads(cli("status", dispatch_id, "--json"))
    assert len(listed) == 1
    out = listed[0]
    assert isinstance(out, dict)
    return out


def test_status_json_has_the_paid_object_in_each_paid_state(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """status --json of a paid dispatch has a ``paid`` object with its documented keys: queued (nothing spent, the
    bound of 8 GPUs x 2 h), running an hour (8 GPU-h, 20.00 at 2.5), succeeded (ended_at set), and its lane."""
    d = to_paid(router, frozen)
    queued = one(cli, d)
    assert (queued["state"], queued["lane"]) == ("PAID_QUEUED", "gcp")
    paid = queued["paid"]
    assert isinstance(paid, dict)
    assert list(paid) == PAID_KEYS
    assert paid == {
        "lane": "gcp",
        "status": "queued",
        "gpu_hours": 0.0,
        "cost": 0.0,
        "bound_gpu_hours": 16.0,
        "bound_cost": 40.0,
        "price_per_gpu_hour": 2.5,
        "running_at": None,
        "ended_at": None,
    }
    lane.move(d, PaidStatus.RUNNING)
    ticks(router, frozen, 1)
    frozen.tick(3600)
    running = one(cli, d)["paid"]
    assert isinstance(running, dict)
    assert (running["status"], running["gpu_hours"], running["cost"]) == ("running", 8.0, 20.0)
    assert running["running_at"] == "2026-11-30T12:03:10+00:00"
    assert running["ended_at"] is None
    lane.move(d, PaidStatus.SUCCEEDED, "exit 0")
    ticks(router, frozen, 1)
    done = one(cli, d)
    assert (done["state"], done["outcome"]) == ("PAID_DONE", "paid-succeeded")
    ended = done["paid"]
    assert isinstance(ended, dict)
    assert ended["status"] == "succeeded"
    assert ended["ended_at"] == "2026-11-30T13:03:20+00:00"
    assert ended["gpu_hours"] == pytest.approx(8 * 3610 / 3600)
    frozen.tick(86400)
    assert one(cli, d)["paid"] == ended  # an ended run's numbers stay put


def test_status_table_shows_each_paid_state_with_its_gpu_hours_and_cost(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """status shows PAID_QUEUED(gcp), PAID_RUNNING(gcp), PAID_DONE(gcp) and PAID_FAILED(gcp) with what they spent
    in a ``GPU-h·cost`` column, and under the table, for each that may still spend, the bound its time limit
    gives."""
    done = running_an_hour(router, lane, frozen)
    lane.move(done, PaidStatus.SUCCEEDED)
    running = running_an_hour(router, lane, frozen)  # (within its 2-hour limit: one past it is deleted)
    queued = to_paid(router, frozen)
    failed = to_paid(router, frozen)
    lane.move(failed, PaidStatus.FAILED, "quota exceeded")
    ticks(router, frozen, 1)
    out = cli("status")
    header = next(line for line in out.splitlines() if "dispatch" in line)
    assert header.split() == ["dispatch", "name", "state", "job", "GPU-h·cost", "updated"]

    def lines(dispatch_id: str) -> list[str]:
        return [" ".join(x.split()) for x in out.splitlines() if dispatch_id in x]

    assert "PAID_QUEUED(gcp)" in lines(queued)[0]
    assert " 0·0.00 " in lines(queued)[0]
    assert lines(queued)[1] == f"{queued} on gcp: 0 GPU-h · 0.00 (≤ 16 GPU-h / ≤ 40.00)"
    assert "PAID_RUNNING(gcp)" in lines(running)[0]
    assert "·" in lines(running)[0]
    assert lines(running)[1].endswith("(≤ 16 GPU-h / ≤ 40.00)")
    assert "PAID_DONE(gcp)" in lines(done)[0]
    assert " 8.02·20.06 " in lines(done)[0]
    assert len(lines(done)) == 1
    assert "PAID_FAILED(gcp) " in lines(failed)[0]
    assert len(lines(failed)) == 1
    assert cli("status", "--all") == out  # the journal's listings, one query of the paid runs


def test_status_of_a_running_paid_job_counts_its_hours_so_far(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """Running an hour on 8 GPUs at 2.5: 8 GPU-h and 20.00 so far; half an hour later 12 GPU-h and 30.00."""
    d = running_an_hour(router, lane, frozen)
    assert "8 GPU-h · 20.00 (≤ 16 GPU-h / ≤ 40.00)" in " ".join(cli("status").split())
    frozen.tick(1800)
    assert "12 GPU-h · 30.00 (≤ 16 GPU-h / ≤ 40.00)" in " ".join(cli("status", d).split())


@pytest.mark.parametrize("lane", [None], indirect=True, ids=["unpriced"])
def test_an_unpriced_lane_says_unpriced_and_its_json_cost_is_null(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A paid lane with no price: GPU-hours and their bound, the cost ``unpriced``; JSON cost and bound_cost null."""
    d = running_an_hour(router, lane, frozen)
    journal = router.journal
    snap = journaled(journal, row_of(router, d), journal.handoff(d))
    assert snap.paid is not None
    shown = words(watch_table([snap], now=frozen().timestamp(), next_lane="gcp"))
    assert "gcp: 8 GPU-h · unpriced (≤ 16 GPU-h)" in shown
    panel = words(dispatch_panel(snap, now=frozen().timestamp()))
    assert "cost unpriced (the lane has no price_per_gpu_hour)" in panel
    paid = dispatch_json(row_of(router, d), journal.handoff(d), paid=snap.paid, now=frozen().timestamp())["paid"]
    assert (paid["gpu_hours"], paid["cost"], paid["bound_cost"], paid["price_per_gpu_hour"]) == (8.0, None, None, None)


def test_the_live_view_shows_the_paid_run_and_its_bound(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """The panel of a paid running job says its lane and state, GPU-hours and cost so far with the price, and the
    bound its time limit gives; the ladder line ends on gcp; no SLURM wait is shown; once it ended, no bound."""
    d = running_an_hour(router, lane, frozen)
    j = router.journal
    now = frozen().timestamp()
    snap = journaled(j, row_of(router, d), j.handoff(d))
    shown = words(dispatch_panel(snap, now=now, next_lane="gcp"))
    assert "state PAID_RUNNING" in shown
    assert "high-eur ✗ → normal-eur ✗ → low-eur ✗ → gcp ●" in shown
    assert "paid gcp · PAID_RUNNING (running)" in shown
    assert "GPU-hours 8 so far ≤ 16 by its time limit" in shown
    assert "cost 20.00 so far at 2.5 per GPU-hour ≤ 40.00 by its time limit" in shown
    assert "waiting" not in shown
    assert "looking" not in shown
    table = words(watch_table([snap], now=now, next_lane="gcp"))
    assert "PAID_RUNNING" in table
    assert "gcp: 8 GPU-h · 20.00 (≤ 16 GPU-h / ≤ 40.00)" in table
    lane.move(d, PaidStatus.SUCCEEDED)
    ticks(router, frozen, 1)
    ended = journaled(j, row_of(router, d), j.handoff(d))
    done = words(dispatch_panel(ended, now=frozen().timestamp(), next_lane="gcp"))
    assert "paid gcp · PAID_DONE (succeeded)" in done
    assert "outcome paid-succeeded" in done
    assert "≤" not in done
    assert "so far" not in done
    assert summary(d, j) == f"dispatch {d} ended PAID_DONE on gcp: 8.02 GPU-h · 20.06"


def test_history_reads_the_paid_steps_and_ends_with_the_runs_cost(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """history shows paid → PAID_QUEUED, paid_start → PAID_RUNNING, paid_end → PAID_DONE, and a line under the
    table with the run's lane, GPU-hours, cost and price; --json keeps its documented keys."""
    d = running_an_hour(router, lane, frozen)
    lane.move(d, PaidStatus.SUCCEEDED, "exit 0")
    ticks(router, frozen, 1)
    out = cli("history", d)
    steps = [line.split()[1:3] for line in out.splitlines() if line.split()[1:2] and line.split()[1].startswith("paid")]
    assert ["paid", "PAID_QUEUED"] in steps
    assert ["paid_start", "PAID_RUNNING"] in steps
    assert ["paid_end", "PAID_DONE"] in steps
    assert "paid run on gcp (PAID_DONE, succeeded): 8.02 GPU-h · 20.06 at 2.5 per GPU-hour" in " ".join(out.split())
    entries = json.loads(cli("history", d, "--json"))
    assert all(set(e) == {"at", "from", "to", "trigger", "qos", "slurm_job_id", "reason", "note"} for e in entries)


def test_a_dispatch_waiting_for_the_budget_says_why_in_every_view(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """Held on its last free rung by the budget: status says why under the table and in --json (budget_reason),
    history reads the budget_wait step as the reason with its job pending on low-eur, the live view and the API
    say it; once the budget has room it goes on to the paid lane and the reason is gone."""
    gate = HeldBack()
    d = router.dispatch(SPEC).dispatch_id
    for _ in range(30):
        for dispatch in router.on_ladder:
            dispatch.paid_gate = gate
        ticks(router, frozen, 1)
    row = row_of(router, d)
    assert (row.label, row.outcome) == ("RESUBMITTED(low-eur)", "budget")
    status = cli("status")
    assert f"{d} waits on its last free rung: {REASON}" in status
    assert one(cli, d)["budget_reason"] == REASON
    history = " ".join(cli("history", d).split())
    assert (
        f"budget_wait RESUBMITTED low-eur 1002 {REASON} (its job waits on low-eur until the budget has room)" in history
    )
    j = router.journal
    snap = journaled(j, row, j.handoff(d))
    panel = words(dispatch_panel(snap, now=frozen().timestamp(), next_lane="gcp"))
    assert f"budget {REASON.removeprefix('budget: ')}" in panel
    assert "parks in once the budget has room" in panel
    assert "gcp in" not in panel
    assert REASON in words(watch_table([snap], now=frozen().timestamp(), next_lane="gcp"))
    with Fellows(router.config, scheduler=FakeScheduler()) as fellows:
        assert fellows.budget_reason(d) == REASON
        assert fellows.paid_run(d) is None
    gate.room = True
    for _ in range(10):
        for dispatch in router.on_ladder:
            dispatch.paid_gate = gate
        ticks(router, frozen, 1)
    assert row_of(router, d).label == "PAID_QUEUED"
    assert "budget_reason" not in one(cli, d)
    assert "waits on" not in cli("status")


def test_the_api_gives_the_paid_run_and_its_numbers(
    router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """Fellows.paid_run (by an id prefix too) gives the run's lane, status, GPU-hours and cost so far and its bound."""
    d = running_an_hour(router, lane, frozen)
    with Fellows(router.config, scheduler=FakeScheduler()) as fellows:
        run_ = fellows.paid_run(d[:6])
        assert run_ is not None
        now = frozen().timestamp()
        assert (run_.lane, run_.status, run_.live) == ("gcp", "running", True)
        assert (run_.gpu_hours(now), run_.cost(now), run_.bound_gpu_hours, run_.bound_cost) == (8.0, 20.0, 16.0, 40.0)
        assert fellows.status(d)[0].state == "PAID_RUNNING"


def test_a_one_cluster_dispatch_with_no_paid_run_shows_what_it_always_did(
    router: Router, fake: FakeScheduler, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """A dispatch running on fellows: status --json byte for byte as before paid runs (no ``paid``, no
    ``budget_reason``), the same status columns, no line under the history table."""
    fake.total_gpus = 64
    d = router.dispatch(SPEC).dispatch_id
    fake.schedule()
    ticks(router, frozen, 1)
    assert router.handle(d).state == "RUNNING"
    expected = [
        {
            "dispatch_id": d,
            "name": "train",
            "state": "RUNNING",
            "lane": "fellows",
            "qos": "high-eur",
            "slurm_job_id": "1000",
            "final": False,  # its job runs: followed to its end (issue 38)
            "result": None,  # (issue 38: how its job ended, null until then)
            "exit_code": None,
            "outcome": "",
            "intent": "prod",
            "pinned": False,
            "gpus": 8,
            "created_at": "2026-11-30T12:00:00+00:00",
            "updated_at": "2026-11-30T12:00:10+00:00",
            "handoff_exit_status": None,
        }
    ]
    # Each object also names the config and journal in use (issue 41): the only keys added since.
    said = json.loads(cli("status", "--json"))
    assert [{k: v for k, v in o.items() if k not in ("config", "journal")} for o in said] == expected
    assert said[0]["journal"].endswith("journal.sqlite3")
    header = next(line for line in cli("status").splitlines() if line.split()[:1] == ["dispatch"])
    assert header.split() == ["dispatch", "name", "state", "job", "updated"]
    history = cli("history", d)
    assert "paid run" not in history
    assert "budget" not in history
    row = row_of(router, d)
    j = router.journal
    entries = history_entries(row, j.steps(d), j.jobs(d), None)
    assert text(history_table(row, entries)) == history


BUDGET = '\n[budget]\npaid_gpu_hours_per_day = 100\nmax_paid_gpu_hours_per_job = 32\ntimezone = "UTC"\n'


def ran(r: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, seconds: float) -> str:
    """A paid job followed running for ``seconds`` (from the look that saw it run), then succeeded."""
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    frozen.tick(seconds)
    lane.move(d, PaidStatus.SUCCEEDED)
    ticks(r, frozen, 1, step=0)
    assert r.handle(d).state == "PAID_DONE"
    return d


def test_spend_totals_today_this_week_and_this_month_across_a_day_boundary(
    tmp_path: Path, router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """A run handed on Tuesday (an hour on 8 GPUs) and one on Wednesday (half an hour, still running an hour in):
    on Wednesday today holds Wednesday's, this week and this month both; the next Monday (a new week) only the month
    holds them; the live one counts its bound as still open; the [budget] limits are in the JSON and the table."""
    config = tmp_path / "fellows.toml"
    config.write_text(config.read_text(encoding="utf-8") + BUDGET, encoding="utf-8")
    frozen.move_to("2026-11-24 12:00:00")  # a Tuesday
    ran(router, lane, frozen, 3600)
    frozen.move_to("2026-11-25 12:00:00")  # Wednesday
    live = running_an_hour(router, lane, frozen)
    out = json.loads(cli("spend", "--json"))
    assert list(out) == ["now", "timezone", "currency", "day", "week", "month", "budget", "free"]
    day, week, month = out["day"], out["week"], out["month"]
    assert (day["start"], week["start"], month["start"]) == (
        "2026-11-25T00:00:00+00:00",
        "2026-11-23T00:00:00+00:00",
        "2026-11-01T00:00:00+00:00",
    )
    tally = day["total"]
    assert list(tally) == [
        "runs",
        "live",
        "gpu_hours",
        "cost",
        "unpriced_gpu_hours",
        "open_gpu_hours",
        "open_cost",
    ]
    assert (tally["runs"], tally["live"], tally["gpu_hours"], tally["cost"]) == (1, 1, 8.0, 20.0)
    assert (tally["open_gpu_hours"], tally["open_cost"]) == (8.0, 20.0)  # its 16 GPU-h bound, less what it ran
    assert list(day["lanes"]) == ["gcp"]
    tuesday = 8.0  # from the look that saw it run to the look that saw it end: an hour
    for window in (week, month):
        assert (window["total"]["runs"], window["total"]["live"]) == (2, 1)
        assert window["total"]["gpu_hours"] == pytest.approx(8.0 + tuesday)
        assert window["total"]["cost"] == pytest.approx(2.5 * (8.0 + tuesday))
    assert out["budget"] == {
        "paid_gpu_hours_per_day": 100,
        "paid_cost_per_month": None,
        "max_paid_gpu_hours_per_job": 32,
        "on_budget": "wait",
    }
    shown = [" ".join(line.split()) for line in cli("spend").splitlines()]
    assert "today gcp 1 1 8 20.00 ≤ 8 GPU-h / ≤ 20.00" in shown
    assert "this week gcp 2 1 16 40.00 ≤ 8 GPU-h / ≤ 20.00" in shown
    assert any(line.startswith("[budget] paid_gpu_hours_per_day = 100: 16 counted today") for line in shown)
    lane.move(live, PaidStatus.SUCCEEDED)
    ticks(router, frozen, 1)
    frozen.move_to("2026-11-30 09:00:00")  # the next Monday: a new day and week, the same month
    out = json.loads(cli("spend", "--json"))
    assert (out["day"]["total"]["runs"], out["week"]["total"]["runs"], out["month"]["total"]["runs"]) == (0, 0, 2)
    assert out["day"]["lanes"] == {}
    assert out["day"]["total"]["gpu_hours"] == 0
    assert out["month"]["total"]["live"] == 0
    assert out["month"]["total"]["open_gpu_hours"] == 0
    with Fellows(router.config, scheduler=FakeScheduler()) as fellows:
        assert fellows.spend().month.total.runs == 2


def test_spend_reads_the_paid_runs_in_one_query_and_no_dispatch(
    router: Router,
    lane: FakePaidLane,
    frozen: FrozenDateTimeFactory,
    cli: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spend reads the journal's paid runs once, those handed since the earliest window began, and no dispatch,
    step or run one by one (so 100,000 runs are one query)."""
    for _ in range(3):
        ran(router, lane, frozen, 600)
    calls: list[float | None] = []
    original = Journal.paid_runs

    def counted(self: Journal, *, since: float | None = None, status: tuple[str, ...] = ()) -> object:
        calls.append(since)
        return original(self, since=since, status=status)

    def refused(self: Journal, *args: object, **kwargs: object) -> None:
        raise AssertionError("spend read the journal one dispatch at a time")

    monkeypatch.setattr(Journal, "paid_runs", counted)
    for name in ("dispatch", "steps", "paid_run", "handoff", "dispatches", "jobs"):
        monkeypatch.setattr(Journal, name, refused)
    out = json.loads(cli("spend", "--json"))
    assert out["month"]["total"]["runs"] == 3
    assert calls == [datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC).timestamp()]  # this month's start


def test_status_with_paid_runs_and_a_budget_wait_fits_80_columns(
    router: Router,
    lane: FakePaidLane,
    frozen: FrozenDateTimeFactory,
    cli: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 80 columns status with a paid running job, a paid one done and one waiting for the budget keeps every
    line within 80 and cuts no cell (the bound and the budget's reason are lines of their own)."""
    done = running_an_hour(router, lane, frozen)
    lane.move(done, PaidStatus.SUCCEEDED)
    running = running_an_hour(router, lane, frozen)
    gate = HeldBack()
    waiting = router.dispatch(SPEC).dispatch_id
    for _ in range(30):
        for dispatch in router.on_ladder:
            dispatch.paid_gate = gate
        ticks(router, frozen, 1)
    monkeypatch.setenv("COLUMNS", "80")
    out = cli("status")
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out, out
    assert f"{running} on gcp: " in out
    assert f"{waiting} waits on its last free rung: budget: 3.5 of 4" in out


@pytest.mark.parametrize("budget", [BudgetConfig(paid_gpu_hours_per_day=20, timezone="UTC")], indirect=True)
def test_the_driver_s_budget_holds_a_job_back_and_spend_with_a_raised_one_lets_it_through(
    tmp_path: Path, router: Router, lane: FakePaidLane, frozen: FrozenDateTimeFactory, cli: Callable[..., str]
) -> None:
    """With 20 paid GPU-hours a day and 8 spent, a job whose limit needs 16 waits on low-eur with the driver's own
    reason in status, --json and history; spend with the config's raised budget (40) tells the driver, whose next
    tick hands it to the paid lane; spend then counts both runs."""
    ran(router, lane, frozen, 3600)
    waiting = router.dispatch(SPEC).dispatch_id
    ticks(router, frozen, 30)
    row = row_of(router, waiting)
    assert (row.label, row.outcome) == ("RESUBMITTED(low-eur)", "budget")
    reason = "budget: 8 of 20 paid GPU-hours used today; this job's limit needs 16"
    assert f"{waiting} waits on its last free rung: {reason}" in cli("status")
    assert one(cli, waiting)["budget_reason"] == reason
    assert reason in " ".join(cli("history", waiting).split())
    config = tmp_path / "fellows.toml"
    raised = '\n[budget]\npaid_gpu_hours_per_day = 40\ntimezone = "UTC"\n'
    config.write_text(config.read_text(encoding="utf-8") + raised, encoding="utf-8")
    result = run("spend")
    assert result.exit_code == 0, result.output
    assert "applies the [budget] of" in result.stderr
    assert "from its next tick: paid_gpu_hours_per_day = 40" in result.stderr
    assert "[budget] paid_gpu_hours_per_day = 40: 8 counted today" in " ".join(result.stdout.split())
    ticks(router, frozen, 3)
    assert router.handle(waiting).state == "PAID_QUEUED"
    out = json.loads(cli("spend", "--json"))
    assert (out["day"]["total"]["runs"], out["day"]["total"]["live"]) == (2, 1)
    assert out["day"]["total"]["open_gpu_hours"] == 16.0
    assert "[budget]" not in run("spend").stderr  # told once: the journal has it now
