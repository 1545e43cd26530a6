"""park_early = "calibrated" on every rung (issue 28): any rung left on the cluster's own history, on the fake port;
and the simulator's targets on small traces of its own."""

from __future__ import annotations

from pathlib import Path

from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import PARKED, FakeScheduler, JobSpec
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.policy import CALIBRATED_MIN_FINISHED, PARK_EARLY_POLICIES, start_chance
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import FinishedJob, PendingJob, RunningJob, Workload
from fellows_fsm.sim.results import by_index
from fellows_fsm.sim.run import simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import TraceJob
from fellows_fsm.testing import Driven
from tests.unit.conftest import CAP, DispatchFactory, poll

HOUR = 3600.0
FIRST, SECOND, LAST = "SUBMITTED_high_eur", "RESUBMITTED_normal_eur", "RESUBMITTED_low_eur"


def full_node(now: float, ratio: float, *, jobs: int = 48, limit: float = HOUR, started: float = 60.0) -> Workload:
    """A 64-GPU node full of eight 8-GPU jobs with ``limit`` limits started ``started`` s ago, and ``jobs`` finished
    jobs that each ran ``ratio`` of a 1 h limit."""
    finished = [FinishedJob(ratio * HOUR, HOUR)] * jobs
    running = [RunningJob(str(100 + i), 8, now - started, limit) for i in range(8)]
    return Workload(now, finished, running, total_gpus=64, used_gpus=64)


def pending_on_first_rung(make_dispatch: DispatchFactory, fake: FakeScheduler, policy: str = "calibrated") -> Driven:
    """A dispatch of 8 GPUs on the three-rung ladder (600 s caps), pending on Resources on high-eur."""
    d = make_dispatch(park_early=policy)
    d.submit()
    assert d.job_id is not None
    fake.set_pending(d.job_id, "Resources")
    return d


def tick(d: Driven, fake: FakeScheduler, past: Workload | None) -> None:
    """One tick: the job (pending on Resources on whatever rung it is) observed, ``past`` as the tick's history."""
    assert d.job_id is not None
    if d.on_rung:
        fake.set_pending(d.job_id, "Resources")
    d.advance(fake.observe([d.job_id])[d.job_id], workload=past)


def test_a_node_held_by_jobs_that_run_their_limits_leaves_every_rung_at_its_first_poll(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Jobs in the way that history says run their whole limits (hours away): high-eur and normal-eur are left at
    their first poll, then low-eur for the paid lane, each with the chance and the figures in its note."""
    d = pending_on_first_rung(make_dispatch, fake)
    past = full_node(fake.clock.now(), 1.0)
    for state in (FIRST, SECOND, LAST):
        assert d.state == state
        frozen.tick(10)
        tick(d, fake, past)
    assert d.state == "FAILED_TO_GCP"
    notes = [s.note for s in d.history if s.trigger == "park"]
    assert notes[0] == (
        "park_early=calibrated: 0 % chance of a start within 29m 50s (to the ladder's end, on this rung): 8 jobs "
        "in the way; history: 48 jobs, "
        "median elapsed/limit 1.00; leaving for the next rung"
    )
    assert notes[2].endswith("leaving for the paid lane")


def test_blockers_that_end_within_the_window_keep_the_job_on_its_rung(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """The jobs in the way reach their limits within high-eur's window, and other users wait below (a lower
    priority): the job stays on high-eur, and starts there."""
    d = pending_on_first_rung(make_dispatch, fake)
    now = fake.clock.now()
    past = full_node(now, 1.0, limit=HOUR, started=HOUR - 300)
    below = [PendingJob(str(200 + i), 8, 10_000.0, "low-eur", "Priority") for i in range(8)]
    past = Workload(now, past.finished, past.running, below, total_gpus=64, used_gpus=64)
    for _ in range(20):
        frozen.tick(10)
        tick(d, fake, past)
        assert d.state == FIRST
    assert d.job_id is not None
    fake.start(d.job_id)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == "RUNNING"
    assert d.rung.qos == "high-eur"


def test_blockers_that_end_after_the_rungs_window_but_before_the_ladders_end_keep_the_job_on_high_eur(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """The jobs in the way reach their limits 15 min after the submit: past high-eur's 10 min window, well before
    the ladder's end (30 min), so the job keeps high-eur's priority instead of walking down (a lower rung could
    start it no sooner)."""
    d = pending_on_first_rung(make_dispatch, fake)
    past = full_node(fake.clock.now(), 1.0, limit=HOUR, started=HOUR - 900)
    frozen.tick(10)
    tick(d, fake, past)
    assert d.state == FIRST
    assert not [s for s in d.history if s.trigger == "park"]


def test_a_rung_the_history_cannot_say_is_waited_out(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """One finished job short of the minimum history: high-eur is waited out to its cap, as own-cap does."""
    d = pending_on_first_rung(make_dispatch, fake)
    thin = full_node(fake.clock.now(), 1.0, jobs=CALIBRATED_MIN_FINISHED - 1)
    frozen.tick(10)
    tick(d, fake, thin)
    assert d.state == FIRST
    frozen.tick(CAP - 20)
    tick(d, fake, thin)
    assert d.state == FIRST
    frozen.tick(10)
    tick(d, fake, thin)
    assert [s.note for s in d.history if s.trigger == "park"] == [""]


def test_hidden_jobs_in_the_way_wait_out_an_earlier_rung(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """PrivateData hides the jobs holding the node (the nodes say 64 GPUs in use, none visible): high-eur waits."""
    d = pending_on_first_rung(make_dispatch, fake)
    now = fake.clock.now()
    hidden = Workload(now, [FinishedJob(HOUR, HOUR)] * 48, [], total_gpus=64, used_gpus=64, all_users=False)
    frozen.tick(10)
    tick(d, fake, hidden)
    assert d.state == FIRST


def test_the_users_own_cap_still_leaves_an_earlier_rung_at_once(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Under calibrated, with a history that says a start is likely, the user's own high-eur cap still leaves it."""
    d = pending_on_first_rung(make_dispatch, fake)
    assert d.job_id is not None
    fake.set_pending(d.job_id, "QOSMaxGRESPerUser")
    frozen.tick(10)
    hopeful = full_node(fake.clock.now(), 1.0, started=HOUR - 300)  # the jobs in the way end within the window
    d.advance(fake.observe([d.job_id])[d.job_id], workload=hopeful)
    assert d.state == SECOND


def test_calibrated_last_keeps_issue_21s_policy_on_the_earlier_rungs(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """park_early = "calibrated-last": the same hopeless history leaves only the last rung; high-eur waits."""
    assert "calibrated-last" in PARK_EARLY_POLICIES
    d = pending_on_first_rung(make_dispatch, fake, policy="calibrated-last")
    past = full_node(fake.clock.now(), 1.0)
    frozen.tick(10)
    tick(d, fake, past)
    assert d.state == FIRST
    assert PARKED not in [s.dest for s in d.history]


def test_the_router_reads_the_history_for_a_calibrated_dispatch_on_its_first_rung(
    tmp_path: Path, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A calibrated dispatch waiting on high-eur (not its last rung) has the history read at its first poll."""
    config = Config(
        fellows=SlurmSettings(park_early="calibrated", park_cap_seconds=CAP),
        lanes=(CommandSettings(name="gcp", command=("true", "{dispatch_id}")),),
        router=RouterConfig(),
        state_dir=tmp_path,
    )
    fake.past = full_node(fake.clock.now(), 1.0, started=HOUR - 300)  # the jobs in the way end within the window
    router = Router(config, fake, Journal(config.journal_path)).start()
    try:
        handle = router.dispatch(JobSpec("train", "train.sbatch", gpus=8))
        job = router.live[handle.dispatch_id].job_id
        assert job is not None
        fake.set_pending(job, "Resources")
        frozen.tick(10)
        router.poll()
        assert fake.calls["history"] == 1
        assert router.live[handle.dispatch_id].state == FIRST
    finally:
        router.journal.close()


def test_the_users_own_jobs_pending_ahead_on_the_same_qos_take_the_gpus_first() -> None:
    """A burst on one rung: the user's own earlier job pending on the same QoS is ahead (8 GPUs free: 0 %); one of
    theirs on another QoS is not (it may walk away: 100 %)."""
    now = 1_000_000.0
    past_jobs = [FinishedJob(HOUR, HOUR)] * 48
    running = [RunningJob("1", 56, now - 60, 6 * HOUR)]
    me = PendingJob("20", 8, 10_000.0, "low-eur", "Resources", own=True)

    def chance(sibling: PendingJob) -> float:
        past = Workload(now, past_jobs, running, (sibling, me), total_gpus=64, used_gpus=56)
        got = start_chance(past, gpus=8, now=now, window_end=now + 600, job_id="20", qos="low-eur")
        assert got is not None
        return got.probability

    assert chance(PendingJob("19", 8, 10_000.0, "low-eur", "Resources", own=True)) == 0.0
    assert chance(PendingJob("19", 8, 50_000.0, "normal-eur", "Resources", own=True)) == 1.0


# ----------------------------------------------------------------- the simulator's targets, on traces of their own
def _history_then(blockers: list[TraceJob], me_at: float) -> tuple[TraceJob, ...]:
    """30 one-GPU jobs of other users that run their whole 10 min limits (the history), then ``blockers``, then
    one 8-GPU job of mine at ``me_at``."""
    past = [TraceJob(i, 20.0 * i, 1, 600.0, "user1", qos="normal-eur", time_limit=600.0) for i in range(30)]
    jobs = [*past, *blockers, TraceJob(0, me_at, 8, 3600.0, "me", time_limit=2 * HOUR)]
    jobs.sort(key=lambda j: j.submit_at)
    return tuple(
        TraceJob(i, j.submit_at, j.gpus, j.duration, j.user, qos=j.qos, time_limit=j.limit) for i, j in enumerate(jobs)
    )


def test_sim_a_node_taken_for_hours_reaches_the_paid_lane_within_three_polls() -> None:
    """Simulator, 300 s caps: eight 8-GPU jobs that run their 6 h limits hold the node, the user's caps are free:
    calibrated hands the job off within three polls of its submit (each cancel proved in its own tick, as the SLURM
    port proves it), the plain ladder after the sum of the caps."""
    blockers = [
        TraceJob(0, 1800.0 + i, 8, 6 * HOUR, f"user{2 + i}", qos="normal-eur", time_limit=6 * HOUR) for i in range(8)
    ]
    trace = _history_then(blockers, 1900.0)
    params = SimParams(gpus=64, poll_interval_seconds=10.0)
    mine = next(j.index for j in trace if j.mine)
    calibrated = by_index(simulate(trace, "calibrated", 300.0, params))[mine]
    plain = by_index(simulate(trace, "ladder", 300.0, params))[mine]
    assert calibrated.lane == "gcp"
    assert calibrated.start_seconds is not None
    assert calibrated.start_seconds <= 3 * 10.0
    assert plain.lane == "gcp"
    assert plain.start_seconds is not None
    assert plain.start_seconds >= 3 * 300.0


def test_sim_blockers_ending_within_the_window_start_the_job_on_its_rung() -> None:
    """Simulator, 300 s caps: the node is held by jobs that reach their limits 200 s after my submit, and other
    users' jobs wait on low-eur: calibrated starts the job on high-eur, never paid."""
    blockers = [TraceJob(0, 1800.0 + i, 8, 400.0, f"user{2 + i}", qos="normal-eur", time_limit=400.0) for i in range(8)]
    below = [TraceJob(0, 1950.0 + i, 8, HOUR, "user9", qos="low-eur", time_limit=HOUR) for i in range(4)]
    trace = _history_then([*blockers, *below], 2000.0)
    mine = next(j.index for j in trace if j.mine)
    outcome = by_index(simulate(trace, "calibrated", 300.0, SimParams(gpus=64, poll_interval_seconds=10.0)))[mine]
    assert outcome.lane == "fellows"
    assert outcome.qos == "high-eur"
