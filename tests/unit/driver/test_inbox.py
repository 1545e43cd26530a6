# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The inbox on the fake port: a dispatch another process enqueues is adopted by the driver; every dispatch is born
by enqueue; a cancel is delivered as a request the driver answers."""

from __future__ import annotations

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler
from fellows_fsm.driver.inbox import answered_error, enqueue
from fellows_fsm.errors import FellowsError, SchedulerUnreachable
from fellows_fsm.journal.store import Journal

from .fixtures import SPEC, MakeRouter, fake, frozen, make_router  # noqa: F401


def test_a_dispatch_another_process_enqueues_is_adopted_and_submitted_on_the_next_tick(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """enqueue() through a second journal handle needs no driver lock; the driving router's next poll submits it."""
    r = make_router()
    other = Journal(r.journal.path)
    try:
        dispatch_id = enqueue(r.config, other, SPEC, note="kept by the preflight")
        lane_id = enqueue(r.config, other, SPEC, r.config.route("gcp"))
    finally:
        other.close()
    assert r.journal.steps(dispatch_id) == []  # nothing queued by enqueue itself
    r.poll()
    steps = r.journal.steps(dispatch_id)
    assert [(s.trigger, s.qos, s.note) for s in steps] == [("submit", "high-eur", "kept by the preflight")]
    assert r.handle(dispatch_id).slurm_job_id is not None
    assert set(r.driven) == {dispatch_id, lane_id}
    r.poll()
    assert [s.trigger for s in r.journal.steps(dispatch_id)] == ["submit"]  # adopted once, never submitted twice


def test_router_dispatch_is_born_by_enqueue_and_adopted_like_any_other(
    make_router: MakeRouter, fake: FakeScheduler
) -> None:
    """Router.dispatch journals its row through the inbox and adopts it as a tick does: a row another process
    enqueued just before is adopted by the same call (submitted by the next poll), and the new one is submitted."""
    r = make_router()
    other = Journal(r.journal.path)
    try:
        before = enqueue(r.config, other, SPEC)
    finally:
        other.close()
    h = r.dispatch(SPEC)
    assert set(r.live) == {before, h.dispatch_id}
    assert r.handle(h.dispatch_id).slurm_job_id is not None
    assert r.journal.steps(before) == []
    r.poll()
    assert [s.trigger for s in r.journal.steps(before)] == ["submit"]


@pytest.mark.parametrize(
    ("code", "kind"), [(6, SchedulerUnreachable), (9, SchedulerUnreachable), (1, FellowsError)], ids=["6", "9", "1"]
)
def test_a_driver_s_answer_is_raised_with_its_exit_code(code: int, kind: type[FellowsError]) -> None:
    """A cancel the driver answered with an error is raised in the asking process with the driver's line, its exit
    code, and the class of that code (a SchedulerUnreachable for 6), never as a plain exit 1."""
    error = answered_error({"error": "squeue could not reach inst", "exit_code": code})
    assert isinstance(error, kind)
    assert (str(error), error.exit_code) == ("squeue could not reach inst", code)


def test_an_answer_without_an_exit_code_is_exit_1() -> None:
    """An answer journaled by an older driver (no exit code) is a FellowsError, exit 1."""
    error = answered_error({"error": "no"})
    assert (type(error), error.exit_code) == (FellowsError, 1)
