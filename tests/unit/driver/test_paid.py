# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The paid run followed by the driver on a fake paid lane: PAID_QUEUED → PAID_RUNNING → PAID_DONE with its
GPU-hours, one look per lane per poll, a user's cancel (one delete, journaled first), a job deleted outside
(withdrawn, never made again), a stuck queue (deleted, PAID_FAILED), a restart that follows on, a lane that does
not answer (never read as an end)."""

from __future__ import annotations

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import JobSpec
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.inbox import has_work
from fellows_fsm.driver.router import Router
from fellows_fsm.errors import PaidLaneError
from fellows_fsm.testing import FakePaidLane

from .fixtures import RouterOf, fake, frozen, lane, router_of, ticks  # noqa: F401

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200)


def to_paid(r: Router, frozen: FrozenDateTimeFactory, spec: JobSpec = SPEC) -> str:
    """Dispatch a job and walk it (nothing can start) until its paid job is made."""
    dispatch_id = r.dispatch(spec).dispatch_id
    for _ in range(100):
        frozen.tick(10)
        r.poll()
        if r.handle(dispatch_id).state == "PAID_QUEUED":
            return dispatch_id
    raise AssertionError(f"dispatch {dispatch_id} never reached its paid lane: {r.handle(dispatch_id).state}")


def test_a_paid_job_is_followed_to_its_end_and_its_gpu_hours_counted(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """After the ladder, the paid job is live (PAID_QUEUED, then PAID_RUNNING) until it succeeds: PAID_DONE, with
    the GPU-hours and cost of the time it was followed running."""
    r = router_of()
    d = to_paid(r, frozen)
    assert r.busy
    assert lane.created == [d]
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    assert r.handle(d).state == "PAID_RUNNING"
    ticks(r, frozen, 36, step=100)  # an hour
    assert r.handle(d).state == "PAID_RUNNING"
    lane.move(d, PaidStatus.SUCCEEDED, "exit 0")
    ticks(r, frozen, 1)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.final, row.outcome) == ("PAID_DONE", True, "paid-succeeded")
    run = r.journal.paid_run(d)
    assert run is not None
    assert run.status == "succeeded"
    assert run.lane == "gcp"
    assert run.gpu_hours(0) == pytest.approx(8 * 3610 / 3600)  # from the look that saw it run to the one it ended
    assert run.cost(0) == pytest.approx(2.5 * 8 * 3610 / 3600)
    assert run.bound_gpu_hours == 16  # 8 GPUs x its 2-hour limit
    assert not r.busy


def test_one_look_per_lane_per_poll_whatever_the_number_of_paid_jobs(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """Forty paid jobs of one lane are looked at in ONE call per poll, and never twice within a poll interval."""
    r = router_of()
    ids = [r.dispatch(SPEC).dispatch_id for _ in range(40)]
    ticks(r, frozen, 60)
    assert {r.handle(i).state for i in ids} == {"PAID_QUEUED"}
    lane.looks.clear()
    ticks(r, frozen, 5)  # five polls of 10 s (the poll interval)
    assert len(lane.looks) == 5
    assert all(sorted(look) == sorted(ids) for look in lane.looks)
    lane.looks.clear()
    r.poll()
    r.poll()  # two more polls at the same instant: no second look
    assert len(lane.looks) <= 1


def test_cancel_of_a_running_paid_job_deletes_it_once_journaled_first(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A user's cancel of a paid running job journals WITHDRAWN, then deletes the job exactly once."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    assert r.withdraw(d) == [f"fsm-{d}@gcp"]
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("WITHDRAWN", "withdrawn")
    assert lane.deleted == [d]
    ticks(r, frozen, 5)
    assert lane.deleted == [d]
    assert lane.created == [d]
    run = r.journal.paid_run(d)
    assert run is not None
    assert run.status == "cancelled"
    assert not run.live


def test_a_delete_the_lane_refuses_is_asked_again_and_counted_until_taken(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A delete the lane refuses stays asked each poll (the run counted as live meanwhile), also after a restart;
    the withdrawal says it is pending (PaidLaneError, exit 8), never that the job was cancelled."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.refuse_deletes = 2
    with pytest.raises(PaidLaneError, match=r"its paid job on lane gcp is not deleted yet \(the fake paid lane"):
        r.withdraw(d)
    run = r.journal.paid_run(d)
    assert run is not None
    assert run.status == "cancelling"
    assert run.live
    r.journal.release_driver()
    r2 = router_of()  # a restarted driver asks it again
    ticks(r2, frozen, 3)
    assert lane.deleted == [d, d, d]
    run = r2.journal.paid_run(d)
    assert run is not None
    assert run.status == "cancelled"


def test_a_paid_job_deleted_outside_is_withdrawn_and_never_made_again(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A paid job someone deleted outside ends the dispatch WITHDRAWN (withdrawn-outside); no second create."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.GONE)
    ticks(r, frozen, 3)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("WITHDRAWN", "withdrawn-outside")
    assert "deleted outside fellows-fsm" in r.journal.steps(d)[-1].note
    assert lane.created == [d]
    assert lane.deleted == []


def test_a_paid_job_stuck_queued_past_its_timeout_is_deleted_and_fails(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """Queued longer than the lane's queue_timeout_seconds: deleted once, the dispatch ends PAID_FAILED with the
    reason, and no second paid job is made."""
    lane.queue_timeout_seconds = 120
    r = router_of()
    d = to_paid(r, frozen)
    ticks(r, frozen, 5)
    assert r.handle(d).state == "PAID_QUEUED"
    ticks(r, frozen, 10)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-stuck-queued")
    assert "queue_timeout_seconds = 120" in r.journal.steps(d)[-1].note
    assert lane.deleted == [d]
    assert lane.created == [d]


def test_a_lane_that_does_not_answer_is_never_read_as_an_end(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """While the paid lane cannot be asked, the dispatch stays where it was (a failure line each poll)."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.unavailable = True
    ticks(r, frozen, 5)
    assert r.handle(d).state == "PAID_QUEUED"
    lane.unavailable = False
    lane.move(d, PaidStatus.FAILED, "quota exceeded")
    ticks(r, frozen, 1)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-failed")
    assert r.journal.steps(d)[-1].note == "quota exceeded"


def test_a_restarted_driver_follows_the_paid_job_on_without_a_second_create(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A driver restarted while a paid job runs follows it to its end; the job is made once."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    r.journal.release_driver()
    r2 = router_of()
    assert r2.busy
    lane.move(d, PaidStatus.SUCCEEDED)
    ticks(r2, frozen, 1)
    assert r2.handle(d).state == "PAID_DONE"
    assert lane.created == [d]


def test_a_crash_between_the_create_and_its_journal_write_makes_one_job(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A driver killed right after the create call (the hand_off step journaled, the answer not) is followed by
    the next driver: the create by name finds the job, and there is one paid job."""
    r = router_of()
    d = r.dispatch(SPEC).dispatch_id
    lane.die_after_create = True
    with pytest.raises(SystemExit):
        ticks(r, frozen, 100)
    assert r.journal.handoff(d) is not None
    assert r.handle(d).state == "HANDING_OFF"
    assert lane.created == [d]
    r.journal.release_driver()
    lane.die_after_create = False
    r2 = router_of()
    ticks(r2, frozen, 2)
    assert r2.handle(d).state == "PAID_QUEUED"
    assert lane.created == [d]


def test_a_paid_job_on_a_lane_that_stops_it_itself_is_deleted_two_polls_past_its_limit(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """On a lane that ends a job at its time limit itself (as Batch does), one that still runs is deleted two polls
    after its limit (PAID_FAILED): the lane's own stop is given its grace."""
    lane.stops_at_limit = True
    r = router_of()
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    ticks(r, frozen, 72, step=100)  # 7200 s: its limit, not past it with the grace
    assert r.handle(d).state == "PAID_RUNNING"
    assert lane.deleted == []
    ticks(r, frozen, 3)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-over-its-limit")
    assert lane.deleted == [d]


def test_a_paid_job_on_a_lane_that_does_not_stop_it_is_deleted_within_its_bound(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """On a lane that does not end a job at its time limit, it is deleted at the last poll before its limit (one
    poll interval early, as the note says), so what it is counted never passes the bound it was handed off with."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)  # seen running
    ticks(r, frozen, 718)  # 7180 s of its 7200: the next poll is not yet at its limit
    assert r.handle(d).state == "PAID_RUNNING"
    assert lane.deleted == []
    ticks(r, frozen, 1)  # 7190 s: the poll after this one would be at its limit
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-over-its-limit")
    assert "within a poll (10 s) of its time limit of 7200 s" in r.journal.steps(d)[-1].note
    assert lane.deleted == [d]
    run = r.journal.paid_run(d)
    assert run is not None
    assert run.gpu_hours(r.clock.now()) <= run.bound_gpu_hours


def test_a_delete_not_yet_taken_is_work_for_a_driver(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """With no live dispatch left, a paid job whose delete the lane refused still keeps (or starts) a driver."""
    r = router_of()
    d = to_paid(r, frozen)
    lane.refuse_deletes = 1
    with pytest.raises(PaidLaneError):
        r.withdraw(d)
    assert r.busy
    assert has_work(r.journal)
    ticks(r, frozen, 1)
    assert not r.busy
    assert not has_work(r.journal)


def test_a_running_paid_job_its_lane_cannot_be_looked_at_is_deleted_by_name_past_its_limit(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """While every look fails, a running paid job on a lane that stops jobs at their limit (as Batch does) is still
    deleted by name once its time limit (and the grace) has passed since it was seen running: PAID_FAILED,
    paid-over-its-limit."""
    lane.stops_at_limit = True
    r = router_of()
    d = to_paid(r, frozen)
    lane.move(d, PaidStatus.RUNNING)
    ticks(r, frozen, 1)
    lane.unavailable = True
    ticks(r, frozen, 72, step=100)
    assert r.handle(d).state == "PAID_RUNNING"
    assert lane.deleted == []
    ticks(r, frozen, 3)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-over-its-limit")
    assert "could not be looked at" in r.journal.steps(d)[-1].note
    assert lane.deleted == [d]


def test_a_queued_paid_job_unseen_for_longer_than_its_limit_is_deleted_by_name(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A paid job last seen queued, then unseen (every look fails) for longer than its time limit, may be running
    past it: deleted by name (PAID_FAILED, paid-over-its-limit); never before its limit has passed."""
    r = router_of()
    d = to_paid(r, frozen)
    ticks(r, frozen, 2)
    lane.unavailable = True
    ticks(r, frozen, 70, step=100)
    assert r.handle(d).state == "PAID_QUEUED"
    assert lane.deleted == []
    ticks(r, frozen, 5, step=100)
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-over-its-limit")
    assert "last seen queued" in r.journal.steps(d)[-1].note
    assert lane.deleted == [d]


def test_a_job_queued_past_its_limit_is_not_deleted_when_the_first_look_after_a_restart_fails(
    router_of: RouterOf, lane: FakePaidLane, frozen: FrozenDateTimeFactory
) -> None:
    """A paid job seen queued for longer than its time limit, then a restart whose first looks fail: it is not
    deleted (its wait is counted from the new driver's first look), until the lane stays dark past its limit."""
    r = router_of()
    d = to_paid(r, frozen)
    ticks(r, frozen, 80, step=100)  # 8000 s queued, seen so at each poll: longer than its 7200 s limit
    assert r.handle(d).state == "PAID_QUEUED"
    r.journal.release_driver()
    lane.unavailable = True
    r2 = router_of()
    r2.recover()
    ticks(r2, frozen, 3)
    assert r2.journal.dispatch(d).state == "PAID_QUEUED"  # type: ignore[union-attr]
    assert lane.deleted == []
    ticks(r2, frozen, 75, step=100)
    assert r2.journal.dispatch(d).outcome == "paid-over-its-limit"  # type: ignore[union-attr]
    assert lane.deleted == [d]
