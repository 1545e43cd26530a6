"""park_early on the real local SLURM: a job leaves a rung it cannot start on in time, before the window closes.

high-eur is held at this user's 16-GPU cap by two running jobs whose time limits end 30 minutes out; the rung's
cap is 60 s. SLURM 22.05 shows no start estimate (N/A) for a job its per-user QoS cap holds back (measured here,
against the issue's expectation: in squeue's %S, in the StartTime field the port reads, in scontrol and in squeue
--start alike; scripts/measure-start-estimate), so the estimate policy leaves on that reason; a contention wait with
an estimate past the window is the other case. Every assertion reads the journal's steps against the window, or
SLURM's own fields, never a stopwatch.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.effects import Step
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.slurm.observe import parse_slurm_time
from tests.integration.conftest import Cluster

from .settled import walked

pytestmark = pytest.mark.slurm

CAP = 60.0
POLL = 1.0


def run_dispatch(slurm: Cluster, tmp_path: Path, policy: str) -> tuple[list[Step], str, int, int]:
    """Dispatch one 8-GPU job through the real Router with ``policy``; its steps, final QoS, polls and squeues."""
    slurm.occupy("high-eur", 8, count=2, time_minutes=30)
    lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=POLL, park_early=policy),
        lanes=(lane,),
        router=RouterConfig(),
        state_dir=tmp_path,
    )
    port = slurm.port()
    router = Router(config, port, Journal(config.journal_path)).start()
    try:
        handle = router.dispatch(slurm.spec(gpus=8, time_limit=600))
        polls = 0

        def done(_: object) -> bool:
            nonlocal polls
            polls += 1
            return walked(router.handle(handle.dispatch_id)) or polls > 400

        router.run(until=done)
        final = router.handle(handle.dispatch_id)
        steps = router.journal.steps(handle.dispatch_id)
    finally:
        router.journal.close()
    assert final.state == "RUNNING", final
    return steps, final.qos or "", polls, port.runner.calls["squeue"]


def test_estimate_leaves_high_eur_at_once_and_says_why(slurm: Cluster, tmp_path: Path) -> None:
    """With park_early='estimate', the dispatch parks high-eur before its window closes, saying why (its own cap
    and no estimate from SLURM), and runs on normal-eur; it costs no SLURM call beyond the poll's one squeue."""
    steps, qos, polls, squeues = run_dispatch(slurm, tmp_path, "estimate")
    assert qos == "normal-eur"
    submit, park = steps[0], next(s for s in steps if s.trigger == "park")
    assert (park.qos, park.reason) == ("high-eur", "QOSMaxGRESPerUser")
    assert (
        park.note
        == "park_early=estimate: QOSMaxGRESPerUser and SLURM gives no start estimate; leaving for the next rung"
    )
    assert park.at < submit.at + CAP  # left inside the window, not at its end
    assert [s.trigger for s in steps] == ["submit", "park", "cancel", "resubmit", "start"]
    assert squeues <= polls + 1  # one squeue per poll (plus the cancel's read-back at most): no extra call


def test_off_waits_out_the_cap_on_high_eur(slurm: Cluster, tmp_path: Path) -> None:
    """With park_early='off', the same dispatch waits high-eur's whole window before it walks to normal-eur."""
    steps, qos, _, _ = run_dispatch(slurm, tmp_path, "off")
    assert qos == "normal-eur"
    submit, park = steps[0], next(s for s in steps if s.trigger == "park")
    assert park.at >= submit.at + CAP
    assert park.note == ""


def test_an_estimate_past_the_window_parks_a_contended_job(slurm: Cluster, tmp_path: Path) -> None:
    """With the node full of 30-minute jobs, high-eur's job pends on Resources with SLURM's estimate 30 minutes out:
    estimate parks it inside the window, the note giving the estimate and the window's end."""
    slurm.occupy("low-eur", 64, time_minutes=30)
    lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=POLL, park_early="estimate"),
        lanes=(lane,),
        state_dir=tmp_path,
    )
    router = Router(config, slurm.port(), Journal(config.journal_path)).start()
    try:
        handle = router.dispatch(slurm.spec(gpus=8, time_limit=600))
        polls = 0

        def parked(_: object) -> bool:
            nonlocal polls
            polls += 1
            steps = router.journal.steps(handle.dispatch_id)
            return any(s.trigger == "park" for s in steps) or polls > 200

        router.run(until=parked)
        steps = router.journal.steps(handle.dispatch_id)
    finally:
        router.journal.close()
    submit, park = steps[0], next(s for s in steps if s.trigger == "park")
    assert park.qos == "high-eur"
    assert park.note.startswith("park_early=estimate: start estimated ")
    assert "window ends" in park.note
    assert park.at < submit.at + CAP


def _slurm(*argv: str) -> str:
    """A SLURM client's stdout (it must exit 0)."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=30).stdout


def _backfill_cycles() -> int:
    """How many backfill passes slurmctld has run since it started (sdiag's backfill "Total cycles")."""
    backfill = _slurm("sdiag").split("Backfilling stats", 1)[1]
    found = re.search(r"Total cycles:\s*(\d+)", backfill)
    assert found is not None, backfill
    return int(found.group(1))


def _sbatch_high_eur(slurm: Cluster, minutes: int) -> str:
    """Submit one 8-GPU high-eur job with a time limit of ``minutes``; its id."""
    argv = ["sbatch", "--parsable", "--qos=high-eur", "--gres=gpu:8", f"--time={minutes}", *slurm.job_args()]
    return _slurm(*argv, slurm.script(300)).strip().split(";")[0]


def test_no_start_estimate_for_a_job_over_its_own_cap_in_either_squeue_field(slurm: Cluster) -> None:
    """On SLURM 22.05 a job held back by its own per-QoS cap, behind two own jobs with 20-minute limits, has no start
    estimate through two backfill passes: squeue's %S says N/A and the port (squeue's StartTime) has none either."""
    if not _slurm("sinfo", "--version").split()[-1].startswith("22.05"):
        pytest.skip("measured on SLURM 22.05; other versions are not pinned here")
    slurm.occupy("high-eur", 8, count=2, time_minutes=20)
    job = _sbatch_high_eur(slurm, 20)
    cycles = _backfill_cycles()  # every pass counted from here on starts with the job queued
    slurm.wait_for(lambda: slurm.row(job).reason == "QOSMaxGRESPerUser", f"job {job} to pend on its own cap")
    slurm.wait_for(lambda: _backfill_cycles() >= cycles + 2, "two backfill passes with the job queued")
    assert _slurm("squeue", "-h", "-j", job, "-o", "%S").strip() == "N/A"
    seen = slurm.port().observe([job])[job]
    assert (seen.reason, seen.expected_start) == ("QOSMaxGRESPerUser", None)


def test_the_port_reads_the_same_estimate_as_squeue_percent_s(slurm: Cluster) -> None:
    """Where SLURM has an estimate (a job pending on Resources behind 30-minute jobs), the port's expected start is
    squeue's %S to the second: the StartTime field it reads and %S are the same value."""
    slurm.occupy("low-eur", 64, time_minutes=30)
    job = _sbatch_high_eur(slurm, 20)
    # The scheduler may fill in the estimate a pass before it sets the pending reason: wait for both.
    slurm.wait_for(
        lambda: (
            _slurm("squeue", "-h", "-j", job, "-o", "%r").strip() in ("Resources", "Priority")
            and parse_slurm_time(_slurm("squeue", "-h", "-j", job, "-o", "%S")) is not None
        ),
        f"an estimate and a reason for job {job}",
    )
    estimate = parse_slurm_time(_slurm("squeue", "-h", "-j", job, "-o", "%S"))
    seen = slurm.port().observe([job])[job]
    assert seen.expected_start == estimate
    assert seen.reason in ("Resources", "Priority")
