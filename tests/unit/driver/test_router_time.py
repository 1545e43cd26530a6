# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""Time on the fake port (issue 29): a port call the controller leaves unanswered or answers late spends no window,
every entry point catches up time nobody watched, and the system clock never steps back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, SlurmSettings, SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal

from .fixtures import CAP, SPEC, MakeRouter, drive, fake, fill, frozen, ledger, make_router  # noqa: F401


def test_a_first_submit_nobody_answers_spends_no_window(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """The controller answers neither the first sbatch nor the token lookups for ten caps: the dispatch then
    still gets the free normal-eur (high-eur is self-capped), never the paid lane."""
    fill(fake, "high-eur")
    r = make_router()
    fake.unreachable = True
    h = r.dispatch(SPEC)
    assert [s.trigger for s in r.journal.steps(h.dispatch_id)] == ["submit", "pause"]
    for _ in range(10):
        frozen.tick(CAP)
        r.poll()  # no job id yet: no squeue, but the token lookup of the lost submit is not answered either
    fake.unreachable = False
    drive(r, fake, frozen)
    assert (r.handle(h.dispatch_id).state, r.handle(h.dispatch_id).qos) == ("RUNNING", "normal-eur")
    assert ledger(tmp_path, "gcp") == []
    notes = [s.note for s in r.journal.steps(h.dispatch_id)]
    assert not [n for n in notes if "window closed before it opened" in n]


def test_a_poll_alone_catches_up_the_time_nobody_watched(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A router that only polls (`watch --once` from cron), after a gap of ten caps with no driver, pauses the
    windows from when the last driver's next tick was due, as the driver's own loop does: the job still walks to the
    free normal-eur."""
    fill(fake, "high-eur")
    first = make_router()
    h = first.dispatch(SPEC)
    first.poll()
    first.journal.release_driver()
    frozen.tick(10 * CAP)
    cron = make_router()
    cron.poll()
    steps = cron.journal.steps(h.dispatch_id)
    assert [s.trigger for s in steps][-2:] == ["pause", "resume"]
    assert "no driver watched" in steps[-2].note
    assert cron.handle(h.dispatch_id).state == "SUBMITTED(high-eur)"
    drive(cron, fake, frozen)
    assert (cron.handle(h.dispatch_id).state, cron.handle(h.dispatch_id).qos) == ("RUNNING", "normal-eur")
    assert ledger(tmp_path, "gcp") == []


def test_the_system_clock_runs_on_through_a_step_back_and_follows_a_step_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wall clock stepped back an hour is not followed (the time told runs on at the monotonic pace); one stepped
    forward is (the router counts that as time nobody watched)."""
    real = time.time
    clock = SystemClock()
    before = clock.now()
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    stepped_back = clock.now()
    assert before <= stepped_back < before + 60
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert clock.now() > before + 3500
    assert SystemClock().now() > real() + 3500  # a new clock reads the wall clock as it is


def test_a_router_on_the_system_clock_keeps_its_cadence_through_a_step_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll loop's next tick is due one interval later by the monotonic clock, whatever the wall clock did in
    between: a step back of an hour does not make it sleep an hour."""
    config = Config(fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=2.0), state_dir=tmp_path)
    journal = Journal(config.journal_path)
    r = Router(config, FakeScheduler(), journal).start()
    real = time.time
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        monkeypatch.setattr(time, "time", lambda: real() - 3600)  # NTP steps the clock back while the loop waits

    try:
        r.run(until=lambda _: len(waits) >= 2, sleep=sleep, linger=True)
    finally:
        journal.close()
    assert waits
    assert max(waits) <= 2.0
