"""The budget's arithmetic (core/budget.py): the calendar windows a paid run counts in (by its handed_at, in the
budget's time zone), what the runs spent per window and lane, and the gate before a handoff, its lines exactly, its
reservations and its per-job cap."""

from __future__ import annotations

import datetime
import time
import zoneinfo
from collections.abc import Iterator
from typing import Any

import pytest
from freezegun import freeze_time
from hypothesis import given, settings
from hypothesis import strategies as st

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.budget import BudgetGate, Reservation, Spend, Tally, Windows, never_paid, spend
from fellows_fsm.core.paid import Gate, PaidRun
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.scheduler.port import JobSpec

UTC = zoneinfo.ZoneInfo("UTC")
AMSTERDAM = zoneinfo.ZoneInfo("Europe/Amsterdam")
HOUR = 3600.0


def moment(when: str) -> float:
    """The epoch seconds of ``when`` (UTC unless it says its offset), read from a clock frozen there."""
    with freeze_time(when):
        return time.time()


def paid(
    dispatch_id: str,
    handed: str,
    *,
    lane: str = "gcp",
    gpus: int = 8,
    limit_hours: float | None = 2.0,
    price: float | None = 4.0,
    ran_hours: float = 0.0,
    status: str = PaidStatus.SUCCEEDED,
) -> PaidRun:
    """A paid run handed at ``handed`` that ran ``ran_hours`` (from its handoff on: the journal's run_seconds)."""
    return PaidRun(
        dispatch_id=dispatch_id,
        lane=lane,
        handed_at=moment(handed),
        gpus=gpus,
        limit_seconds=None if limit_hours is None else limit_hours * HOUR,
        price_per_gpu_hour=price,
        status=status,
        run_seconds=ran_hours * HOUR,
    )


def job(gpus: int = 8, hours: float | None = 2.0) -> JobSpec:
    """A job of ``gpus`` GPUs and a ``hours`` time limit (None: no --time)."""
    return JobSpec(
        name="train", script="train.sh", gpus=gpus, time_limit_seconds=None if hours is None else int(hours * HOUR)
    )


def gate(
    runs: list[PaidRun],
    now: str,
    *,
    reserved: dict[str, Reservation] | None = None,
    price: float | None = 4.0,
    **budget: Any,
) -> BudgetGate:
    """A gate over ``runs`` at ``now`` for a lane of ``price``, under a UTC [budget] of ``budget``."""
    return BudgetGate(BudgetConfig(timezone="UTC", **budget), runs, moment(now), reserved or {}, price)


# --- the windows ----------------------------------------------------------------------------------------------


def test_the_windows_start_at_midnight_monday_and_the_first_of_the_month() -> None:
    """On Wednesday 2 December 2026 at noon UTC, today began at midnight, the week on Monday 30 November (in the
    month before) and the month on 1 December."""
    windows = Windows.at(moment("2026-12-02 12:00:00"), UTC)
    assert windows == Windows(
        day=moment("2026-12-02 00:00:00"), week=moment("2026-11-30 00:00:00"), month=moment("2026-12-01 00:00:00")
    )
    assert windows.earliest == windows.week


@pytest.mark.parametrize(
    ("now", "day"),
    [
        ("2026-12-02 00:00:00", "2026-12-02 00:00:00"),
        ("2026-12-01 23:59:59", "2026-12-01 00:00:00"),
        ("2026-12-01 00:00:00", "2026-12-01 00:00:00"),
        ("2026-11-30 23:59:59", "2026-11-30 00:00:00"),
    ],
    ids=["at-midnight", "a-second-before-midnight", "at-the-month-start", "a-second-before-the-month"],
)
def test_midnight_belongs_to_the_day_it_starts(now: str, day: str) -> None:
    """Midnight is the first instant of its day (and the first of the month its month's); a second before is the
    day before, in the month before."""
    windows = Windows.at(moment(now), UTC)
    assert windows.day == moment(day)
    assert windows.month == moment(day[:8] + "01 00:00:00")


def test_the_windows_follow_the_budget_time_zone() -> None:
    """At 23:30 UTC on 30 November, Amsterdam (UTC+1) is already in Tuesday 1 December: its day and month began
    at 23:00 UTC, while in UTC it is still Monday 30 November, in November."""
    now = moment("2026-11-30 23:30:00")
    here = Windows.at(now, AMSTERDAM)
    assert here.day == here.month == moment("2026-11-30 23:00:00")
    assert here.week == moment("2026-11-29 23:00:00")
    assert Windows.at(now, UTC).month == moment("2026-11-01 00:00:00")


def test_the_windows_are_wall_clock_midnights_across_a_dst_change() -> None:
    """On Tuesday 31 March 2026 Amsterdam is on summer time (since 29 March): today and the week (Monday 30 March)
    began at 22:00 UTC the day before, the month at 23:00 UTC on 28 February (winter time), not a multiple of 24 h
    before."""
    windows = Windows.at(moment("2026-03-31 12:00:00"), AMSTERDAM)
    assert windows.day == moment("2026-03-30 22:00:00")
    assert windows.week == moment("2026-03-29 22:00:00")
    assert windows.month == moment("2026-02-28 23:00:00")


@pytest.fixture
def tokyo_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time set to Asia/Tokyo (TZ), put back afterwards."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("tokyo_local_time")
def test_no_time_zone_means_the_machines_local_time() -> None:
    """Without a time zone the windows are this machine's local midnights (here Tokyo's, UTC+9)."""
    now = moment("2026-12-01 16:00:00")  # 2 December 01:00 in Tokyo
    assert Windows.at(now, None) == Windows.at(now, zoneinfo.ZoneInfo("Asia/Tokyo"))
    assert Windows.at(now, None).day == moment("2026-12-01 15:00:00")


# --- spend ------------------------------------------------------------------------------------------------------


def test_a_run_handed_at_2359_counts_today_and_not_tomorrow() -> None:
    """A run handed at 23:59 counts in its day, all of it (even the hours it ran after midnight): in that day's
    total at 23:59:30, and in none of the next day's, though still in the week's and the month's."""
    late = paid("a", "2026-12-02 23:59:00", ran_hours=2.0)
    that_night = spend([late], moment("2026-12-02 23:59:30"), UTC)
    assert that_night.day.total.gpu_hours == pytest.approx(16.0)
    next_morning = spend([late], moment("2026-12-03 10:00:00"), UTC)
    assert next_morning.day.total == Tally()
    assert next_morning.day.lanes == {}
    assert next_morning.week.total.gpu_hours == next_morning.month.total.gpu_hours == pytest.approx(16.0)


def test_spend_totals_each_window_per_lane_with_its_cost() -> None:
    """Each run counts in the windows its handed_at falls in: today's, this week's (from Monday, in the month
    before too) and this month's, per lane and in all, with GPU-hours and cost so far."""
    runs = [
        paid("today", "2026-12-02 09:00:00", gpus=4, ran_hours=1.5, price=2.0),
        paid("monday", "2026-11-30 09:00:00", gpus=2, ran_hours=1.0, price=2.0, lane="sky"),
        paid("first", "2026-12-01 09:00:00", gpus=1, ran_hours=10.0, price=2.0),
        paid("old", "2026-11-01 09:00:00", gpus=8, ran_hours=100.0, price=2.0),
    ]
    result = spend(runs, moment("2026-12-02 12:00:00"), UTC)
    assert isinstance(result, Spend)
    assert (result.day.start, result.week.start, result.month.start) == (
        moment("2026-12-02 00:00:00"),
        moment("2026-11-30 00:00:00"),
        moment("2026-12-01 00:00:00"),
    )
    assert (result.day.total.runs, result.week.total.runs, result.month.total.runs) == (1, 3, 2)
    assert result.day.total.gpu_hours == pytest.approx(6.0)
    assert result.week.total.gpu_hours == pytest.approx(6.0 + 2.0 + 10.0)
    assert result.month.total.gpu_hours == pytest.approx(16.0)
    assert result.month.total.cost == pytest.approx(32.0)
    assert list(result.week.lanes) == ["gcp", "sky"]
    assert result.week.lanes["sky"] == Tally(runs=1, gpu_hours=2.0, cost=4.0)
    assert "sky" not in result.month.lanes


def test_an_unpriced_lane_has_no_cost_and_its_gpu_hours_are_said_apart() -> None:
    """A run whose lane has no price adds its GPU-hours to the total and to ``unpriced_gpu_hours``, none to the
    cost: its lane's cost is None, the total's is the priced lanes' cost."""
    runs = [
        paid("g", "2026-12-02 09:00:00", gpus=4, ran_hours=1.0, price=2.5),
        paid("s", "2026-12-02 10:00:00", gpus=2, ran_hours=3.0, price=None, lane="sky"),
    ]
    day = spend(runs, moment("2026-12-02 12:00:00"), UTC).day
    assert day.total.gpu_hours == pytest.approx(10.0)
    assert day.total.cost == pytest.approx(10.0)
    assert day.total.unpriced_gpu_hours == pytest.approx(6.0)
    assert day.lanes["sky"].cost is None
    assert day.lanes["sky"].worst_cost is None
    assert day.lanes["gcp"].unpriced_gpu_hours == 0.0
    only_unpriced = spend(runs[1:], moment("2026-12-02 12:00:00"), UTC).day.total
    assert only_unpriced.cost is None


def test_a_live_run_shows_what_it_ran_and_what_it_may_still_spend() -> None:
    """A running run counts its GPU-hours so far, and its bound less them as still open (worst case); one with no
    time limit leaves an unbounded worst case; an ended run leaves nothing open."""
    runs = [
        paid("r", "2026-12-02 09:00:00", gpus=8, limit_hours=4.0, ran_hours=1.0, price=3.0, status=PaidStatus.RUNNING),
        paid("q", "2026-12-02 09:30:00", gpus=2, limit_hours=1.0, price=3.0, status=PaidStatus.QUEUED),
        paid("e", "2026-12-02 08:00:00", gpus=1, limit_hours=4.0, ran_hours=1.0, price=3.0),
    ]
    total = spend(runs, moment("2026-12-02 12:00:00"), UTC).day.total
    assert (total.runs, total.live) == (3, 2)
    assert total.gpu_hours == pytest.approx(9.0)
    assert total.open_gpu_hours == pytest.approx(24.0 + 2.0)
    assert total.worst_gpu_hours == pytest.approx(35.0)
    assert total.open_cost == pytest.approx(78.0)
    assert total.worst_cost == pytest.approx(105.0)
    unbounded = paid("u", "2026-12-02 09:00:00", limit_hours=None, status=PaidStatus.RUNNING)
    assert spend([unbounded], moment("2026-12-02 12:00:00"), UTC).day.total.open_gpu_hours == float("inf")


def test_spend_of_no_runs_is_zero_in_every_window() -> None:
    """With no paid run every window's tally is zero (cost 0, not unknown) and names no lane."""
    result = spend([], moment("2026-12-02 12:00:00"), UTC)
    for period in (result.day, result.week, result.month):
        assert period.total == Tally(cost=0.0)
        assert period.lanes == {}


# --- the gate ---------------------------------------------------------------------------------------------------


def test_the_gate_is_the_ladders_gate() -> None:
    """BudgetGate is what core/paid.py's Gate asks for, and its ``refuse`` is on_budget's."""
    waiting: Gate = gate([], "2026-12-02 12:00:00", paid_gpu_hours_per_day=4)
    refusing: Gate = gate([], "2026-12-02 12:00:00", paid_gpu_hours_per_day=4, on_budget="refuse")
    assert (waiting.refuse, refusing.refuse) == (False, True)


def test_the_days_gpu_hours_line_is_exact() -> None:
    """3.5 GPU-hours used today of 4, and a job of 8 GPUs for 2 h: refused with the issue's line."""
    runs = [paid("a", "2026-12-02 08:00:00", gpus=7, ran_hours=0.5)]
    refusal = gate(runs, "2026-12-02 12:00:00", paid_gpu_hours_per_day=4).refusal("new", job(8, 2.0))
    assert refusal == "budget: 3.5 of 4 paid GPU-hours used today; this job's limit needs 16"


def test_the_months_cost_line_is_exact() -> None:
    """180 spent this month of 200 (on earlier days), and a job whose limit may cost 64 at 4 a GPU-hour: refused
    with the month's line; the day's own budget has room."""
    runs = [paid("a", "2026-12-01 08:00:00", gpus=5, ran_hours=9.0)]
    refusal = gate(runs, "2026-12-02 12:00:00", paid_cost_per_month=200, paid_gpu_hours_per_day=100).refusal(
        "new", job(8, 2.0)
    )
    assert refusal == "budget: 180 of 200 spent this month; this job's limit may cost 64"


def test_the_per_job_cap_line_is_exact() -> None:
    """A job whose limit needs 16 GPU-hours is over max_paid_gpu_hours_per_job = 8, whatever is left."""
    refusal = gate([], "2026-12-02 12:00:00", max_paid_gpu_hours_per_job=8).refusal("new", job(8, 2.0))
    assert refusal == "budget: this job's limit needs 16 paid GPU-hours, over max_paid_gpu_hours_per_job = 8"


def test_a_job_with_no_time_limit_is_told_to_give_one() -> None:
    """Under any budget a GPU job with no time limit has no bound: refused, saying to give it --time."""
    refusal = gate([], "2026-12-02 12:00:00", paid_cost_per_month=1000).refusal("new", job(8, None))
    assert refusal is not None
    assert refusal.startswith("budget: this job has no time limit")
    assert "--time" in refusal


def test_with_no_limit_set_nothing_is_refused() -> None:
    """Without any limit the gate refuses nothing, not even a job with no time limit on a spent day."""
    runs = [paid("a", "2026-12-02 08:00:00", ran_hours=1000.0)]
    assert gate(runs, "2026-12-02 12:00:00", on_budget="refuse").refusal("new", job(8, None)) is None


def test_a_job_that_fits_exactly_passes() -> None:
    """Used plus the job's worst case equal to the day's budget fits (passing means over, not at)."""
    runs = [
        paid("a", "2026-12-02 08:00:00", gpus=3, ran_hours=0.1),
        paid("b", "2026-12-02 09:00:00", gpus=1, ran_hours=0.7),
    ]
    assert gate(runs, "2026-12-02 12:00:00", paid_gpu_hours_per_day=17).refusal("new", job(8, 2.0)) is None
    assert gate(runs, "2026-12-02 12:00:00", paid_gpu_hours_per_day=16.9).refusal("new", job(8, 2.0)) is not None


def test_a_live_run_counts_its_worst_case_and_an_ended_one_what_it_ran() -> None:
    """Today a running run of 8 GPUs with a 2 h limit counts 16 GPU-hours though it ran 0.5 h; an ended one counts
    the 4 it ran."""
    live = paid("live", "2026-12-02 08:00:00", ran_hours=0.5, status=PaidStatus.RUNNING)
    ended = paid("done", "2026-12-02 07:00:00", ran_hours=0.5, status=PaidStatus.FAILED)
    assert gate([live, ended], "2026-12-02 12:00:00", paid_gpu_hours_per_day=40).day_gpu_hours == pytest.approx(20.0)


def test_a_run_handed_yesterday_at_2359_does_not_count_today() -> None:
    """Yesterday's 23:59 run, still running today, counts in yesterday's budget, not today's; it still counts in
    the month's cost."""
    late = paid("late", "2026-12-01 23:59:00", status=PaidStatus.RUNNING)
    today = gate([late], "2026-12-02 00:30:00", paid_gpu_hours_per_day=16, paid_cost_per_month=1000)
    assert today.day_gpu_hours == 0.0
    assert today.month_cost == pytest.approx(64.0)
    assert today.refusal("new", job(8, 2.0)) is None


def test_a_take_makes_the_next_dispatch_of_the_tick_count_it() -> None:
    """Two dispatches of 16 GPU-hours under 20 a day (and 70 a month at 4 a GPU-hour): the first fits and takes
    its reservation; the second, in the same tick, sees it in the day's GPU-hours and, as a smaller job, in the
    month's cost; the first, asked again, holds its reservation and passes."""
    budget = gate([], "2026-12-02 12:00:00", paid_gpu_hours_per_day=20, paid_cost_per_month=70)
    assert budget.refusal("first", job(8, 2.0)) is None
    budget.take("first", job(8, 2.0))
    budget.take("first", job(8, 2.0))  # a second take reserves nothing more
    assert budget.reserved == {"first": (8, 7200, 4.0)}
    assert budget.refusal("second", job(8, 2.0)) == (
        "budget: 16 of 20 paid GPU-hours used today; this job's limit needs 16"
    )
    assert budget.refusal("second", job(1, 2.0)) == "budget: 64 of 70 spent this month; this job's limit may cost 8"
    assert budget.refusal("first", job(8, 2.0)) is None


def test_a_reserved_dispatch_passes_and_counts_for_the_others() -> None:
    """A dispatch already reserved (on its way to the paid lane) is never refused, and its worst case counts
    against every other; a reservation that is already a paid run is counted once, as the run."""
    reserved: dict[str, Reservation] = {"going": (8, 7200.0, 4.0), "run": (8, 7200.0, 4.0)}
    runs = [paid("run", "2026-12-02 11:00:00", status=PaidStatus.STARTING)]
    budget = gate(runs, "2026-12-02 12:00:00", reserved=reserved, paid_gpu_hours_per_day=40)
    assert budget.refusal("going", job(64, 100.0)) is None
    assert budget.day_gpu_hours == pytest.approx(32.0)
    assert budget.month_cost == pytest.approx(128.0)
    assert budget.refusal("other", job(8, 2.0)) == (
        "budget: 32 of 40 paid GPU-hours used today; this job's limit needs 16"
    )


def test_a_job_with_no_gpus_needs_no_paid_gpu_hours() -> None:
    """A job of no GPUs needs no paid GPU-hours, so even with no time limit it passes a spent day."""
    runs = [paid("a", "2026-12-02 08:00:00", ran_hours=1.0)]
    assert gate(runs, "2026-12-02 12:00:00", paid_gpu_hours_per_day=4).refusal("new", job(0, None)) is None


def test_an_unpriced_lane_adds_no_cost_and_cannot_take_a_cost_budget() -> None:
    """This month's runs on a lane with no price add nothing to the month's cost; a job going to a lane with no
    price under a cost budget is refused (its cost has no bound), while a GPU-hours budget alone takes it."""
    runs = [paid("sky", "2026-12-01 08:00:00", lane="sky", price=None, ran_hours=100.0)]
    priced = gate(runs, "2026-12-02 12:00:00", paid_cost_per_month=100)
    assert priced.month_cost == 0.0
    assert priced.refusal("new", job(8, 2.0)) is None
    unpriced = gate(runs, "2026-12-02 12:00:00", price=None, paid_cost_per_month=100)
    refusal = unpriced.refusal("new", job(8, 2.0))
    assert refusal is not None
    assert "no price_per_gpu_hour" in refusal
    assert gate([], "2026-12-02 12:00:00", price=None, paid_gpu_hours_per_day=40).refusal("new", job()) is None


def test_a_live_run_with_no_limit_holds_every_handoff_of_its_day() -> None:
    """A live paid run handed today with no time limit (queued before the budget was set) leaves today's
    GPU-hours unbounded: the next job is refused with a line saying so, not an 'inf of 4'."""
    runs = [paid("u", "2026-12-02 08:00:00", limit_hours=None, status=PaidStatus.RUNNING)]
    refusal = gate(runs, "2026-12-02 12:00:00", paid_gpu_hours_per_day=4).refusal("new", job(1, 1.0))
    assert refusal is not None
    assert refusal.startswith("budget: a paid run handed today has no time limit")
    assert "inf" not in refusal


@pytest.mark.parametrize(
    ("used", "line"),
    [(3.96, "4"), (0.04, "0"), (12.34, "12.3"), (100.0, "100")],
    ids=["rounds-up-to-whole", "rounds-down-to-zero", "one-decimal", "whole"],
)
def test_numbers_have_at_most_one_decimal(used: float, line: str) -> None:
    """The lines' numbers keep at most one decimal and drop a trailing .0."""
    runs = [paid("a", "2026-12-02 08:00:00", gpus=1, ran_hours=used)]
    refusal = gate(runs, "2026-12-02 12:00:00", paid_gpu_hours_per_day=200).refusal("new", job(200, 1.0))
    assert refusal == f"budget: {line} of 200 paid GPU-hours used today; this job's limit needs 200"


# --- against a slow reference -----------------------------------------------------------------------------------

NOW = moment("2026-12-02 12:00:00")
STATUSES = [PaidStatus.SUCCEEDED, PaidStatus.FAILED, PaidStatus.RUNNING, PaidStatus.QUEUED, PaidStatus.STARTING]
any_run = st.builds(
    PaidRun,
    dispatch_id=st.text("0123456789abcdef", min_size=12, max_size=12),
    lane=st.sampled_from(["gcp", "sky", "runpod"]),
    handed_at=st.floats(min_value=NOW - 50 * 86_400, max_value=NOW),
    gpus=st.integers(min_value=0, max_value=16),
    limit_seconds=st.none() | st.floats(min_value=60, max_value=86_400),
    price_per_gpu_hour=st.none() | st.floats(min_value=0.5, max_value=10),
    status=st.sampled_from(STATUSES),
    run_seconds=st.floats(min_value=0, max_value=86_400),
)


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(any_run, max_size=30), zone=st.sampled_from(["UTC", "Europe/Amsterdam", "Pacific/Auckland"]))
def test_spend_and_the_gate_agree_with_a_date_per_run(runs: list[PaidRun], zone: str) -> None:
    """For any runs, spend counts in each window exactly the runs whose handoff date (built per run, the slow way)
    falls in it, the lanes sum to the total, and the gate commits what spend calls the day's worst GPU-hours and
    the month's worst cost."""
    tz = zoneinfo.ZoneInfo(zone)
    today = datetime.datetime.fromtimestamp(NOW, tz).date()
    result = spend(runs, NOW, tz)
    for period, counts in (
        (result.day, lambda d: d == today),
        (result.week, lambda d: d.isocalendar()[:2] == today.isocalendar()[:2]),
        (result.month, lambda d: (d.year, d.month) == (today.year, today.month)),
    ):
        inside = [r for r in runs if counts(datetime.datetime.fromtimestamp(r.handed_at, tz).date())]
        assert period.total.runs == len(inside)
        assert period.total.gpu_hours == pytest.approx(sum(r.gpu_hours(NOW) for r in inside))
        assert sum(t.runs for t in period.lanes.values()) == period.total.runs
        assert sum(t.gpu_hours for t in period.lanes.values()) == pytest.approx(period.total.gpu_hours)
    budget = BudgetGate(BudgetConfig(paid_gpu_hours_per_day=1, timezone=zone), runs, NOW, {}, 1.0)
    assert budget.day_gpu_hours == pytest.approx(result.day.total.worst_gpu_hours)
    assert budget.month_cost == pytest.approx(result.month.total.worst_cost or 0.0)


@pytest.mark.parametrize(
    ("spec", "limits", "never"),
    [
        (job(8, None), {"paid_gpu_hours_per_day": 100}, True),
        (job(8, 2.0), {"max_paid_gpu_hours_per_job": 8}, True),
        (job(8, 2.0), {"paid_gpu_hours_per_day": 12}, True),
        (job(8, 2.0), {"paid_cost_per_month": 60}, True),
        (job(8, 2.0), {"paid_gpu_hours_per_day": 16, "paid_cost_per_month": 64}, False),
        (job(0, None), {"paid_gpu_hours_per_day": 1}, False),
        (job(8, None), {}, False),
    ],
    ids=["no-time-limit", "over-the-job-cap", "over-a-whole-day", "over-a-whole-month", "fits-an-empty-day", "no-gpus",
         "no-limit"],
)  # fmt: skip
def test_a_job_that_can_never_fit_is_told_apart(spec: JobSpec, limits: dict[str, float], never: bool) -> None:
    """``never_paid`` names a reason only for a job the budget refuses even with nothing spent (no time limit, over
    the per-job cap, its worst case alone over a day's GPU-hours or a month's cost at 4 a GPU-hour): waiting cannot
    let it through; one that fits an empty day gets None."""
    why = never_paid(BudgetConfig(**limits), spec, 4.0)  # type: ignore[arg-type]
    assert (why is not None) is never
    assert why is None or why.startswith("budget: ")
