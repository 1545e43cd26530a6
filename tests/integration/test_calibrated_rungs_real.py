"""park_early = "calibrated" on every rung, on the real local SLURM: an earlier rung left, or kept, on the cluster's
own history (issue 28).

The history is built on the cluster itself, through sacct (tests/integration/test_calibrated_real.py's helpers): jobs
without GPUs that run their whole 1-minute limit and time out. Then the node's 64 GPUs are filled with 8 low-eur
jobs of 8 GPUs (the user's high-eur and normal-eur caps stay free, so own-cap never fires), and one 8-GPU dispatch
walks the whole ladder (high-eur, normal-eur, low-eur) with a gcp lane after it. Every assertion reads the
journal's steps, the router's poll count or SLURM's own fields, never a stopwatch.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.effects import Step
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from tests.integration.conftest import Cluster
from tests.integration.test_calibrated_real import WORKLOAD_GAP_SECONDS, _sbatch, build_history, fill_node

from .settled import walked, walked_out

pytestmark = pytest.mark.slurm

CAP = 90.0
POLL = 1.0


def walk_ladder(slurm: Cluster, tmp_path: Path, since: float) -> tuple[list[Step], str, int]:
    """One 8-GPU calibrated dispatch on the three-rung ladder then gcp; its steps, final state and the polls it took."""
    config = Config(
        fellows=SlurmSettings(
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
            row = router.handle(handle.dispatch_id)
            if walked(row) and walked_out(router):
                return True
            polls += 1
            return polls > 600

        router.run(until=done)
        final = router.handle(handle.dispatch_id)
        steps = router.journal.steps(handle.dispatch_id)
    finally:
        router.journal.close()
    return steps, final.state, polls


def test_a_node_held_by_jobs_that_run_their_limits_leaves_every_rung_for_the_paid_lane(
    slurm: Cluster, tmp_path: Path
) -> None:
    """Workload of jobs that ran their whole limits, a node full of 30-minute jobs, the user's caps free: high-eur,
    normal-eur and low-eur are each left early on the history (the chance and figures in each park's note), and
    the job reaches the gcp lane within a few polls, not after the sum of the caps."""
    since = time.time()
    build_history(slurm, limit_minutes=1, seconds=600, end_states=("TIMEOUT",))
    fill_node(slurm, limit_minutes=30, seconds=600)
    steps, state, polls = walk_ladder(slurm, tmp_path, since)
    parks = [s for s in steps if s.trigger == "park"]
    assert [p.qos for p in parks] == ["high-eur", "normal-eur", "low-eur"], [s.note for s in steps]
    for park, where in zip(parks, ("the next rung", "the next rung", "the paid lane"), strict=True):
        assert park.note.startswith("park_early=calibrated: 0 % chance of a start within "), park.note
        assert ": 8 jobs in the way; history: " in park.note
        assert park.note.endswith(f"leaving for {where}")
    assert state == "HANDED_OFF"
    # The plain ladder would take 3 * CAP / POLL = 270 polls; here each rung is left at its first poll once SLURM
    # has evaluated the new job (measured on 22.05: the hand-off at the third poll after the submit, 5 turns of
    # the run loop in all); the bound leaves room for a reason still None at a first look.
    assert polls <= 12, polls


def test_blockers_that_end_within_the_window_start_the_job_on_its_first_rung(slurm: Cluster, tmp_path: Path) -> None:
    """The same history, a node full of jobs whose 1-minute limits end within high-eur's 90 s window, and other
    jobs waiting below on low-eur: the job is never walked, and starts on high-eur."""
    since = time.time()
    build_history(slurm, limit_minutes=1, seconds=600, end_states=("TIMEOUT",))
    fill_node(slurm, limit_minutes=1, seconds=600)
    below = [_sbatch(slurm, "--qos=low-eur", "--gres=gpu:8", "--time=30", seconds=600) for _ in range(2)]
    slurm.wait_for(lambda: all(slurm.row(i).state == "PENDING" for i in below), "the jobs below to pend")
    steps, state, _ = walk_ladder(slurm, tmp_path, since)
    assert [s.trigger for s in steps] == ["submit", "start"], [s.note for s in steps]
    assert (state, steps[-1].qos) == ("RUNNING", "high-eur")
