"""park_early = "calibrated" on the real local SLURM: the last rung left, or kept, on the cluster's own history.

The history is built on the cluster itself, through sacct: jobs without GPUs that run their whole (1-minute) limit
and time out, or that end 30 s into a 10-minute limit (a twentieth). Then the node's 64 GPUs are filled with 8
jobs of 8 GPUs, and one 8-GPU dispatch goes on a one-rung ladder (low-eur, its last rung) with a gcp lane after it.
Each test reads its history from its own start on (``calibrated_history_seconds``), so other tests' jobs are not in
it. Every assertion reads the journal's steps or SLURM's own fields, never a stopwatch.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.effects import Step
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SIM_EPOCH, SimClock
from fellows_fsm.sim.cluster import SimCluster
from fellows_fsm.slurm.observe import parse_slurm_time
from tests.integration.conftest import Cluster

from .settled import walked, walked_out

pytestmark = pytest.mark.slurm

CAP = 90.0
POLL = 1.0
HISTORY_JOBS = 20
WORKLOAD_GAP_SECONDS = 2.0
"""Each test's history starts this long after the test itself: sacct's --starttime takes every job that ended
after it, and the previous test's jobs, cancelled by its teardown just before this test began, must not count (a
margin the other way let them in, and a node of cancelled 10-minute jobs read as jobs that end early). This
test's own history jobs end a minute in."""


def _slurm(*argv: str) -> str:
    """A SLURM client's stdout (it must exit 0)."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=30).stdout


def _sbatch(slurm: Cluster, *options: str, seconds: int) -> str:
    """Submit one job sleeping ``seconds`` with ``options``; its id."""
    argv = ["sbatch", "--parsable", *options, *slurm.job_args(), slurm.script(seconds)]
    return _slurm(*argv).strip().split(";")[0]


def build_history(slurm: Cluster, *, limit_minutes: int, seconds: int, end_states: tuple[str, ...]) -> None:
    """HISTORY_JOBS jobs without GPUs, limit ``limit_minutes``, each sleeping ``seconds``; wait until sacct has them
    all ended in one of ``end_states``."""
    ids = [_sbatch(slurm, "--qos=low-eur", f"--time={limit_minutes}", seconds=seconds) for _ in range(HISTORY_JOBS)]

    def recorded() -> bool:
        out = _slurm("sacct", "-P", "-n", "-X", "-j", ",".join(ids), "-o", "JobID,State")
        states = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
        return all(states.get(i, "").split(" ")[0] in end_states for i in ids)

    slurm.wait_for(recorded, f"sacct to record {HISTORY_JOBS} history jobs ended", timeout=180, tick=1.0)


def fill_node(slurm: Cluster, *, limit_minutes: int, seconds: int) -> list[str]:
    """Fill the node's 64 GPUs with 8 running low-eur jobs of 8 GPUs (limit ``limit_minutes``)."""
    ids = [
        _sbatch(slurm, "--qos=low-eur", "--gres=gpu:8", f"--time={limit_minutes}", seconds=seconds) for _ in range(8)
    ]
    slurm.wait_for(lambda: all(slurm.row(i).state == "RUNNING" for i in ids), "the node to fill")
    return ids


def dispatch_on_last_rung(slurm: Cluster, tmp_path: Path, since: float) -> tuple[list[Step], str, str, Router]:
    """One 8-GPU calibrated dispatch on low-eur then gcp; its steps, final state and outcome (and the router)."""
    config = Config(
        fellows=SlurmSettings(
            qos="low-eur",
            qos_ladder=(),
            park_cap_seconds=CAP,
            poll_interval_seconds=POLL,
            park_early="calibrated",
            calibrated_history_seconds=time.time() - since - WORKLOAD_GAP_SECONDS,
        ),
        lanes=(CommandSettings(name="gcp", command=("true", "{dispatch_id}")),),
        router=RouterConfig(),
        state_dir=tmp_path,
    )
    router = Router(config, slurm.port(), Journal(config.journal_path)).start()
    try:
        handle = router.dispatch(slurm.spec(gpus=8, seconds=300, time_limit=600))
        polls = 0

        def done(_: object) -> bool:
            nonlocal polls
            polls += 1
            row = router.handle(handle.dispatch_id)
            return (walked(row) and walked_out(router)) or polls > 400

        router.run(until=done)
        final = router.handle(handle.dispatch_id)
        steps = router.journal.steps(handle.dispatch_id)
    finally:
        router.journal.close()
    return steps, final.state, final.outcome, router


def test_a_history_of_whole_limits_leaves_the_last_rung_for_the_paid_lane(slurm: Cluster, tmp_path: Path) -> None:
    """Jobs that ran their whole limits, and a node full of 30-minute jobs: the last rung is left within a few polls,
    the reason naming the history's figures, and the job goes to the gcp lane; one history read in all."""
    since = time.time()
    build_history(slurm, limit_minutes=1, seconds=600, end_states=("TIMEOUT",))
    fill_node(slurm, limit_minutes=30, seconds=600)
    steps, state, outcome, router = dispatch_on_last_rung(slurm, tmp_path, since)
    submit, park = steps[0], next(s for s in steps if s.trigger == "park")
    assert park.note.startswith("park_early=calibrated: 0 % chance of a start within ")
    assert ": 8 jobs in the way; history: " in park.note
    found = re.search(r"history: (\d+) jobs[^,]*, median elapsed/limit 1\.00;", park.note)
    assert found is not None, park.note
    assert int(found.group(1)) >= HISTORY_JOBS  # its own jobs (and any other that ended on its own since it began)
    assert park.note.endswith("median elapsed/limit 1.00; leaving for the paid lane")
    assert park.at <= submit.at + 5 * POLL  # within a few polls, not at the window's end
    assert (state, outcome) == ("HANDED_OFF", "handed-off")
    assert router.cluster_workload.reads == 1


def test_a_history_of_jobs_ending_at_a_twentieth_of_their_limits_waits_and_starts(
    slurm: Cluster, tmp_path: Path
) -> None:
    """Jobs that end 30 s into 10-minute limits, and a node full of such jobs: the job waits on the last rung (no
    early park) and starts there when they end."""
    since = time.time()
    build_history(slurm, limit_minutes=10, seconds=30, end_states=("COMPLETED",))
    fill_node(slurm, limit_minutes=10, seconds=30)
    steps, state, _, _ = dispatch_on_last_rung(slurm, tmp_path, since)
    assert [s.trigger for s in steps] == ["submit", "start"], [s.note for s in steps]
    assert (state, steps[-1].qos) == ("RUNNING", "low-eur")


def test_a_full_node_gives_an_own_capped_job_the_end_of_its_own_jobs_limits_as_the_simulator_does(
    slurm: Cluster,
) -> None:
    """Node full (two own 8-GPU high-eur jobs with 20-minute limits, six 8-GPU low-eur jobs with 30): a third
    high-eur job pending QOSMaxGRESPerUser has a %S estimate at the end of the own jobs' limits; so has the
    simulator's job in the same place."""
    own = slurm.occupy("high-eur", 8, count=2, time_minutes=20)
    slurm.occupy("low-eur", 8, count=6, time_minutes=30)
    job = _sbatch(slurm, "--qos=high-eur", "--gres=gpu:8", "--time=20", seconds=300)

    def estimated() -> bool:
        row = _slurm("squeue", "-h", "-j", job, "-o", "%r|%S").strip()
        return row.split("|")[0] in ("QOSMaxGRESPerUser", "None") and parse_slurm_time(row.split("|")[1]) is not None

    slurm.wait_for(estimated, f"a start estimate for job {job}", timeout=30)
    estimate = parse_slurm_time(_slurm("squeue", "-h", "-j", job, "-o", "%S"))
    starts = [parse_slurm_time(_slurm("squeue", "-h", "-j", i, "-o", "%S")) for i in own]
    ends = [start + 20 * 60 for start in starts if start is not None]
    assert estimate is not None
    assert len(ends) == 2
    assert min(ends) - 2 <= estimate <= max(ends) + 2

    clock = SimClock(SIM_EPOCH)
    sim = SimCluster(clock, gpus=64)
    for qos, count, limit in (("high-eur", 2, 1200), ("low-eur", 6, 1800)):
        for _ in range(count):
            sim.submit(JobSpec("b", f"b-{qos}", gpus=8, time_limit_seconds=limit), qos=qos, token="")
    third = sim.submit(JobSpec("t", "t", gpus=8, time_limit_seconds=1200), qos="high-eur", token="")
    seen = sim.observe([third])[third]
    assert (seen.reason, seen.expected_start) == ("QOSMaxGRESPerUser", SIM_EPOCH + 1200)
