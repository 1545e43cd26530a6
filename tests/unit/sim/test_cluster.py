"""The simulated cluster as a Scheduler port: per-QoS per-user GPU caps, priority, reasons, cancel, deadlines."""

from __future__ import annotations

import pytest

from fellows_fsm.errors import QosRejected
from fellows_fsm.scheduler.port import JobSpec, Phase, Scheduler
from fellows_fsm.sim.clock import SIM_EPOCH, SimClock
from fellows_fsm.sim.cluster import SimCluster
from fellows_fsm.sim.jobs import parse_tier
from fellows_fsm.sim.trace import TraceJob


def spec(name: str, gpus: int = 8, seconds: int = 600) -> JobSpec:
    """A job spec whose duration (its time limit here) is ``seconds``."""
    return JobSpec(name=name, script=f"{name}.sbatch", gpus=gpus, time_limit_seconds=seconds)


@pytest.fixture
def cluster() -> SimCluster:
    """A 64-GPU simulated cluster with the fellows tiers at the simulation's epoch."""
    return SimCluster(SimClock(), gpus=64)


def test_the_per_user_cap_is_per_qos(cluster: SimCluster) -> None:
    """Two 8-GPU high-eur jobs run, the third pends on QOSMaxGRESPerUser, and normal-eur starts it at once."""
    port: Scheduler = cluster
    ids = [port.submit(spec(f"j{i}"), qos="high-eur", token=f"t{i}") for i in range(3)]
    seen = port.observe(ids)
    assert [seen[i].phase for i in ids] == [Phase.STARTED, Phase.STARTED, Phase.PENDING]
    assert seen[ids[2]].reason == "QOSMaxGRESPerUser"
    other = port.submit(spec("j3"), qos="normal-eur", token="t3")
    assert port.observe([other])[other].phase is Phase.STARTED


def test_jobs_end_after_their_duration_and_free_the_cap(cluster: SimCluster) -> None:
    """When a running job's duration is over it completes, and the pending job on its QoS starts then."""
    first = cluster.submit(spec("a", seconds=100), qos="high-eur", token="a")
    cluster.submit(spec("b", seconds=500), qos="high-eur", token="b")
    third = cluster.submit(spec("c"), qos="high-eur", token="c")
    cluster.advance_to(SIM_EPOCH + 100)
    assert cluster.jobs[first].state == "COMPLETED"
    assert cluster.jobs[third].start_time == SIM_EPOCH + 100


def test_a_full_cluster_gives_resources_then_priority_and_starts_the_higher_qos_first() -> None:
    """With every GPU busy the first waiting job reads Resources, the next Priority; high-eur goes before low-eur."""
    cluster = SimCluster(SimClock(), gpus=8)
    busy = cluster.submit(spec("busy", seconds=60), qos="low-eur", token="busy")
    low = cluster.submit(spec("low"), qos="low-eur", token="low")
    high = cluster.submit(spec("high"), qos="high-eur", token="high")
    assert (cluster.jobs[high].reason, cluster.jobs[low].reason) == ("Resources", "Priority")
    cluster.advance_to(SIM_EPOCH + 60)
    assert cluster.jobs[busy].state == "COMPLETED"
    assert cluster.jobs[high].state == "RUNNING"
    assert cluster.jobs[low].state == "PENDING"


def test_cancel_if_pending_leaves_a_running_job_running(cluster: SimCluster) -> None:
    """A cancel only ends pending jobs; a running one reads back STARTED (the late start wins)."""
    running = cluster.submit(spec("r"), qos="low-eur", token="r")
    cluster.submit(spec("fill", gpus=56), qos="low-eur", token="fill")
    pending = cluster.submit(spec("p"), qos="low-eur", token="p")
    back = cluster.cancel_if_pending([running, pending])
    assert back[running].phase is Phase.STARTED
    assert (back[pending].phase, back[pending].state) == (Phase.GONE, "CANCELLED")
    assert cluster.cancel_if_pending([pending], read_back=False) == {}


def test_a_cancel_without_read_back_proves_the_pending_jobs_it_removed_gone(cluster: SimCluster) -> None:
    """Like the SLURM port, a cancel without read-back reports each pending job it removed GONE, and leaves out a
    running one (its next observe reads it STARTED)."""
    running = cluster.submit(spec("r"), qos="low-eur", token="r")
    cluster.submit(spec("fill", gpus=56), qos="low-eur", token="fill")
    pending = cluster.submit(spec("p"), qos="low-eur", token="p")
    proved = cluster.cancel_if_pending([running, pending], read_back=False)
    assert set(proved) == {pending}
    assert (proved[pending].phase, proved[pending].state) == (Phase.GONE, "CANCELLED")
    assert cluster.observe([running])[running].phase is Phase.STARTED


def test_the_controller_deadline_drops_a_job_still_pending() -> None:
    """A pending job past its sbatch --deadline ends DEADLINE without starting, as slurmctld would drop it."""
    cluster = SimCluster(SimClock(), gpus=8)
    cluster.submit(spec("busy", seconds=1000), qos="low-eur", token="busy")
    late = cluster.submit(spec("late"), qos="low-eur", token="late", deadline=SIM_EPOCH + 30)
    cluster.advance_to(SIM_EPOCH + 31)
    seen = cluster.observe([late])[late]
    assert (seen.phase, seen.state) == (Phase.GONE, "DEADLINE")


def test_a_deadline_closer_than_the_minute_rounded_time_limit_drops_the_job_at_once(cluster: SimCluster) -> None:
    """As slurmctld does, a --deadline less than the time limit (rounded up to minutes) away ends the job DEADLINE."""
    doomed = cluster.submit(spec("doomed", seconds=80), qos="high-eur", token="d", deadline=SIM_EPOCH + 83)
    fine = cluster.submit(spec("fine", seconds=120), qos="high-eur", token="f", deadline=SIM_EPOCH + 123)
    seen = cluster.observe([doomed, fine])
    assert (seen[doomed].phase, seen[doomed].state) == (Phase.GONE, "DEADLINE")
    assert seen[fine].phase is Phase.STARTED


def test_an_unknown_qos_is_refused_like_sbatch(cluster: SimCluster) -> None:
    """A QoS that is not a tier raises QosRejected, so the dispatch skips the rung."""
    with pytest.raises(QosRejected, match="Invalid qos specification"):
        cluster.submit(spec("x"), qos="gold", token="x")


def test_background_jobs_arrive_at_their_time_without_a_dispatch_token(cluster: SimCluster) -> None:
    """Background arrivals are queued at origin + submit_at under their own user and QoS."""
    cluster.set_arrivals([TraceJob(0, 50.0, 8, 100.0, "alice", qos="high-eur")], origin=SIM_EPOCH)
    assert cluster.next_event_time() == SIM_EPOCH + 50
    cluster.advance_to(SIM_EPOCH + 50)
    (job,) = cluster.jobs.values()
    assert (job.user, job.qos, job.state) == ("alice", "high-eur", "RUNNING")
    assert cluster.find_by_token("fsm-x-r0") is None


def test_a_fork_plays_ahead_without_touching_the_original(cluster: SimCluster) -> None:
    """A fork predicts a start time while the original cluster's clock and jobs stay as they were."""
    for i in range(2):
        cluster.submit(spec(f"run{i}", seconds=300), qos="high-eur", token=f"r{i}")
    twin = cluster.fork()
    probe = twin.queue_mine(TraceJob(9, 0.0, 8, 60.0, "me"), "high-eur")
    assert twin.run_until_started(probe.job_id, SIM_EPOCH + 1000) == SIM_EPOCH + 300
    assert cluster.clock.now() == SIM_EPOCH
    assert probe.job_id not in cluster.jobs
    assert twin.run_until_started(twin.queue_mine(TraceJob(10, 0.0, 32, 60.0, "me"), "high-eur").job_id, 1e12) is None


@pytest.mark.parametrize(
    ("text", "cap"), [("high-eur:100000:16", 16), ("low-eur:10000:-", None)], ids=["capped", "uncapped"]
)
def test_parse_tier_reads_name_priority_and_cap(text: str, cap: int | None) -> None:
    """NAME:PRIORITY:CAP gives the tier; '-' means no per-user GPU cap."""
    tier = parse_tier(text)
    assert (tier.name, tier.max_gpus_per_user) == (text.partition(":")[0], cap)


def test_an_own_capped_job_the_free_gpus_could_take_has_no_estimate(cluster: SimCluster) -> None:
    """Two own 8-GPU high-eur jobs and 48 GPUs free: a third pends QOSMaxGRESPerUser with no estimate (N/A)."""
    for name in ("a", "b"):
        cluster.submit(spec(name, seconds=1200), qos="high-eur", token="")
    third = cluster.submit(spec("c", seconds=1200), qos="high-eur", token="")
    seen = cluster.observe([third])[third]
    assert (seen.reason, seen.expected_start) == ("QOSMaxGRESPerUser", None)


def test_an_own_capped_job_on_a_full_node_is_estimated_at_the_end_of_its_own_jobs_limits(
    cluster: SimCluster,
) -> None:
    """Node full (two own high-eur jobs of 20 min, six low-eur of 30): the third own job's estimate is at 20 min,
    and it reserves nothing (a low-eur job behind it is still planned at the first end)."""
    for name in ("a", "b"):
        cluster.submit(spec(name, seconds=1200), qos="high-eur", token="")
    for i in range(6):
        cluster.submit(spec(f"o{i}", seconds=1800), qos="low-eur", token="")
    third = cluster.submit(spec("c", seconds=1200), qos="high-eur", token="")
    behind = cluster.submit(spec("d", seconds=600), qos="low-eur", token="")
    seen = cluster.observe([third, behind])
    assert (seen[third].reason, seen[third].expected_start) == ("QOSMaxGRESPerUser", SIM_EPOCH + 1200)
    assert seen[behind].expected_start == SIM_EPOCH + 1200


def test_the_history_holds_the_finished_running_and_pending_jobs(cluster: SimCluster) -> None:
    """After one 10-minute job ends (limit 10 min), the history has it at ratio 1, the running jobs, the GPUs."""
    cluster.submit(spec("short", seconds=600), qos="high-eur", token="")
    cluster.submit(spec("long", seconds=3600), qos="low-eur", token="")
    cluster.advance_to(SIM_EPOCH + 700)
    past = cluster.workload(since=SIM_EPOCH)
    assert past.ratios == (1.0,)
    assert [(j.gpus, j.limit_seconds) for j in past.running] == [(8, 3600.0)]
    assert (past.total_gpus, past.used_gpus, past.hidden_gpus, past.all_users) == (64, 8, 0, True)
    assert cluster.calls["history"] == 1
