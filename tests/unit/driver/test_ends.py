# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The driver follows every job that started to its end: one squeue per poll whatever their number, at most one
batched sacct for the jobs that left squeue, a slower cadence for running jobs, every missed end recorded once by
a restarted driver, and a driver that stays up while anything runs."""

from __future__ import annotations

from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.core.vocab import Result, State
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal

from .fixtures import SPEC, MakeRouter, drive, fake, frozen, make_router  # noqa: F401


def _started(r: Router, fake: FakeScheduler, frozen: FrozenDateTimeFactory, n: int) -> list[str]:
    """``n`` dispatches whose first jobs started and were seen running; their ids."""
    ids = [r.dispatch(JobSpec(f"j{i}", "train.sbatch", gpus=1)).dispatch_id for i in range(n)]
    drive(r, fake, frozen)
    assert all(r.handle(i).state == State.RUNNING for i in ids)
    return ids


def test_a_thousand_running_jobs_cost_one_squeue_and_at_most_one_sacct_a_poll(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """1,000 running dispatches are looked at in the poll's one squeue; the 300 that ended are read in one sacct
    for all of them, and each is recorded once with its result."""
    fake.total_gpus = 2000
    r = make_router(SlurmSettings(park_cap_seconds=600, poll_interval_seconds=10), follow_interval_seconds=10)
    ids = _started(r, fake, frozen, 1000)
    jobs = {i: r.handle(i).slurm_job_id for i in ids}
    for n, i in enumerate(ids[:300]):
        fake.end(jobs[i], "COMPLETED" if n % 2 else "FAILED", exit_code=0 if n % 2 else 3)  # type: ignore[arg-type]
    fake.calls.clear()
    frozen.tick(10)
    r.poll()
    assert (fake.calls["observe"], fake.calls["sacct"]) == (1, 1)
    ended = r.journal.ends()
    assert len(ended) == 300
    assert {e.result for e in ended.values()} == {Result.SUCCEEDED, Result.FAILED}
    assert r.handle(ids[0]).state == State.ENDED
    assert r.handle(ids[-1]).state == State.RUNNING
    fake.calls.clear()
    frozen.tick(10)
    r.poll()
    assert (fake.calls["observe"], fake.calls["sacct"]) == (1, 0)  # nothing left squeue: no sacct
    assert len(r.journal.ends()) == 300  # recorded once


def test_running_jobs_are_looked_at_once_per_follow_interval(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With only running jobs, a poll between two follow intervals asks SLURM nothing; the end is recorded at the
    first poll of the next interval."""
    r = make_router(SlurmSettings(park_cap_seconds=600, poll_interval_seconds=10), follow_interval_seconds=60)
    [dispatch_id] = _started(r, fake, frozen, 1)
    fake.end(r.handle(dispatch_id).slurm_job_id, "TIMEOUT")  # type: ignore[arg-type]
    looked = []
    for _ in range(7):
        fake.calls.clear()
        frozen.tick(10)
        r.poll()
        looked.append(fake.calls["observe"])
    assert sum(looked) == 1
    assert r.handle(dispatch_id).state == State.ENDED
    assert r.handle(dispatch_id).result == Result.TIMEOUT
    assert r.busy is False


def test_a_restarted_driver_records_every_end_it_missed_once(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A driver killed while jobs run: the next one recovers them RUNNING (live) and records each end it missed,
    once."""
    r = make_router(SlurmSettings(park_cap_seconds=600, poll_interval_seconds=10))
    ids = _started(r, fake, frozen, 3)
    jobs = [r.handle(i).slurm_job_id for i in ids]
    assert r.busy  # the driver stays up while anything runs
    r.journal.release_driver()  # the driver dies (its lock goes with it)
    fake.end(jobs[0], "COMPLETED")  # type: ignore[arg-type]
    fake.end(jobs[1], "OUT_OF_MEMORY", exit_code=137)  # type: ignore[arg-type]
    frozen.tick(600)
    journal = Journal(r.config.journal_path)
    try:
        again = Router(r.config, fake, journal).start()
        assert set(again.live) == set(ids)
        again.poll()
        again.poll()
        ends = journal.ends()
        assert {i: e.result for i, e in ends.items()} == {ids[0]: Result.SUCCEEDED, ids[1]: Result.OUT_OF_MEMORY}
        assert again.handle(ids[2]).state == State.RUNNING
        steps = [s.trigger for s in journal.steps(ids[1])]
        assert steps.count("end") == 1
    finally:
        journal.close()
