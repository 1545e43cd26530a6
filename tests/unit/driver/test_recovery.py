# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""Recovery on the fake port: a new router resumes each live dispatch where the journal stood, with the lane it was
created with, and hands off once one that had parked out."""

from __future__ import annotations

from pathlib import Path

from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler
from fellows_fsm.driver.roster import Kept

from .fixtures import CAP, SPEC, MakeRouter, drive, fake, fill, frozen, ledger, make_router  # noqa: F401


def test_recovery_continues_where_the_journal_stood(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A new router on the same journal resumes a mid-ladder dispatch with its remaining budget."""
    fill(fake, "high-eur")
    fill(fake, "normal-eur")
    r1 = make_router()
    h = r1.dispatch(SPEC)
    frozen.tick(CAP)
    r1.poll()
    frozen.tick(CAP / 2)
    r1.poll()
    assert r1.handle(h.dispatch_id).state == "RESUBMITTED(normal-eur)"
    r1.journal.close()  # the router "dies"
    r2 = make_router()
    d = r2.live[h.dispatch_id]
    assert d.state == "RESUBMITTED_normal_eur"
    assert d.deadline == d.history[0].at + 2 * CAP
    frozen.tick(CAP / 2 - 1)
    r2.poll()
    assert r2.handle(h.dispatch_id).state == "RESUBMITTED(normal-eur)"
    frozen.tick(1)
    fake.schedule()
    r2.poll()
    fake.schedule()
    frozen.tick(1)
    r2.poll()  # the cancel read back: resubmitted on low-eur
    fake.schedule()
    frozen.tick(1)
    r2.poll()
    assert r2.handle(h.dispatch_id).state == "RUNNING"
    assert r2.handle(h.dispatch_id).qos == "low-eur"
    assert len([j for j in fake.jobs.values() if j.token]) == 3


def test_watch_elsewhere_hands_off_with_the_lane_the_dispatch_was_created_with(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A router whose config has no gcp lane still hands a dispatch created with one to that gcp lane, once."""
    fake.total_gpus = 0
    first = make_router()
    h = first.dispatch(SPEC)
    first.journal.close()
    second = make_router(lanes=())  # no lanes at all
    drive(second, fake, frozen)
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]


def test_a_dispatch_restored_after_parking_out_is_handed_off_once_by_the_next_poll(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A router that died between give_up and the handoff: the next router hands the dispatch off, exactly once."""
    fake.total_gpus = 0
    r = make_router()
    h = r.dispatch(SPEC)
    r._hand_off_after_ladder = lambda d: None  # type: ignore[method-assign]  # dies before the handoff starts
    for _ in range(200):
        frozen.tick(5)
        r.poll()
        if r.live[h.dispatch_id].state == "FAILED_TO_GCP":
            break
    assert r.handle(h.dispatch_id).state == "FAILED_TO_GCP"
    assert ledger(tmp_path, "gcp") == []
    r.journal.close()
    again = make_router()
    drive(again, fake, frozen)
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]
    assert again.handle(h.dispatch_id).final


def test_dispatches_of_one_config_share_their_settings_job_and_ladder(make_router: MakeRouter) -> None:
    """Dispatches adopted from their rows with the same settings, job and ladder hold one object of each."""
    router = make_router()
    a, b = (router.dispatch(SPEC).dispatch_id for _ in range(2))
    assert router.settings[a] == router.settings[b]
    assert router.settings[a] is router.settings[b]
    assert router.live[a].spec == router.live[b].spec
    assert router.live[a].spec is router.live[b].spec
    assert router.live[a].ladder is router.live[b].ladder


def test_a_kept_value_table_starts_over_at_its_limit() -> None:
    """Kept returns the value it kept for an equal key, and past its limit of distinct keys keeps only new ones."""
    kept: Kept[str, list[int]] = Kept(limit=2)
    first = kept.setdefault("a", [1])
    assert kept.setdefault("a", [2]) is first
    kept.setdefault("b", [3])
    assert kept.setdefault("b", [4]) == [3]
    assert kept.setdefault("c", [5]) == [5]
    assert set(kept) == {"c"}
    assert kept.setdefault("a", [6]) == [6]
