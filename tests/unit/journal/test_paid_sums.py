"""The journal sums the ended paid runs in SQL (Journal.paid_sums) exactly as core/paid.py and core/budget.py count
them one by one: spend() and the budget gate answer the same from the sums as from every run."""

from __future__ import annotations

import random
import zoneinfo
from pathlib import Path

import pytest

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.budget import BudgetGate, Windows, spend
from fellows_fsm.core.paid import LIVE_PAID, PaidMark
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import JobSpec

NOW = 1_796_040_000.0  # 2026-11-30 12:00 UTC, a Monday: the week began today, the month on the 1st
ZONE = zoneinfo.ZoneInfo("Europe/Amsterdam")


def journal_of(tmp_path: Path, n: int, seed: int) -> Journal:
    """A journal with ``n`` paid runs of three lanes (one unpriced) handed over the last 40 days, in every status."""
    rng = random.Random(seed)
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.check_intact()
    ends = [PaidStatus.SUCCEEDED, PaidStatus.FAILED, PaidStatus.CANCELLED]
    for i in range(n):
        dispatch_id = f"{i:012x}"
        lane, price = rng.choice([("gcp", 2.5), ("sky", 1.25), ("free-ish", None)])
        handed = NOW - rng.uniform(0, 40 * 86400)
        limit = rng.choice([None, 3600.0, 7200.0])
        journal.add_lane_dispatch(dispatch_id, JobSpec("j", "/j.sh"), intent="prod", lane=lane, at=handed)
        journal.set_paid(dispatch_id, handed, PaidMark(PaidStatus.STARTING, lane, rng.choice([0, 1, 8]), limit, price))
        kind = rng.random()
        if kind < 0.2:
            continue  # still starting
        if kind < 0.8:
            journal.set_paid(dispatch_id, handed + 60, PaidMark(PaidStatus.RUNNING))
        reported = rng.uniform(0, 9000) if rng.random() < 0.3 else None
        if kind < 0.9:
            end = handed + rng.uniform(60, 9000)
            journal.set_paid(dispatch_id, min(end, NOW), PaidMark(rng.choice(ends), run_seconds=reported))
    return journal


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spend_from_the_sums_is_spend_from_every_run(tmp_path: Path, seed: int) -> None:
    """Every window's and lane's tally is the same whether the ended runs are summed by the journal or counted one
    by one."""
    with journal_of(tmp_path, 400, seed) as journal:
        windows = Windows.at(NOW, ZONE)
        every = spend(journal.paid_runs(), NOW, ZONE)
        live = journal.paid_runs(since=windows.earliest, status=sorted(LIVE_PAID))
        summed = spend(live, NOW, ZONE, ended=journal.paid_sums(windows, NOW))
    for mine, theirs in ((every.day, summed.day), (every.week, summed.week), (every.month, summed.month)):
        assert mine.start == theirs.start
        assert sorted(mine.lanes) == sorted(theirs.lanes)
        for name in (*mine.lanes, None):
            a = mine.total if name is None else mine.lanes[name]
            b = theirs.total if name is None else theirs.lanes[name]
            assert (a.runs, a.live) == (b.runs, b.live)
            assert a.gpu_hours == pytest.approx(b.gpu_hours)
            assert a.unpriced_gpu_hours == pytest.approx(b.unpriced_gpu_hours)
            assert (a.cost is None) == (b.cost is None)
            assert (a.cost or 0) == pytest.approx(b.cost or 0)
            assert a.open_gpu_hours == pytest.approx(b.open_gpu_hours)


@pytest.mark.parametrize("seed", [4, 5])
def test_the_gate_counts_the_same_from_the_sums(tmp_path: Path, seed: int) -> None:
    """Today's committed GPU-hours and the month's committed cost are the same from the journal's sums."""
    budget = BudgetConfig(paid_gpu_hours_per_day=100, paid_cost_per_month=1000, timezone="Europe/Amsterdam")
    with journal_of(tmp_path, 400, seed) as journal:
        windows = Windows.at(NOW, budget.zone)
        every = BudgetGate(budget, journal.paid_runs(), NOW, {}, 2.5)
        live = journal.paid_runs(since=windows.earliest, status=sorted(LIVE_PAID))
        summed = BudgetGate(budget, live, NOW, {}, 2.5, ended=journal.paid_sums(windows, NOW))
    assert summed.day_gpu_hours == pytest.approx(every.day_gpu_hours)
    assert summed.month_cost == pytest.approx(every.month_cost)
