# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The [budget] as the driver applies it, on the fake cluster and a fake paid lane: a handoff whose worst case
would pass the budget is not made (the job waits pending on its last free rung, with the reason journaled), a raised
budget lets it through, ``on_budget = "refuse"`` ends it NO_BUDGET with nothing paid, two dispatches in one tick never
share the last of a budget, and a restarted driver counts what was spent."""

from __future__ import annotations

from pathlib import Path

import attrs
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.budget import journaled_budget, remember_budget
from fellows_fsm.driver.inbox import enqueue
from fellows_fsm.journal.store import Journal
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
    raised = attrs.evolve(r.config, budget=BudgetConfig(paid_gpu_hours_per_day=40))
    assert remember_budget(raised, r.journal, at=0.0) is not None  # a later submit's (or spend's) [budget], said
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


# ----------------------------------------------------------------------------------------------- pinned to the lane
def test_a_pin_over_the_budget_ends_no_budget_and_its_lane_is_never_asked(
    router_of: RouterOf, lane: FakePaidLane
) -> None:
    """``pin="gcp"`` asks the same budget as a walked handoff: with on_budget = "refuse" and a job over the per-job
    cap, it ends NO_BUDGET with the reason and no paid job is made."""
    r = router_of(max_paid_gpu_hours_per_job=8, on_budget="refuse")
    d = r.dispatch(SPEC, pin="gcp").dispatch_id
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.final, row.outcome) == ("NO_BUDGET", True, "no-budget")
    assert "over max_paid_gpu_hours_per_job = 8" in r.journal.steps(d)[-1].note
    assert lane.created == []
    assert not r.busy


def test_pins_adopted_in_one_tick_never_share_the_last_of_a_budget(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """Three pins enqueued at once with room for one (20 GPU-h a day, 16 each): one is handed off, the two others
    wait (once per reason) with their command not started; a raised budget lets one more through."""
    r = router_of(paid_gpu_hours_per_day=20)
    ids = [enqueue(r.config, r.journal, SPEC, r.config.route("gcp")) for _ in range(3)]
    ticks(r, frozen, 5)
    assert len(lane.created) == 1
    waiting = [i for i in ids if i not in lane.created]
    for i in waiting:
        row = r.journal.dispatch(i)
        assert row is not None
        assert (row.state, row.outcome) == ("HANDING_OFF", "budget")
        assert [s.trigger for s in r.journal.steps(i)] == ["pin", "budget_wait"]
        assert r.journal.handoff(i) is None
    raised = attrs.evolve(r.config, budget=BudgetConfig(paid_gpu_hours_per_day=32))
    remember_budget(raised, r.journal, at=0.0)
    ticks(r, frozen, 5)
    assert len(lane.created) == 2
    assert sorted(r.journal.dispatch(i).outcome for i in waiting) == ["", "budget"]  # type: ignore[union-attr]


# ----------------------------------------------------------------------------------------------- who changes it
def _from(tmp_path: Path, name: str, **budget: object) -> Config:
    """A config read from the file tmp_path/NAME (written), with this [budget]."""
    path = tmp_path / name
    path.write_text("# a project's config\n", encoding="utf-8")
    return Config(budget=BudgetConfig(**budget), state_dir=tmp_path, source=str(path))  # type: ignore[arg-type]


def test_the_budget_changes_only_from_the_config_it_came_from(tmp_path: Path) -> None:
    """A config with no file, or another project's, never replaces the journaled [budget] (each says why); its own
    config changes it (said, with what it was); once its file is gone, another config may take it over."""
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        own = _from(tmp_path, "fellows.toml", paid_gpu_hours_per_day=10)
        said = remember_budget(own, journal, at=1.0)
        assert said is not None  # (the driver applied no limit)
        assert "paid_gpu_hours_per_day = 10, on_budget = 'wait' (was: no limit)" in said
        assert remember_budget(own, journal, at=2.0) is None  # the same: nothing to say
        no_file = remember_budget(Config(state_dir=tmp_path), journal, at=3.0)
        assert no_file is not None
        assert "no config file" in no_file
        other = remember_budget(_from(tmp_path, "other.toml"), journal, at=4.0)
        assert other is not None
        assert "not applied" in other
        assert journaled_budget(journal) == own.budget
        raised = attrs.evolve(own, budget=BudgetConfig(paid_gpu_hours_per_day=20))
        said = remember_budget(raised, journal, at=5.0)
        assert said is not None
        assert "was: paid_gpu_hours_per_day = 10" in said
        assert journaled_budget(journal) == raised.budget
        (tmp_path / "fellows.toml").unlink()
        assert remember_budget(_from(tmp_path, "other.toml"), journal, at=6.0) is not None
        assert journaled_budget(journal) == BudgetConfig()
    finally:
        journal.close()
