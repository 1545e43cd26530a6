"""The lifecycle walking the QoS ladder on the real local SLURM, asserted on squeue's own view of the jobs."""

from __future__ import annotations

import time
import uuid

import pytest

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.vocab import State
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec, Observation, Phase
from fellows_fsm.slurm.accounting import check_ladder, discover
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.testing import Driven

from .conftest import Cluster

pytestmark = pytest.mark.slurm

LADDER = ("high-eur", "normal-eur", "low-eur")


def _ladder(cap: float, *names: str) -> Ladder:
    names = names or LADDER
    return SlurmSettings(qos=names[0], qos_ladder=list(names[1:]), park_cap_seconds=cap).ladder


def _dispatch(spec: JobSpec, ladder: Ladder, port: SlurmScheduler, *, pinned: bool = False) -> Driven:
    dispatch = Driven(Dispatch(id=f"it{uuid.uuid4().hex[:8]}", spec=spec, ladder=ladder, pinned=pinned), port)
    dispatch.submit()
    return dispatch


def _parks(dispatch: Driven) -> list[tuple[str, str | None]]:
    return [(s.qos, s.reason) for s in dispatch.history if s.trigger == "park"]


def test_own_cap_walks_to_normal_eur(slurm: Cluster) -> None:
    """With 16 high-eur GPUs in use, an 8-GPU dispatch pends on its own cap, parks, and runs on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    port = slurm.port()
    dispatch = _dispatch(slurm.spec(gpus=8), _ladder(2.5), port)
    first_job = dispatch.job_id
    assert first_job is not None
    slurm.wait_for(lambda: slurm.row(first_job).reason == "QOSMaxGRESPerUser", "high-eur to block on its cap")
    ticks = slurm.drive([dispatch], port, until=lambda: dispatch.state == State.RUNNING, timeout=30)

    assert dispatch.rung.qos == "normal-eur"
    assert _parks(dispatch) == [("high-eur", "QOSMaxGRESPerUser")]
    jobs = slurm.jobs_of(dispatch)
    assert [(j.qos, j.state) for j in jobs] == [("high-eur", "CANCELLED"), ("normal-eur", "RUNNING")]
    assert jobs[0].job_id == first_job
    assert not jobs[0].ever_ran
    assert [j for j in jobs if j.ever_ran] == [jobs[1]]
    gone = slurm.sacct_row(first_job).observation  # sacct agrees: cancelled, never started
    assert (gone.state, gone.phase) == ("CANCELLED by 0", Phase.GONE)
    # One squeue per tick, plus one read-back for the single cancel; never more.
    assert port.runner.calls["squeue"] <= ticks + 1


def test_two_capped_rungs_reach_low_eur(slurm: Cluster) -> None:
    """With high-eur and normal-eur both at their per-user caps, the dispatch reaches low-eur and runs."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    port = slurm.port()
    dispatch = _dispatch(slurm.spec(gpus=8), _ladder(2.0), port)
    slurm.drive([dispatch], port, until=lambda: dispatch.state == State.RUNNING, timeout=40)

    assert dispatch.rung.qos == "low-eur"
    assert [q for q, _ in _parks(dispatch)] == ["high-eur", "normal-eur"]
    jobs = slurm.jobs_of(dispatch)
    assert [(j.qos, j.state, j.ever_ran) for j in jobs] == [
        ("high-eur", "CANCELLED", False),
        ("normal-eur", "CANCELLED", False),
        ("low-eur", "RUNNING", True),
    ]


def test_every_rung_blocked_ends_failed_to_gcp(slurm: Cluster) -> None:
    """With every GPU taken (both caps full, the rest on low-eur), the dispatch gives up and leaves no job."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    slurm.occupy("low-eur", 32)
    port = slurm.port()
    dispatch = _dispatch(slurm.spec(gpus=8), _ladder(5.0), port)
    # A fine tick and 5 s windows: on 24.11, with the node full, squeue shows the cap only part of the time (None
    # after each backfill pass); the port keeps it once seen, but a short window can miss it altogether.
    slurm.drive([dispatch], port, until=lambda: dispatch.state == State.FAILED_TO_GCP, timeout=60, tick=0.1)

    reasons = _parks(dispatch)
    assert [q for q, _ in reasons] == list(LADDER)
    assert reasons[0][1] == reasons[1][1] == "QOSMaxGRESPerUser"
    assert reasons[2][1] in ("Resources", "Priority")
    jobs = slurm.jobs_of(dispatch)
    assert len(jobs) == 3
    assert all(j.state == "CANCELLED" and not j.ever_ran for j in jobs)
    assert not set(slurm.live_ids()) & {j.job_id for j in jobs}


def test_time_over_max_wall_skips_rungs_before_their_cap(slurm: Cluster) -> None:
    """An 8-day job pends with QOSMaxWallDurationPerJobLimit on the 7-day rungs and leaves each at once."""
    port = slurm.port()
    cap = 60.0
    dispatch = _dispatch(slurm.spec(gpus=1, time_limit=8 * 86_400), _ladder(cap), port)
    slurm.drive([dispatch], port, until=lambda: dispatch.state == State.RUNNING, timeout=30)

    first_window_end = dispatch.history[0].at + cap
    assert all(s.at < first_window_end for s in dispatch.history if s.trigger == "park")  # never waited out a cap
    assert dispatch.rung.qos == "low-eur"
    assert _parks(dispatch) == [
        ("high-eur", "QOSMaxWallDurationPerJobLimit"),
        ("normal-eur", "QOSMaxWallDurationPerJobLimit"),
    ]
    assert [(j.qos, j.ever_ran) for j in slurm.jobs_of(dispatch)] == [
        ("high-eur", False),
        ("normal-eur", False),
        ("low-eur", True),
    ]


def test_ungranted_qos_refused_before_any_submit(slurm: Cluster) -> None:
    """A ladder with the ungranted other-eur is refused by check_ladder, and the queue does not change."""
    port = slurm.port()
    before = slurm.queue()
    ladder = _ladder(2.0, "high-eur", "other-eur", "low-eur")
    with pytest.raises(ConfigError, match=r"'other-eur'.*not granted.*granted: .*high-eur"):
        check_ladder(ladder, discover(port.runner, port.user), slurm.spec(gpus=8))
    assert port.runner.calls["sbatch"] == 0
    assert slurm.queue() == before


def test_pinned_dispatch_stays_on_high_eur(slurm: Cluster) -> None:
    """A pinned dispatch stays pending on high-eur well past several caps, with one job only."""
    slurm.occupy("high-eur", 8, count=2)
    port = slurm.port()
    dispatch = _dispatch(slurm.spec(gpus=8), _ladder(1.0), port, pinned=True)
    end = time.monotonic() + 4.5
    slurm.drive([dispatch], port, until=lambda: time.monotonic() > end, timeout=10)

    assert dispatch.state == dispatch.ladder.first.state_name
    assert dispatch.history[-1].trigger == "submit"
    jobs = slurm.jobs_of(dispatch)
    assert [(j.qos, j.state, j.reason) for j in jobs] == [("high-eur", "PENDING", "QOSMaxGRESPerUser")]


def test_late_start_wins_over_the_park(slurm: Cluster) -> None:
    """A job that starts after its last pending sighting but before the cancel stays RUNNING, alone."""
    blockers = slurm.occupy("high-eur", 8, count=2)
    port = slurm.port()
    dispatch = _dispatch(slurm.spec(gpus=8), _ladder(2.0), port)
    job_id = dispatch.job_id
    assert job_id is not None
    slurm.wait_for(lambda: slurm.row(job_id).reason == "QOSMaxGRESPerUser", "high-eur to block on its cap")
    stale = port.observe([job_id])[job_id]
    dispatch.advance(stale)
    assert stale.phase is Phase.PENDING

    # The job starts while the dispatch is not looking; its cap then expires on the stale sighting.
    slurm.cancel(blockers[0])
    slurm.wait_for(lambda: slurm.row(job_id).state == "RUNNING", "the job to start")
    slurm.wait_for(lambda: time.time() >= dispatch.deadline, "the cap to expire", timeout=5)
    dispatch.advance(Observation(job_id, Phase.PENDING, "PENDING", "QOSMaxGRESPerUser", "high-eur"))
    # The cancel spares the running job and proves nothing gone: the next tick's look reads it running.
    assert dispatch.state == "PARKED"
    dispatch.advance(port.observe([job_id])[job_id])

    assert dispatch.state == State.RUNNING
    assert [s.trigger for s in dispatch.history] == ["submit", "park", "start"]
    jobs = slurm.jobs_of(dispatch)
    assert [(j.job_id, j.qos, j.state) for j in jobs] == [(job_id, "high-eur", "RUNNING")]
    assert port.runner.calls["sbatch"] == 1


@pytest.mark.parametrize(
    ("debug_qos", "first_qos"),
    [pytest.param("dev-eur", "dev-eur", id="debug-qos"), pytest.param(None, "high-eur", id="no-debug-qos")],
)
def test_debug_intent_starts_on_the_debug_qos(slurm: Cluster, debug_qos: str | None, first_qos: str) -> None:
    """A debug-intent dispatch starts on dev-eur when debug_qos is set, else on high-eur like any other."""
    config = SlurmSettings(debug_qos=debug_qos, park_cap_seconds=3.0)
    port = slurm.port()
    dispatch = _dispatch(slurm.spec(gpus=1), config.ladder_for("debug"), port)
    slurm.drive([dispatch], port, until=lambda: dispatch.state == State.RUNNING, timeout=20)

    assert dispatch.rung.index == 0
    assert [(j.qos, j.state) for j in slurm.jobs_of(dispatch)] == [(first_qos, "RUNNING")]
