# ruff: noqa: F811 - the fixtures imported from paid_batch.py are parameters here
"""The gcp-batch lane on the real local SLURM, its Batch API the loopback fake (lanes/gcp_batch/fake.py) in this test's
process: a job that parks out of every rung of the real ladder is handed to GCP Batch as ONE Batch job made from
the dispatch, by the real background driver, followed QUEUED -> RUNNING -> SUCCEEDED to its end with its cost; a
driver killed with SIGKILL after its create was made but before it heard of it leaves, once the next driver adopted
the handoff, still ONE Batch job; a cancel of the running paid job is ONE delete.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("google.cloud.batch_v1", reason="the [gcp] extra is not installed")

from fellows_fsm.core.vocab import HandoffStatus
from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi, Fault

from .cli_harness import cli, driver_pid, read_journal, submit_args
from .conftest import Cluster
from .paid_batch import PARENT, batch_config, fake, fill_node, state_of, stopped  # noqa: F401
from .settled import jobs_of

pytestmark = pytest.mark.slurm


def _handed_to_batch(slurm: Cluster, tmp_path: Path, fake: FakeBatchApi) -> tuple[Path, str]:
    """Fill the node, submit a job, and wait until its handoff to the fake ended; the config and dispatch id."""
    fill_node(slurm)
    config = batch_config(tmp_path, fake)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    slurm.wait_for(lambda: _handed(tmp_path, dispatch_id), "the handoff to GCP Batch", timeout=90, tick=0.25)
    return config, dispatch_id


def _handed(tmp_path: Path, dispatch_id: str) -> bool:
    """Has the dispatch's handoff (the create) ended, as the journal says?"""
    with read_journal(tmp_path) as journal:
        row = journal.handoff(dispatch_id)
    return row is not None and row.status != HandoffStatus.STARTED


@pytest.mark.usefixtures("stopped")
def test_a_job_that_parks_out_of_every_rung_becomes_one_batch_job_followed_to_its_cost(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """Parked out of high-eur, normal-eur and low-eur, the dispatch is handed to GCP Batch: one create, one job named
    fsm-<dispatch id> holding the job's script, 8 H100s and its 10-minute limit, no SLURM job of it left pending.
    The fake moves the job RUNNING, then SUCCEEDED after 1800 s of run: the dispatch goes PAID_QUEUED, PAID_RUNNING,
    PAID_DONE, and its paid run costs 8 GPUs x 0.5 h x 11.06."""
    _, dispatch_id = _handed_to_batch(slurm, tmp_path, fake)
    name = f"{PARENT}/jobs/fsm-{dispatch_id}"
    assert list(fake.jobs) == [name]
    (posted,) = fake.requests_of("create")
    body = posted.body or {}
    task = body["taskGroups"][0]["taskSpec"]
    assert task["maxRunDuration"] == "600s"
    assert "sleep" in task["runnables"][0]["script"]["text"]
    policy = body["allocationPolicy"]["instances"][0]["policy"]
    assert policy["machineType"] == "a3-highgpu-8g"
    assert policy["accelerators"] == [{"type": "nvidia-h100-80gb", "count": "8"}]
    with read_journal(tmp_path) as journal:
        handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert (handoff.status, handoff.stdout) == (HandoffStatus.DONE, name)
    assert not [job for job in jobs_of(slurm, dispatch_id) if job.state == "PENDING"]

    slurm.wait_for(lambda: state_of(tmp_path, dispatch_id) == "PAID_QUEUED", "PAID_QUEUED", timeout=30, tick=0.25)
    fake.move(name, "RUNNING")
    slurm.wait_for(lambda: state_of(tmp_path, dispatch_id) == "PAID_RUNNING", "PAID_RUNNING", timeout=30, tick=0.25)
    fake.move(name, "SUCCEEDED", run_seconds=1800.0)
    slurm.wait_for(lambda: state_of(tmp_path, dispatch_id) == "PAID_DONE", "PAID_DONE", timeout=30, tick=0.25)
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
    assert run is not None
    assert (run.lane, run.gpus, run.price_per_gpu_hour) == ("gcp", 8, 11.06)
    assert run.gpu_hours(time.time()) == pytest.approx(4.0)
    assert run.cost(time.time()) == pytest.approx(4.0 * 11.06)
    assert len(fake.jobs) == 1
    assert fake.requests_of("delete") == []


@pytest.mark.usefixtures("stopped")
def test_a_cancel_of_the_running_paid_job_is_one_delete(slurm: Cluster, tmp_path: Path, fake: FakeBatchApi) -> None:
    """``fellows-fsm cancel`` of a dispatch whose Batch job runs: WITHDRAWN, and the API gets exactly ONE delete
    (the job goes DELETION_IN_PROGRESS), not another at the polls after it."""
    config, dispatch_id = _handed_to_batch(slurm, tmp_path, fake)
    name = f"{PARENT}/jobs/fsm-{dispatch_id}"
    slurm.wait_for(lambda: state_of(tmp_path, dispatch_id) == "PAID_QUEUED", "PAID_QUEUED", timeout=30, tick=0.25)
    fake.move(name, "RUNNING")
    slurm.wait_for(lambda: state_of(tmp_path, dispatch_id) == "PAID_RUNNING", "PAID_RUNNING", timeout=30, tick=0.25)
    cancelled = cli(config, "cancel", dispatch_id)
    assert cancelled.returncode == 0, cancelled.stderr
    slurm.wait_for(lambda: len(fake.requests_of("delete")) == 1, "the delete", timeout=30, tick=0.25)
    assert state_of(tmp_path, dispatch_id) == "WITHDRAWN"
    assert fake.jobs[name]["status"]["state"] == "DELETION_IN_PROGRESS"
    time.sleep(2.0)  # four polls of 0.5 s: a second delete would have been asked by now
    assert len(fake.requests_of("delete")) == 1


@pytest.mark.usefixtures("stopped")
def test_a_driver_killed_between_the_create_and_its_answer_leaves_one_batch_job(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """The fake makes the job and holds the reply; the driver is killed with SIGKILL before it hears of it (the
    journal still says the create started). The next driver adopts the handoff and creates again by the same name:
    the API answers 409 with this dispatch's labels, so there is ONE Batch job, and the handoff ends with its name."""
    fill_node(slurm)
    fake.inject(Fault(method="create", hold_reply=True))
    config = batch_config(tmp_path, fake)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    slurm.wait_for(lambda: len(fake.jobs) == 1, "the create to be made", timeout=90, tick=0.1)
    first = driver_pid(tmp_path)
    os.kill(first, signal.SIGKILL)
    assert not _handed(tmp_path, dispatch_id)  # the driver died before it journaled the create's answer
    status = cli(config, "status", dispatch_id)  # any command that finds live work starts the next driver
    assert status.returncode == 0, status.stderr
    slurm.wait_for(lambda: _handed(tmp_path, dispatch_id), "the adopted handoff to end", timeout=90, tick=0.25)
    assert driver_pid(tmp_path) != first
    name = f"{PARENT}/jobs/fsm-{dispatch_id}"
    assert list(fake.jobs) == [name]
    assert len(fake.requests_of("create")) == 2
    with read_journal(tmp_path) as journal:
        handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert (handoff.status, handoff.stdout) == (HandoffStatus.DONE, name)
