# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The [budget] as the driver applies it, on the fake cluster and a fake paid lane: a handoff whose worst case
would pass the budget is not made (the job waits pending on its last free rung, with the reason journaled), a raised
budget lets it through, ``on_budget = "refuse"`` ends it NO_BUDGET with nothing paid, two dispatches in one tick never
share the last of a budget, and a restarted driver counts what was spent."""

from __future__ import annotations

from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.budget import remember_budget
from fellows_fsm.testing import FakePaidLane

from .fixtures import RouterOf, fake, frozen, lane, router_of, ticks  # noqa: F401

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200)  # at worst 16 GPU-hours


def test_a_handoff_over_the_budget_waits_on_its_last_rung_until_the_budget_is_raised(
    router_of: RouterOf, lane: FakePaidLane, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """The second job's worst case would pass 20 GPU-hours a day: it stays pending on low-eur with the reason in
    its history and outcome, no paid job is made for it, and once the budget is raised it is handed off."""
    r = router_of(paid_gpu_hours_per_day=20)
    first = r.dispatch(SPEC).dispatch_id
    ticks(r, frozen, 40)
    assert r.handle(first).state == "PAID_QUEUED"
    second = r.dispatch(SPEC).dispatch_id
    ticks(r, frozen, 40)
    row = r.journal.dispatch(second)
    assert row is not None
    assert (row.label, row.outcome) == ("RESUBMITTED(low-eur)", "budget")
    assert r.journal.steps(second)[-1].note == "budget: 16 of 20 paid GPU-hours used today; this job's limit needs 16"
    assert row.job_id is not None
    assert fake.jobs[row.job_id].state == "PENDING"  # free, and still there to start
    assert lane.created == [first]
    ticks(r, frozen, 20)
    assert [s.trigger for s in r.journal.steps(second)].count("budget_wait") == 1  # once per reason
    remember_budget(BudgetConfig(paid_gpu_hours_per_day=40), r.journal)  # a later submit's (or spend's) [budget]
    ticks(r, frozen, 5)
    assert r.handle(second).state == "PAID_QUEUED"
    assert lane.created == [first, second]
    assert not fake.live_jobs(token_prefix="fsm-")


def test_a_paid_run_that_ended_frees_what_it_did_not_use(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """An ended paid run counts what it ran, not its worst case: a waiting job fits once it has ended early."""
    r = router_of(paid_gpu_hours_per_day=25)
    first = r.dispatch(SPEC).dispatch_id
    ticks(r, frozen, 40)
    second = r.dispatch(SPEC).dispatch_id
    ticks(r, frozen, 40)
    assert r.journal.dispatch(second).outcome == "budget"  # type: ignore[union-attr]
    lane.move(first, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    ticks(r, frozen, 36, step=100)  # an hour: 8 GPU-hours
    lane.move(first, PaidStatus.SUCCEEDED)
    ticks(r, frozen, 3)
    assert r.handle(first).state == "PAID_DONE"
    assert r.handle(second).state == "PAID_QUEUED"  # about 8 + 16 <= 25


def test_on_budget_refuse_ends_the_dispatch_no_budget_with_nothing_paid(
    router_of: RouterOf, lane: FakePaidLane, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With on_budget = "refuse", a job whose paid run would pass the budget ends NO_BUDGET (its own exit code):
    its last free job is cancelled, and no paid job is made."""
    r = router_of(max_paid_gpu_hours_per_job=8, on_budget="refuse")
    d = r.dispatch(SPEC).dispatch_id
    ticks(r, frozen, 40)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.final, row.outcome) == ("NO_BUDGET", True, "no-budget")
    assert "over max_paid_gpu_hours_per_job = 8" in r.journal.steps(d)[-1].note
    assert lane.created == []
    assert not fake.live_jobs(token_prefix="fsm-")


def test_two_dispatches_in_one_tick_never_share_the_last_of_a_budget(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """Two jobs reach their last rung's deadline in the same tick with room for one: exactly one is handed off."""
    r = router_of(paid_gpu_hours_per_day=20)
    ids = [r.dispatch(SPEC).dispatch_id, r.dispatch(SPEC).dispatch_id]
    ticks(r, frozen, 60)
    states = sorted(r.handle(i).state for i in ids)
    assert states == ["PAID_QUEUED", "RESUBMITTED(low-eur)"]
    assert len(lane.created) == 1


def test_a_restarted_driver_counts_what_was_spent(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """What paid runs committed is read from the journal: a new driver refuses what the old one would have."""
    r = router_of(paid_gpu_hours_per_day=20)
    first = r.dispatch(SPEC).dispatch_id
    ticks(r, frozen, 40)
    assert r.handle(first).state == "PAID_QUEUED"
    r.journal.release_driver()
    r2 = router_of(paid_gpu_hours_per_day=20)
    second = r2.dispatch(SPEC).dispatch_id
    ticks(r2, frozen, 40)
    assert r2.journal.dispatch(second).outcome == "budget"  # type: ignore[union-attr]
    assert lane.created == [first]
