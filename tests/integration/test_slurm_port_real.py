"""SlurmScheduler on the real local SLURM: submit, observe, cancel-if-pending, token lookup, QoS change."""

from __future__ import annotations

import subprocess
import time

import pytest

from fellows_fsm.errors import QosRejected, SubmitRejected
from fellows_fsm.scheduler.port import JobSpec, Phase
from fellows_fsm.slurm.accounting import discover
from fellows_fsm.slurm.port import SlurmScheduler

from .conftest import Cluster

pytestmark = pytest.mark.slurm


def _wait_phase(slurm: Cluster, port: SlurmScheduler, job_id: str, phase: Phase) -> None:
    slurm.wait_for(lambda: port.observe([job_id])[job_id].phase is phase, f"job {job_id} to be {phase.name}")


def test_submit_and_observe(slurm: Cluster) -> None:
    """A submitted job carries its QoS and token in SLURM, and observe reports it started."""
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=1), qos="high-eur", token="fsm-port-r0")
    row = slurm.row(job_id)
    assert (row.qos, row.comment) == ("high-eur", "fsm-port-r0")
    _wait_phase(slurm, port, job_id, Phase.STARTED)
    obs = port.observe([job_id])[job_id]
    assert obs.state == "RUNNING"
    assert obs.qos == "high-eur"
    assert obs.start_time is not None


def test_hostile_script_path_runs(slurm: Cluster) -> None:
    """A script path with spaces, quotes, '$' and ';' reaches sbatch intact and the job runs."""
    folder = slurm.jobs_dir / "it hostile $x; 'q'"
    folder.mkdir(mode=0o777, exist_ok=True)
    script = folder / 'run "me" now.sh'
    script.write_text("#!/bin/bash\nsleep 60\n")
    port = slurm.port()
    job_id = port.submit(JobSpec("hostile", str(script), gpus=1, extra_args=slurm.job_args()), qos="low-eur", token="t")
    _wait_phase(slurm, port, job_id, Phase.STARTED)


def test_observe_many_jobs_in_one_squeue(slurm: Cluster) -> None:
    """Three jobs, one of them unknown to SLURM, cost one squeue (and one sacct for the unknown)."""
    port = slurm.port()
    ids = [port.submit(slurm.spec(gpus=1), qos="low-eur", token=f"fsm-many-r{i}") for i in range(2)]
    before = port.runner.calls.copy()
    seen = port.observe([*ids, "999999"])
    assert port.runner.calls["squeue"] - before["squeue"] == 1
    assert port.runner.calls["sacct"] - before["sacct"] == 1
    assert {seen[i].phase for i in ids} <= {Phase.PENDING, Phase.STARTED}
    assert seen["999999"].phase is Phase.UNKNOWN


def test_lone_unknown_id_is_unknown(slurm: Cluster) -> None:
    """squeue exits 1 for a lone unknown id: one squeue (the next poll asks again), one sacct, and the id is
    UNKNOWN, not finished."""
    port = slurm.port()
    assert port.observe(["888888"])["888888"].phase is Phase.UNKNOWN
    assert (port.runner.calls["squeue"], port.runner.calls["sacct"]) == (1, 1)


def test_cancel_if_pending_cancels_a_pending_job(slurm: Cluster) -> None:
    """A job pending on its QoS cap is cancelled and read back GONE; SLURM shows it CANCELLED, never run."""
    slurm.occupy("high-eur", 8, count=2)
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=8), qos="high-eur", token="fsm-cancel-r0")
    slurm.wait_for(lambda: slurm.row(job_id).reason == "QOSMaxGRESPerUser", "the cap reason")
    obs = port.cancel_if_pending([job_id])[job_id]
    assert obs.phase is Phase.GONE
    assert obs.state == "CANCELLED"
    row = slurm.row(job_id)
    assert row.state == "CANCELLED"
    assert not row.ever_ran


def test_cancel_if_pending_leaves_a_running_job_running(slurm: Cluster) -> None:
    """cancel_if_pending on a job that already started does nothing to it and reads back STARTED."""
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=1), qos="high-eur", token="fsm-late-r0")
    _wait_phase(slurm, port, job_id, Phase.STARTED)
    obs = port.cancel_if_pending([job_id])[job_id]
    assert obs.phase is Phase.STARTED
    assert slurm.row(job_id).state == "RUNNING"


def test_find_by_token(slurm: Cluster) -> None:
    """A job is found again by its dispatch token alone; an unused token finds nothing."""
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=1), qos="normal-eur", token="fsm-lost-r0")
    found = port.find_by_token("fsm-lost-r0")
    assert found is not None
    assert found.job_id == job_id
    assert found.qos == "normal-eur"
    assert port.find_by_token("fsm-never-submitted-r0") is None


def test_change_qos_moves_a_pending_job_and_refuses_a_running_one(slurm: Cluster) -> None:
    """scontrol moves a pending job to another QoS keeping its id; once running the answer is False."""
    slurm.occupy("high-eur", 8, count=2)
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=8), qos="high-eur", token="fsm-move-r0")
    slurm.wait_for(lambda: slurm.row(job_id).reason == "QOSMaxGRESPerUser", "the cap reason")
    assert port.change_qos(job_id, "normal-eur") is True
    assert slurm.row(job_id).qos == "normal-eur"
    _wait_phase(slurm, port, job_id, Phase.STARTED)
    assert port.change_qos(job_id, "low-eur") is False
    assert slurm.row(job_id).qos == "normal-eur"


def test_change_qos_to_an_unknown_qos_is_rejected(slurm: Cluster) -> None:
    """A QoS SLURM does not know is refused with SLURM's 'Invalid qos specification'."""
    slurm.occupy("high-eur", 8, count=2)
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=8), qos="high-eur", token="fsm-badq-r0")
    with pytest.raises(QosRejected, match="Invalid qos specification"):
        port.change_qos(job_id, "no-such-qos")
    assert slurm.row(job_id).qos == "high-eur"


def test_submit_ungranted_qos_is_qos_rejected(slurm: Cluster) -> None:
    """sbatch refuses the ungranted other-eur, and nothing is queued."""
    before = slurm.queue()
    with pytest.raises(QosRejected, match="Invalid qos specification") as info:
        slurm.port().submit(slurm.spec(gpus=1), qos="other-eur", token="fsm-other-r0")
    assert info.value.qos == "other-eur"
    assert slurm.queue() == before


def test_submit_bad_script_is_refused_with_slurms_message(slurm: Cluster) -> None:
    """A script without '#!' is refused with SLURM's own words naming the script; nothing is left queued."""
    bad = slurm.jobs_dir / "it-bad.sh"
    bad.write_text("sleep 1\n")
    before = slurm.queue()
    with pytest.raises(SubmitRejected) as info:
        slurm.port().submit(JobSpec("bad", str(bad), extra_args=slurm.job_args()), qos="high-eur", token="t")
    assert not isinstance(info.value, QosRejected)
    assert str(bad) in str(info.value)
    assert "does not look like a batch script" in str(info.value)
    assert slurm.queue() == before


def test_discover_reads_the_dev_grants(slurm: Cluster) -> None:
    """Discovery sees the four granted tiers with their limits and that other-eur is not granted."""
    port = slurm.port()
    grants = discover(port.runner, port.user)
    assert {"high-eur", "normal-eur", "low-eur", "dev-eur"} <= grants.granted
    assert "other-eur" not in grants.granted
    assert grants.qos["high-eur"].max_gpus_per_user == 16
    assert grants.qos["high-eur"].max_wall_seconds == 7 * 86_400
    assert grants.qos["low-eur"].max_gpus_per_user is None
    assert port.runner.calls["sacctmgr"] == 2


def test_deadline_reaches_the_controller(slurm: Cluster) -> None:
    """A rung deadline is handed to slurmctld (sbatch --deadline), so it survives our process."""
    port = slurm.port()
    job_id = port.submit(slurm.spec(gpus=1), qos="low-eur", token="t", deadline=time.time() + 3600)
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    assert "Deadline=N/A" not in shown
    assert "Deadline=" in shown
