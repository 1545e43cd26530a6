"""park_early = "calibrated" at its edges: the last rung left on the cluster's own history, on the fake port."""

from __future__ import annotations

from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import PARKED, FakeScheduler, JobSpec, Observation, Phase, SlurmSettings
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.policy import CALIBRATED_LEAVE_BELOW, CALIBRATED_MIN_FINISHED, park_early_reason, start_chance
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.scheduler.port import FinishedJob, PendingJob, RunningJob, Workload
from fellows_fsm.testing import Driven
from tests.unit.conftest import CAP, DispatchFactory, poll

LAST = "SUBMITTED_low_eur"
HOUR = 3600.0


def history(now: float, ratio: float, *, jobs: int = 180, running: int = 8, **kwargs: object) -> Workload:
    """A 64-GPU cluster full of ``running`` 8-GPU jobs with 1 h limits started a minute ago, and ``jobs`` finished
    jobs that each ran ``ratio`` of a 1 h limit."""
    finished = [FinishedJob(ratio * HOUR, HOUR)] * jobs
    in_way = [RunningJob(str(i), 8, now - 60, HOUR) for i in range(running)]
    values: dict[str, object] = {"total_gpus": 64, "used_gpus": 8 * running, **kwargs}
    return Workload(now, finished, in_way, **values)  # type: ignore[arg-type]


def on_last_rung(make_dispatch: DispatchFactory, fake: FakeScheduler, *, last_rung_too: bool = False) -> Driven:
    """A calibrated dispatch of 8 GPUs on a one-rung ladder (low-eur, its last rung), pending on Resources."""
    d = make_dispatch(
        park_early="calibrated",
        park_early_last_rung=last_rung_too,
        ladder=SlurmSettings(qos="low-eur", qos_ladder=()).ladder,
    )
    d.submit()
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources")
    return d


def tick(d: Driven, fake: FakeScheduler, past: Workload | None) -> None:
    """One tick with the fake's observation of the job and ``past`` as the tick's history."""
    assert d.job_id is not None
    d.advance(fake.observe([d.job_id])[d.job_id], workload=past)


def test_a_history_of_whole_limits_leaves_the_last_rung_naming_the_figures(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Jobs in the way that history says run their whole limits: the last rung is left at once, with the figures."""
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    tick(d, fake, history(fake.clock.now(), 1.0))
    assert PARKED in [s.dest for s in d.history]
    note = next(s.note for s in d.history if s.trigger == "park")
    assert note == (
        "park_early=calibrated: 0 % chance of a start within 9m 50s: 8 jobs in the way; history: 180 jobs, "
        "median elapsed/limit 1.00; leaving for the paid lane"
    )


def test_a_history_of_short_runs_waits_on_the_last_rung(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Jobs that end at a twentieth of their limits (3 min of 1 h): the job is likely to start, so it waits."""
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    tick(d, fake, history(fake.clock.now(), 0.05))
    assert d.state == LAST


def test_no_history_waits_out_the_last_rung_as_own_cap(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Without any history the last rung is waited out to its cap, exactly as own-cap does."""
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    tick(d, fake, None)
    assert d.state == LAST
    frozen.tick(CAP - 10)
    tick(d, fake, None)
    assert [s.note for s in d.history if s.trigger == "park"] == [""]


def test_too_little_history_behaves_exactly_as_own_cap(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """One finished job short of the minimum: every poll's decision is own-cap's, on the last rung and off it."""
    now = fake.clock.now()
    thin = history(now, 1.0, jobs=CALIBRATED_MIN_FINISHED - 1)
    obs = Observation("1", Phase.PENDING, reason="Resources")
    for last, too in ((True, False), (True, True), (False, False)):
        mine = park_early_reason("calibrated", obs, now + CAP, last_rung=last, last_rung_too=too, workload=thin, gpus=8)
        assert mine == park_early_reason("own-cap", obs, now + CAP, last_rung=last)
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    tick(d, fake, history(fake.clock.now(), 1.0, jobs=CALIBRATED_MIN_FINISHED - 1))
    assert d.state == LAST


def test_the_minimum_history_is_enough_to_leave(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Exactly CALIBRATED_MIN_FINISHED finished jobs is enough history to calibrate on."""
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    tick(d, fake, history(fake.clock.now(), 1.0, jobs=CALIBRATED_MIN_FINISHED))
    assert PARKED in [s.dest for s in d.history]


@pytest.mark.parametrize(
    ("ended", "leaves"),
    [(9, False), (8, True)],
    ids=["chance-exactly-at-the-threshold-waits", "just-below-leaves"],
)
def test_a_chance_exactly_at_the_threshold_waits_and_below_it_leaves(ended: int, leaves: bool) -> None:
    """One 8-GPU job in the way; k of 180 history jobs ended within the window: 9/180 is the threshold itself."""
    assert CALIBRATED_LEAVE_BELOW == 9 / 180
    now = 1_000_000.0
    finished = [FinishedJob(0.1 * HOUR, HOUR)] * ended + [FinishedJob(HOUR, HOUR)] * (180 - ended)
    past = Workload(now, finished, [RunningJob("1", 8, now, HOUR)], total_gpus=8, used_gpus=8)
    chance = start_chance(past, gpus=8, now=now, window_end=now + 0.2 * HOUR)
    assert chance is not None
    assert chance.probability == pytest.approx(ended / 180)
    obs = Observation("2", Phase.PENDING, reason="Resources")
    reason = park_early_reason("calibrated-last", obs, now + 0.2 * HOUR, last_rung=True, workload=past, gpus=8, now=now)
    assert (reason is not None) is leaves


def test_history_that_changes_between_polls_is_decided_at_the_poll_it_changes(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A hopeful history keeps the job; the next read (whole limits) leaves at that poll, with the same squeue."""
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    tick(d, fake, history(fake.clock.now(), 0.05))
    assert d.state == LAST
    frozen.tick(10)
    tick(d, fake, None)  # no new read: the last one still holds
    assert d.state == LAST
    frozen.tick(10)
    tick(d, fake, history(fake.clock.now(), 1.0))
    assert PARKED in [s.dest for s in d.history]


def test_a_later_read_that_still_sees_the_jobs_running_past_the_short_runs_leaves(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Half the history ran 5 min, half 30: jobs a minute in may be short ones (it waits, also once they are 7 min
    in, since the read may be stale); a read that still sees them running 7 min in knows they are long: it leaves."""
    d = on_last_rung(make_dispatch, fake)
    now = fake.clock.now()
    finished = [FinishedJob(300.0 if i % 2 else 1800.0, HOUR) for i in range(100)]
    in_way = [RunningJob(str(i), 8, now - 60, HOUR) for i in range(8)]
    frozen.tick(10)
    tick(d, fake, Workload(now, finished, in_way, total_gpus=64, used_gpus=64))
    assert d.state == LAST  # each may be a short one: 1 - 0.5^8 of a start
    frozen.tick(400)
    tick(d, fake, None)  # the same read: the jobs may have ended since it, so it still waits
    assert d.state == LAST
    frozen.tick(10)
    tick(d, fake, Workload(fake.clock.now(), finished, in_way, total_gpus=64, used_gpus=64))
    note = next(s.note for s in d.history if s.trigger == "park")
    assert "0 % chance of a start within 3m 0s" in note


def test_private_data_hiding_other_users_jobs_waits_as_own_cap(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """PrivateData: only the user's own jobs visible, the nodes' GPUs in use say others hold more: it waits."""
    d = on_last_rung(make_dispatch, fake)
    frozen.tick(10)
    now = fake.clock.now()
    hidden = history(now, 1.0, running=0, used_gpus=64, all_users=False)
    assert hidden.hidden_gpus == 64
    tick(d, fake, hidden)
    assert d.state == LAST
    assert start_chance(hidden, gpus=8, now=now, window_end=now + CAP) is None


def test_own_jobs_only_history_says_so_in_the_note() -> None:
    """A history of the user's own jobs only (nothing hidden in the way) calibrates and names its scope."""
    now = 1_000_000.0
    past = history(now, 1.0, all_users=False)
    reason = park_early_reason(
        "calibrated",
        Observation("1", Phase.PENDING, reason="Resources"),
        now + CAP,
        last_rung=True,
        workload=past,
        gpus=8,
        now=now,
    )
    assert reason is not None
    assert "history: 180 jobs (yours only: no other user's job was visible)" in reason


def test_free_rungs_are_left_as_own_cap_does(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """On high-eur, calibrated leaves on the user's own cap at the first poll, as own-cap."""
    d = make_dispatch(park_early="calibrated")
    d.submit()
    assert d.job_id is not None
    fake.set_pending(d.job_id, "QOSMaxGRESPerUser")
    frozen.tick(10)
    poll(d, fake)
    assert d.state == "RESUBMITTED_normal_eur"


def test_the_router_reads_the_history_once_per_refresh_never_per_poll(
    tmp_path: Path, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """31 polls 10 s apart on a last rung: the port's history is read twice (at 10 s and 310 s), squeue 31 times."""
    config = Config(
        fellows=SlurmSettings(qos="low-eur", qos_ladder=(), park_early="calibrated", park_cap_seconds=3 * HOUR),
        lanes=(CommandSettings(name="gcp", command=("true", "{dispatch_id}")),),
        router=RouterConfig(),
        state_dir=tmp_path,
    )
    fake.past = history(fake.clock.now(), 0.05)
    router = Router(config, fake, Journal(config.journal_path)).start()
    try:
        handle = router.dispatch(JobSpec("train", "train.sbatch", gpus=8))
        job = router.live[handle.dispatch_id].job_id
        assert job is not None
        fake.set_pending(job, "Resources")
        for _ in range(31):
            frozen.tick(10)
            router.poll()
        assert fake.calls["history"] == 2
        assert fake.calls["observe"] == 31
    finally:
        router.journal.close()


def test_no_history_is_read_without_a_calibrated_dispatch_on_a_last_rung(
    tmp_path: Path, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """The default (own-cap) never reads the history: no extra call at all."""
    config = Config(lanes=(CommandSettings(name="gcp", command=("true", "{dispatch_id}")),), state_dir=tmp_path)
    router = Router(config, fake, Journal(config.journal_path)).start()
    try:
        router.dispatch(JobSpec("train", "train.sbatch", gpus=8))
        for _ in range(5):
            frozen.tick(10)
            router.poll()
        assert fake.calls["history"] == 0
    finally:
        router.journal.close()


def test_other_users_jobs_pending_ahead_take_the_gpus_first() -> None:
    """One 8-GPU job in the way that surely ends in time: alone it starts (100 %); behind another user's 8-GPU job
    of a higher priority it cannot (0 %); the user's own pending job, or a lower priority one, is not ahead."""
    now = 1_000_000.0
    finished = [FinishedJob(0.1 * HOUR, HOUR)] * 50
    running = [RunningJob("1", 8, now, HOUR)]

    def chance(*pending: PendingJob) -> float:
        past = Workload(now, finished, running, pending, total_gpus=8, used_gpus=8)
        got = start_chance(past, gpus=8, now=now, window_end=now + 0.2 * HOUR, job_id="9", qos="low-eur")
        assert got is not None
        return got.probability

    mine = PendingJob("9", 8, 10.0, "low-eur", "Priority", own=True)
    assert chance(mine) == 1.0
    assert chance(mine, PendingJob("5", 8, 50.0, "normal-eur", "Resources")) == 0.0
    assert chance(mine, PendingJob("5", 8, 50.0, "normal-eur", "Resources", own=True)) == 1.0
    assert chance(mine, PendingJob("12", 8, 5.0, "other", "Resources")) == 1.0
    assert chance(mine, PendingJob("5", 8, 50.0, "normal-eur", "QOSMaxGRESPerUser")) == 1.0
