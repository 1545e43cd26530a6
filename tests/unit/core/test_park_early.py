"""The park_early policies (off, own-cap, estimate) at their edges, on the fake port with frozen time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import (
    PARKED,
    RUNNING,
    ConfigError,
    Dispatch,
    FakeScheduler,
    JobSpec,
    Observation,
    Phase,
    SlurmSettings,
)
from fellows_fsm.config.file import Config
from fellows_fsm.core.policy import park_early_reason
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from tests.unit.conftest import CAP, DispatchFactory, poll

HIGH, NORMAL = "SUBMITTED_high_eur", "RESUBMITTED_normal_eur"
OWN_CAP = "QOSMaxGRESPerUser"


def hms(at: float) -> str:
    """``at`` as the local wall-clock time the notes use."""
    return time.strftime("%H:%M:%S", time.localtime(at))


def submitted(make_dispatch: DispatchFactory, policy: str, **kwargs: object) -> Dispatch:
    """A dispatch with ``policy``, submitted on high-eur."""
    d = make_dispatch(park_early=policy, **kwargs)
    d.submit()
    return d


def parks(d: Dispatch) -> list[str]:
    """The notes of the dispatch's park steps."""
    return [s.note for s in d.history if s.trigger == "park"]


@pytest.mark.parametrize("offset", [0.0, 1.0], ids=["at-the-window-end", "one-second-past"])
def test_estimate_at_the_window_end_stays_and_one_second_past_leaves(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory, offset: float
) -> None:
    """An estimate exactly at the window's end keeps the job (it starts in time); one second later parks it at once."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources", expected_start=d.deadline + offset)
    frozen.tick(10)
    poll(d, fake)
    if offset == 0.0:
        assert d.state == HIGH
        assert parks(d) == []
    else:
        assert d.state == NORMAL
        assert parks(d) == [f"park_early=estimate: start estimated {hms(d.history[1].at + CAP - 10 + 1)}, "
                            f"window ends {hms(d.history[1].at + CAP - 10)}"]  # fmt: skip


def test_estimate_park_note_names_the_estimate_and_the_window(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """The early park's history note gives SLURM's estimate and the window's end as wall-clock times."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    window_end = d.deadline
    fake.set_pending(d.job_id, OWN_CAP, expected_start=window_end + 1800)
    frozen.tick(10)
    poll(d, fake)
    park = next(s for s in d.history if s.trigger == "park")
    assert park.note == f"park_early=estimate: start estimated {hms(window_end + 1800)}, window ends {hms(window_end)}"
    assert park.reason == OWN_CAP
    assert park.at < window_end


def test_estimate_without_an_estimate_waits_for_the_cap_on_contention(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With no estimate (N/A) and a contention reason, estimate waits out the window like off."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources", expected_start=None)
    frozen.tick(CAP - 1)
    poll(d, fake)
    assert d.state == HIGH
    frozen.tick(1)
    poll(d, fake)
    assert parks(d) == [""]  # the cap's park: no early reason


def test_estimate_without_an_estimate_leaves_the_users_own_cap(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """N/A on the user's own cap (SLURM 22.05 never estimates such a job) leaves at once, saying so."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, OWN_CAP, expected_start=None)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == NORMAL
    assert parks(d) == [
        "park_early=estimate: QOSMaxGRESPerUser and SLURM gives no start estimate; leaving for the next rung"
    ]


def test_estimate_inside_the_window_keeps_a_job_held_back_by_its_own_cap(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Own cap full but SLURM expects the user's jobs to end within the window: estimate keeps it on high-eur."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, OWN_CAP, expected_start=fake.clock.now() + CAP / 2)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == HIGH


def test_estimate_that_moves_earlier_between_polls_keeps_the_job(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A late estimate seen while held walks nothing; released with an estimate now inside the window, it stays and
    runs on high-eur: each poll decides on that poll's estimate only."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, "JobHeldUser", expected_start=d.deadline + 3600)
    frozen.tick(10)
    poll(d, fake)
    assert d.held
    fake.set_pending(d.job_id, "Resources", expected_start=fake.clock.now() + 60)
    frozen.tick(10)
    poll(d, fake)
    assert (d.state, d.held) == (HIGH, False)
    fake.start(d.job_id)
    frozen.tick(10)
    poll(d, fake)
    assert (d.state, d.rung.qos) == (RUNNING, "high-eur")
    assert parks(d) == []


def test_estimate_that_moves_past_the_window_parks_at_that_poll(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """An estimate inside the window keeps the job; the poll whose estimate moved past the window parks it."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources", expected_start=d.deadline - 60)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == HIGH
    fake.set_pending(d.job_id, "Resources", expected_start=d.deadline + 60)
    frozen.tick(10)
    poll(d, fake)
    park = next(s for s in d.history if s.trigger == "park")
    assert park.at == d.history[0].at + 20


def test_off_waits_out_the_window_whatever_the_estimate(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With park_early off, an own-cap reason and a far estimate still wait the whole cap."""
    d = submitted(make_dispatch, "off")
    assert d.job_id is not None
    fake.set_pending(d.job_id, OWN_CAP, expected_start=d.deadline + 86_400)
    frozen.tick(CAP - 1)
    poll(d, fake)
    assert d.state == HIGH
    frozen.tick(1)
    poll(d, fake)
    assert d.state == NORMAL
    assert parks(d) == [""]


@pytest.mark.parametrize(
    ("reason", "estimate_offset", "leaves"),
    [(OWN_CAP, None, True), (OWN_CAP, -60.0, True), ("Resources", 3600.0, False), (None, None, False)],
    ids=["own-cap-no-estimate", "own-cap-estimate-inside", "contention-late-estimate", "not-evaluated"],
)
def test_own_cap_leaves_on_the_reason_alone(
    make_dispatch: DispatchFactory,
    fake: FakeScheduler,
    frozen: FrozenDateTimeFactory,
    reason: str | None,
    estimate_offset: float | None,
    leaves: bool,
) -> None:
    """own-cap leaves at once on QOSMax*PerUser, whatever the estimate, and on nothing else."""
    d = submitted(make_dispatch, "own-cap")
    assert d.job_id is not None
    expected = None if estimate_offset is None else d.deadline + estimate_offset
    fake.set_pending(d.job_id, reason, expected_start=expected)
    frozen.tick(10)
    poll(d, fake)
    assert (d.state == NORMAL) is leaves


def test_a_held_job_is_never_parked_early(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A held job with a late estimate stays on its rung under estimate, however far the estimate."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, "JobHeldAdmin", expected_start=d.deadline + 86_400)
    for _ in range(3):
        frozen.tick(10)
        poll(d, fake)
    assert d.state == HIGH


def test_last_rung_waits_its_cap_when_park_early_last_rung_is_off(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory, config: SlurmSettings
) -> None:
    """With park_early_last_rung false, a late estimate on the last rung waits its cap before the paid lane."""
    d = make_dispatch(park_early="estimate", park_early_last_rung=False, ladder=SlurmSettings(qos_ladder=()).ladder)
    d.submit()
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources", expected_start=d.deadline + 3600)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == HIGH
    frozen.tick(d.deadline - fake.clock.now())
    poll(d, fake)
    assert PARKED in [s.dest for s in d.history]
    assert parks(d) == [""]


def test_the_cap_still_bounds_a_rung_whose_estimate_is_inside_the_window(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """An estimate that keeps the job never keeps it past the cap: the window's end parks it as with off."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    window_end = d.deadline
    fake.set_pending(d.job_id, "Resources", expected_start=window_end)
    frozen.tick(CAP)
    poll(d, fake)
    park = next(s for s in d.history if s.trigger == "park")
    assert park.at == window_end


@pytest.mark.parametrize("phase", [Phase.STARTED, Phase.GONE, Phase.UNKNOWN])
def test_policy_never_parks_a_job_that_is_not_pending(phase: Phase) -> None:
    """Only a pending job's estimate or reason is read; any other phase is no reason to leave."""
    obs = Observation("1", phase, reason=OWN_CAP, expected_start=10_000.0)
    assert park_early_reason("estimate", obs, 0.0) is None
    assert park_early_reason("own-cap", obs, 0.0) is None


def test_policy_names_the_paid_lane_on_the_last_rung() -> None:
    """Leaving the last rung on the user's own cap says it is for the paid lane."""
    obs = Observation("1", Phase.PENDING, reason=OWN_CAP)
    reason = park_early_reason("own-cap", obs, 0.0, last_rung=True)
    assert reason is not None
    assert "paid lane" in reason


def test_unknown_park_early_is_refused_naming_the_value() -> None:
    """A park_early value that is not a policy is one ConfigError naming the value and the choices."""
    with pytest.raises(ConfigError, match=r"park_early='soon' is not known; use one of 'off', 'own-cap', 'estimate'"):
        SlurmSettings(park_early="soon")


def test_a_live_dispatch_keeps_the_policy_it_was_created_with(tmp_path: Path, fake: FakeScheduler) -> None:
    """A router restarted with another park_early drives a dispatch with the policy journaled at its creation."""
    lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
    first = Config(fellows=SlurmSettings(park_early="own-cap"), lanes=(lane,), state_dir=tmp_path)
    router = Router(first, fake, Journal(first.journal_path)).start()
    handle = router.dispatch(JobSpec("train", "train.sbatch", gpus=8))
    router.journal.close()
    second = Config(fellows=SlurmSettings(park_early="off"), lanes=(lane,), state_dir=tmp_path)
    again = Router(second, fake, Journal(second.journal_path)).start()
    try:
        assert again.live[handle.dispatch_id].park_early == "own-cap"
    finally:
        again.journal.close()


def test_an_early_park_carries_the_rest_of_the_window_to_the_next_rung(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Left early, the next rung's window closes where it would have had the job waited: submit + 2 caps."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    submitted_at = d.history[0].at
    fake.set_pending(d.job_id, OWN_CAP, expected_start=d.deadline + 600)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == NORMAL
    assert d.deadline == submitted_at + 2 * CAP


def test_a_restored_dispatch_keeps_the_carried_window(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Rebuilt from its journaled steps, a dispatch that left a rung early has the same carried deadline."""
    d = submitted(make_dispatch, "estimate")
    assert d.job_id is not None
    fake.set_pending(d.job_id, OWN_CAP, expected_start=d.deadline + 60)
    frozen.tick(10)
    poll(d, fake)
    assert d.job_id is not None
    again = Dispatch.restore(
        d.id, d.spec, d.ladder, history=d.history, jobs={d.rung_index: d.job_id}, park_early="estimate"
    )
    assert again.deadline == d.deadline


def test_last_rung_leaves_early_for_the_paid_lane_when_park_early_last_rung_is_on(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With park_early_last_rung true, a late estimate on the last rung parks it at once, naming the estimate."""
    d = make_dispatch(park_early="estimate", park_early_last_rung=True, ladder=SlurmSettings(qos_ladder=()).ladder)
    d.submit()
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources", expected_start=d.deadline + 3600)
    frozen.tick(10)
    poll(d, fake)
    assert PARKED in [s.dest for s in d.history]
    assert parks(d)[0].startswith("park_early=estimate: start estimated")
    assert "paid lane" not in parks(d)[0]  # the estimate's note names the times, not the lane


def test_the_default_config_leaves_own_capped_free_rungs_only() -> None:
    """Out of the box park_early is 'own-cap' and the last rung (leaving it pays) waits out its window."""
    config = SlurmSettings()
    assert (config.park_early, config.park_early_last_rung) == ("own-cap", False)
