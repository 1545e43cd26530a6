"""A command lane followed to its end on the real local SLURM (issue 27 item 2): the "paid" lane is a job queued
with sbatch by the lane's command, its ``status`` reads squeue, its ``cancel`` is scancel; real jobs, real
signals (SIGSTOP to slurmctld), never a mocked command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.errors import PaidLaneError
from fellows_fsm.lanes.command.config import LaneConfig
from fellows_fsm.lanes.command.lane import CommandLane
from fellows_fsm.lanes.handoff import HandoffFiles
from fellows_fsm.scheduler.port import JobSpec

from .cli_harness import ctld_pid
from .conftest import Cluster

# squeue's words onto the contract's: a job squeue does not show, or a squeue that fails, prints no word (exit 1).
STATUS = """\
s=$(squeue -h -t all --name="fsm-$FSM_DISPATCH_ID" -o %T | head -n 1)
case "$s" in
    PENDING|CONFIGURING) echo "queued $s" ;;
    RUNNING|COMPLETING) echo "running $s" ;;
    COMPLETED) echo succeeded ;;
    CANCELLED) echo cancelled ;;
    FAILED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) echo "failed $s" ;;
    *) echo "no job fsm-$FSM_DISPATCH_ID in squeue" >&2; exit 1 ;;
esac"""


def _lane(slurm: Cluster, **keys: float) -> CommandLane:
    """A command lane that queues the job with sbatch (the script and GPUs read from the environment), follows it
    with squeue, cancels it with scancel."""
    submit = (
        'exec sbatch --parsable --job-name="fsm-$FSM_DISPATCH_ID" --qos=high-eur --gres="gpu:$FSM_GPUS" '
        f'--chdir={slurm.jobs_dir} --output=/dev/null "$FSM_SCRIPT"'
    )
    settings = LaneConfig(
        name="paid",
        command=("sh", "-c", submit),
        status=("sh", "-c", STATUS),
        cancel=("scancel", "--name=fsm-{dispatch_id}"),
        **keys,
    )
    return CommandLane(settings)


def _script(slurm: Cluster, body: str) -> str:
    """A job script running ``body``, in the cluster's jobs dir."""
    path = Path(slurm.script(1))
    path.write_text(f"#!/bin/bash\n{body}\n")
    return str(path)


def _hand_off(lane: CommandLane, dispatch_id: str, spec: JobSpec, tmp_path: Path) -> None:
    """Run the lane's handoff command as the driver does (its own session, the job's values in its environment)
    and wait for it to exit 0."""
    files = HandoffFiles(tmp_path / "handoffs", dispatch_id)
    files.prepare()
    handoff = lane.start(dispatch_id, spec, files, now=time.time())
    for _ in range(600):
        result = handoff.result(time.time())
        if result is not None:
            assert result.ok, result.stderr
            return
        time.sleep(0.05)
    raise AssertionError(f"the handoff of {dispatch_id} did not end")


def _squeue_state(dispatch_id: str) -> str:
    """The state squeue itself shows for the dispatch's job (raw, not through the lane)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", f"--name=fsm-{dispatch_id}", "-o", "%T"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.strip()


@pytest.fixture
def stopped_ctld() -> Iterator[int]:
    """slurmctld's pid, continued at the end whatever the test did (a stopped controller is never left behind)."""
    pid = ctld_pid()
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def test_paid_jobs_on_a_real_cluster_are_followed_to_succeeded_and_to_failed(slurm: Cluster, tmp_path: Path) -> None:
    """Two dispatches handed to the lane (one job exits 0, one exits 3) are told queued or running, then
    succeeded and failed, by one look at both per poll, as squeue itself says; never could not tell."""
    lane = _lane(slurm)
    good, bad = "00000000c0de", "00000000bad0"
    specs = {
        good: JobSpec(name="good", script=_script(slurm, "sleep 3"), gpus=1),
        bad: JobSpec(name="bad", script=_script(slurm, "sleep 2; exit 3"), gpus=1),
    }
    for dispatch_id, spec in specs.items():
        _hand_off(lane, dispatch_id, spec, tmp_path)
    seen: dict[str, list[PaidStatus]] = {good: [], bad: []}
    ends = {PaidStatus.SUCCEEDED, PaidStatus.FAILED}

    def ended() -> bool:
        answer = lane.look([good, bad], specs=specs)
        for dispatch_id, look in answer.items():
            if not seen[dispatch_id] or seen[dispatch_id][-1] is not look.status:
                seen[dispatch_id].append(look.status)
        return all(seen[i][-1] in ends for i in seen)

    slurm.wait_for(ended, "both paid jobs to end", timeout=90, tick=0.2)
    assert seen[good][-1] is PaidStatus.SUCCEEDED, seen
    assert seen[bad][-1] is PaidStatus.FAILED, seen
    for statuses in seen.values():
        assert set(statuses[:-1]) <= {PaidStatus.QUEUED, PaidStatus.RUNNING}, seen
    assert PaidStatus.RUNNING in seen[good], seen
    assert (_squeue_state(good), _squeue_state(bad)) == ("COMPLETED", "FAILED")
    assert lane.look([bad], specs=specs)[bad].note == "FAILED"


def test_cancel_of_a_running_paid_job_scancels_it_and_a_second_cancel_finds_it_gone(
    slurm: Cluster, tmp_path: Path
) -> None:
    """``delete`` of a running paid job scancels it (squeue: CANCELLED, the next look: cancelled); a second delete
    of the job already gone exits 0 and raises nothing."""
    lane = _lane(slurm)
    dispatch_id = "0000000cafe0"
    spec = JobSpec(name="long", script=_script(slurm, "sleep 300"), gpus=1)
    _hand_off(lane, dispatch_id, spec, tmp_path)
    slurm.wait_for(
        lambda: lane.look([dispatch_id], specs={dispatch_id: spec})[dispatch_id].status is PaidStatus.RUNNING,
        "the paid job to run",
        timeout=60,
    )
    lane.delete(dispatch_id, spec=spec)
    slurm.wait_for(lambda: _squeue_state(dispatch_id) == "CANCELLED", "squeue to show it cancelled", timeout=60)
    assert lane.look([dispatch_id], specs={dispatch_id: spec})[dispatch_id].status is PaidStatus.CANCELLED
    lane.delete(dispatch_id, spec=spec)


def test_a_stopped_controller_is_could_not_tell_at_the_status_timeout_then_told_again(
    slurm: Cluster, tmp_path: Path, stopped_ctld: int
) -> None:
    """slurmctld stopped (SIGSTOP): the status's squeue hangs and is killed at status_timeout_seconds, so the look
    is could not tell (never an end) and a cancel raises one line; once it continues, the job is told running
    again and the cancel goes through."""
    lane = _lane(slurm, status_timeout_seconds=2.0, timeout_seconds=2.0)
    dispatch_id = "00000000d00d"
    spec = JobSpec(name="long", script=_script(slurm, "sleep 300"), gpus=1)
    specs = {dispatch_id: spec}
    _hand_off(lane, dispatch_id, spec, tmp_path)
    slurm.wait_for(
        lambda: lane.look([dispatch_id], specs=specs)[dispatch_id].status is PaidStatus.RUNNING, "it to run", 60
    )
    os.kill(stopped_ctld, signal.SIGSTOP)
    look = lane.look([dispatch_id], specs=specs)[dispatch_id]
    assert look.status is PaidStatus.UNKNOWN
    assert "timed out after 2 s" in look.note
    with pytest.raises(PaidLaneError, match=rf"^\[lanes\.paid\] cancel of dispatch {dispatch_id} exited 124: "):
        lane.delete(dispatch_id, spec=spec)
    os.kill(stopped_ctld, signal.SIGCONT)
    slurm.wait_for(
        lambda: lane.look([dispatch_id], specs=specs)[dispatch_id].status in (PaidStatus.RUNNING, PaidStatus.CANCELLED),
        "the controller to answer again",
        timeout=60,
    )
    lane.delete(dispatch_id, spec=spec)
    slurm.wait_for(lambda: _squeue_state(dispatch_id) == "CANCELLED", "squeue to show it cancelled", timeout=60)
