# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The inbox on the fake port: a dispatch another process enqueues is adopted by the driver; every dispatch is born
by enqueue; a cancel is delivered as a request the driver answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler
from fellows_fsm.driver.inbox import (
    CANCEL_ANSWER,
    CANCEL_REQUEST,
    ScancelLater,
    answer_cancels,
    answered_error,
    enqueue,
    scancel_waits,
)
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
    assert dispatch_id in r.driven
    # The lane-pinned one was adopted too: its handoff is journaled and its command started (on a loaded machine the
    # command may have ended within the same poll, its dispatch final: CI saw that).
    assert r.journal.handoff(lane_id) is not None
    assert lane_id in r.driven or r.handle(lane_id).final
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


def test_a_withdrawal_whose_scancel_must_wait_is_answered_once_and_kept_until_done(tmp_path: Path) -> None:
    """A withdraw that raises ScancelLater is answered at once (its known jobs, and why they wait), its request
    kept and marked; the next ticks' ScancelLater writes no answer again; once it succeeds the request is dropped,
    answered already."""
    journal = Journal(tmp_path / "journal.sqlite3")
    try:
        journal.put_meta(CANCEL_REQUEST + "d1", {"at": 1.0})
        outcomes: list[object] = [ScancelLater(["7"], "scancel not on PATH=/x"), ScancelLater(["7"], "again"), ["7"]]

        def withdraw(dispatch_id: str) -> list[str]:
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome  # type: ignore[return-value]

        assert answer_cancels(journal, withdraw) == []
        assert journal.get_meta(CANCEL_ANSWER + "d1") == {"jobs": ["7"], "later": "scancel not on PATH=/x"}
        assert scancel_waits(journal, "d1") == "scancel not on PATH=/x"
        journal.drop_meta(CANCEL_ANSWER + "d1")  # the asker read it
        assert answer_cancels(journal, withdraw) == []
        assert journal.get_meta(CANCEL_ANSWER + "d1") is None
        assert scancel_waits(journal, "d1") == "scancel not on PATH=/x"
        assert answer_cancels(journal, withdraw) == ["d1"]
        assert journal.get_meta(CANCEL_REQUEST + "d1") is None
        assert journal.get_meta(CANCEL_ANSWER + "d1") is None  # nobody waits for it any more
        assert scancel_waits(journal, "d1") is None
    finally:
        journal.close()
