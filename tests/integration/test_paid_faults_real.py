# ruff: noqa: F811 - the fixtures imported from paid_batch.py are parameters here
"""The paid lane's faults and the [budget] on the real local SLURM, the GCP Batch API the loopback fake
(lanes/gcp_batch/fake.py) in this test's process, through the real CLI and the real background driver: a budget that
holds a job pending on low-eur until a later submit raises it; ``on_budget = "refuse"`` (NO_BUDGET, exit 12); list calls
answered 500 or left hanging while a paid job runs; a job stuck QUEUED past ``queue_timeout_seconds``; a job
deleted outside; the driver stopped, resumed and killed while a paid job runs; a cancel while the create's reply is
held. Each test ends with every dispatch settled: one SLURM job that ran or one Batch job (at most one create per
dispatch in the fake's record), and none of its jobs pending on the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("google.cloud.batch_v1", reason="the [gcp] extra is not installed")

from fellows_fsm.core.vocab import HandoffStatus
from fellows_fsm.errors import LaneError, NoBudget
from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi, Fault

from .cli_harness import (
    cli,
    driver_pid,
    json_of,
    process_alive,
    read_journal,
    start_cli,
    submit_args,
)
from .conftest import Cluster
from .paid_batch import PARENT, batch_config, fake, fill_node, state_of, stopped  # noqa: F401
from .settled import handoff_files, jobs_of

pytestmark = pytest.mark.slurm


def _triggers(tmp_path: Path, dispatch_id: str) -> list[str]:
    """The dispatch's steps' triggers, oldest first."""
    with read_journal(tmp_path) as journal:
        return [str(s.trigger) for s in journal.steps(dispatch_id)]


def _handed(tmp_path: Path, dispatch_id: str) -> bool:
    """Has the dispatch's handoff (the create) ended, as the journal says?"""
    with read_journal(tmp_path) as journal:
        row = journal.handoff(dispatch_id)
    return row is not None and row.status != HandoffStatus.STARTED


def _run_status(tmp_path: Path, dispatch_id: str) -> str | None:
    """The dispatch's paid run's status in the journal."""
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
    return None if run is None else run.status


def _name(dispatch_id: str) -> str:
    """The dispatch's Batch job's full name."""
    return f"{PARENT}/jobs/fsm-{dispatch_id}"


def _creates(fake: FakeBatchApi, dispatch_id: str) -> int:
    """How many creates of the dispatch's Batch job the fake received."""
    return sum(1 for r in fake.requests_of("create") if r.query.get("jobId") == f"fsm-{dispatch_id}")


def _error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one error line of a command that exited ``code``; the only other lines it may print are the notice that
    it started the background driver and a job the [budget] can never pay for said at submit."""
    assert result.returncode == code, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("fellows-fsm: error: ")]
    assert len(errors) == 1, result.stderr
    others = [line for line in lines if line not in errors and "started the background driver" not in line]
    assert [line for line in others if "can never be handed to lane" not in line] == []
    return errors[0]


def _wait_state(slurm: Cluster, tmp_path: Path, dispatch_id: str, state: str, timeout: float = 30) -> None:
    slurm.wait_for(lambda: state_of(tmp_path, dispatch_id) == state, state, timeout=timeout, tick=0.25)


def _submit(slurm: Cluster, config: Path) -> str:
    """Fill the node and submit a job with --detach; its dispatch id."""
    fill_node(slurm)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


def _running_on_batch(slurm: Cluster, tmp_path: Path, fake: FakeBatchApi, config: Path) -> str:
    """A job parked out of every rung, its Batch job moved RUNNING by the fake and seen so: its dispatch id."""
    dispatch_id = _submit(slurm, config)
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_QUEUED", timeout=90)
    fake.move(_name(dispatch_id), "RUNNING")
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_RUNNING")
    return dispatch_id


def _settled(fake: FakeBatchApi, slurm: Cluster, paid: Sequence[str], free: Sequence[str] = ()) -> None:
    """Each of ``paid``: no SLURM job of it ever ran, exactly one create of its Batch job; each of ``free`` (ended
    before any handoff): no job ran, no create. None of their jobs is left pending on the cluster."""
    for dispatch_id, creates in [*((d, 1) for d in paid), *((d, 0) for d in free)]:
        jobs = jobs_of(slurm, dispatch_id)
        assert not [j for j in jobs if j.state == "PENDING"], f"{dispatch_id}: a job is left pending: {jobs}"
        assert not [j for j in jobs if j.ever_ran], f"{dispatch_id}: a SLURM job of it ran: {jobs}"
        assert _creates(fake, dispatch_id) == creates, f"{dispatch_id}: {fake.requests_of('create')}"


# ----------------------------------------------------------------------------------------------- the budget
@pytest.mark.usefixtures("stopped")
def test_a_budget_holds_a_job_pending_on_low_eur_until_a_later_submit_raises_it(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """With 1 paid GPU-hour a day, a job whose worst case is 8 GPUs x 10 min walks high-eur and normal-eur and waits
    PENDING on low-eur: ``status`` shows the budget's reason, ``history`` its budget_wait step, nothing is created on
    Batch. A later submit (of another job) with its config raised to 10 reaches the running driver: the first job
    becomes ONE Batch job, its low-eur job is cancelled, and the second is handed off too."""
    config = batch_config(tmp_path, fake, budget="paid_gpu_hours_per_day = 1\n")
    first = _submit(slurm, config)
    slurm.wait_for(lambda: "budget_wait" in _triggers(tmp_path, first), "the budget_wait step", timeout=90, tick=0.25)
    time.sleep(2.0)  # four polls of 0.5 s: a create would have been made by now
    (pending,) = [j for j in jobs_of(slurm, first) if j.state == "PENDING"]
    assert pending.qos == "low-eur"
    assert fake.requests == []
    status = cli(config, "status", "--json", first)
    assert status.returncode == 0, status.stderr
    (shown,) = json.loads(status.stdout)
    assert (shown["state"], shown["outcome"]) == ("RESUBMITTED(low-eur)", "budget")
    history = cli(config, "history", first)
    assert history.returncode == 0, history.stderr
    assert "budget_wait" in history.stdout, history.stdout
    steps = json_of(cli(config, "history", "--json", first))
    (waited,) = [s for s in steps if s["trigger"] == "budget_wait"]
    assert waited["note"] == "budget: 0 of 1 paid GPU-hours used today; this job's limit needs 1.3"

    raised = batch_config(tmp_path, fake, budget="paid_gpu_hours_per_day = 10\n")  # the same file: its [budget]
    submitted = cli(raised, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    second = submitted.stdout.strip()
    slurm.wait_for(lambda: _handed(tmp_path, first), "the first job's handoff", timeout=60, tick=0.25)
    _wait_state(slurm, tmp_path, first, "PAID_QUEUED")
    _wait_state(slurm, tmp_path, second, "PAID_QUEUED", timeout=90)
    assert sorted(fake.jobs) == sorted([_name(first), _name(second)])
    _settled(fake, slurm, [first, second])


@pytest.mark.usefixtures("stopped")
def test_status_shows_why_a_job_waits_on_the_budget(slurm: Cluster, tmp_path: Path, fake: FakeBatchApi) -> None:
    """``status DISPATCH`` of a job held back by the budget says why, in the words of its budget_wait step."""
    config = batch_config(tmp_path, fake, budget="paid_gpu_hours_per_day = 1\n")
    dispatch_id = _submit(slurm, config)
    slurm.wait_for(
        lambda: "budget_wait" in _triggers(tmp_path, dispatch_id), "the budget_wait step", timeout=90, tick=0.25
    )
    status = cli(config, "status", dispatch_id)
    shown = cli(config, "status", "--json", dispatch_id)
    cli(config, "cancel", dispatch_id)
    assert status.returncode == 0, status.stderr
    assert "budget" in status.stdout, status.stdout
    assert "paid GPU-hours" in json.dumps(json_of(shown)), shown.stdout


@pytest.mark.usefixtures("stopped")
def test_on_budget_refuse_ends_no_budget_with_exit_12_and_nothing_asked_of_batch(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """With ``on_budget = "refuse"`` and a budget below the job's worst case, ``submit`` exits 12 (NoBudget) in one
    line, the dispatch ends NO_BUDGET, its low-eur job is gone from squeue, and the fake got no request but lists."""
    config = batch_config(tmp_path, fake, budget='paid_gpu_hours_per_day = 1\non_budget = "refuse"\n')
    fill_node(slurm)
    submitted = cli(config, *submit_args(slurm))
    line = _error_line(submitted, NoBudget.exit_code)
    assert "budget" in line
    assert "it can never be handed to lane gcp" in submitted.stderr  # 1 GPU-hour a day: told at submit
    with read_journal(tmp_path) as journal:
        (row,) = journal.dispatches()
    assert (row.state, row.outcome) == ("NO_BUDGET", "no-budget")
    assert {j.state for j in jobs_of(slurm, row.id)} <= {"CANCELLED"}
    assert {r.method for r in fake.requests} <= {"list"}
    _settled(fake, slurm, [], [row.id])


# ----------------------------------------------------------------------------------------------- the API's faults
@pytest.mark.usefixtures("stopped")
def test_list_calls_answered_500_or_timing_out_never_end_a_running_paid_job(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """Three list calls answered 500 and two left hanging past the client's timeout while the Batch job runs: the
    dispatch stays PAID_RUNNING (no step is journaled for them), then is followed to PAID_DONE; one Batch job."""
    config = batch_config(tmp_path, fake)
    dispatch_id = _running_on_batch(slurm, tmp_path, fake, config)
    before = fake.calls["list"]
    steps = _triggers(tmp_path, dispatch_id)
    fake.inject(*[Fault(method="list", status=500)] * 3, *[Fault(method="list", hang=True)] * 2)
    slurm.wait_for(lambda: fake.calls["list"] >= before + 6, "the faulty lists and one after", timeout=90, tick=0.25)
    assert state_of(tmp_path, dispatch_id) == "PAID_RUNNING"
    assert _triggers(tmp_path, dispatch_id) == steps
    assert process_alive(driver_pid(tmp_path))
    log = (tmp_path / "state" / "driver.log").read_text(encoding="utf-8")
    said = [line for line in log.splitlines() if "could not tell where its paid jobs stand" in line]
    assert len(said) == 5, log
    assert len([line for line in said if "no answer in time" in line]) == 2, said
    fake.move(_name(dispatch_id), "SUCCEEDED", run_seconds=900.0)
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_DONE")
    assert _triggers(tmp_path, dispatch_id) == [*steps, "paid_end"]
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
    assert run is not None
    assert run.gpu_hours(time.time()) == pytest.approx(2.0)
    assert handoff_files(tmp_path, dispatch_id) == []  # final, its create's answer journaled: no file kept
    _settled(fake, slurm, [dispatch_id])


@pytest.mark.usefixtures("stopped")
def test_a_running_paid_job_its_list_cannot_see_is_deleted_by_name_once_its_limit_passes(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """Every list call answered 500 while a 1-minute Batch job runs: once its limit (and two polls of grace) has
    passed since it was seen running, it is deleted by name anyway: ONE delete, PAID_FAILED paid-over-its-limit,
    its last step saying the lane could not be looked at; no second Batch job."""
    config = batch_config(tmp_path, fake)
    fill_node(slurm)
    args = ["submit", "--detach", "--gpus", "8", "--time", "1:00", slurm.script(300), "--", *slurm.job_args()]
    submitted = cli(config, *args)
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_QUEUED", timeout=90)
    fake.move(_name(dispatch_id), "RUNNING")
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_RUNNING")
    fake.inject(*[Fault(method="list", status=500)] * 1000)
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_FAILED", timeout=150)
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        note = journal.steps(dispatch_id)[-1].note
        run = journal.paid_run(dispatch_id)
    assert row is not None
    assert run is not None
    assert row.outcome == "paid-over-its-limit"
    assert "could not be looked at" in note
    assert "deleted by name" in note
    slurm.wait_for(lambda: _run_status(tmp_path, dispatch_id) == "cancelled", "the delete taken", timeout=30)
    (deleted,) = fake.requests_of("delete")
    assert deleted.path == f"/v1/{_name(dispatch_id)}"
    assert fake.jobs[_name(dispatch_id)]["status"]["state"] == "DELETION_IN_PROGRESS"
    _settled(fake, slurm, [dispatch_id])


@pytest.mark.usefixtures("stopped")
def test_a_paid_job_stuck_queued_past_its_timeout_is_deleted_once_and_fails_the_submit(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """A Batch job left QUEUED past ``queue_timeout_seconds = 3``: ONE delete, PAID_FAILED (paid-stuck-queued) with
    the reason in its last step, ``submit`` exits with the LaneError code in one line, and no second Batch job."""
    config = batch_config(tmp_path, fake, lane="queue_timeout_seconds = 3\n")
    fill_node(slurm)
    submitted = cli(config, *submit_args(slurm))
    line = _error_line(submitted, LaneError.exit_code)
    assert "queue_timeout_seconds" in line
    with read_journal(tmp_path) as journal:
        (row,) = journal.dispatches()
        note = journal.steps(row.id)[-1].note
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-stuck-queued")
    assert "past its queue_timeout_seconds = 3" in note
    time.sleep(2.0)  # four polls of 0.5 s: a second delete or create would have been asked by now
    (deleted,) = fake.requests_of("delete")
    assert deleted.path == f"/v1/{_name(row.id)}"
    assert fake.jobs[_name(row.id)]["status"]["state"] == "DELETION_IN_PROGRESS"
    _settled(fake, slurm, [row.id])


@pytest.mark.usefixtures("stopped")
def test_a_paid_job_deleted_outside_is_withdrawn_and_never_made_again(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """The Batch job of a running paid dispatch disappears (someone else deleted it): WITHDRAWN with
    withdrawn-outside, and no second create or any delete at the polls after it."""
    config = batch_config(tmp_path, fake)
    dispatch_id = _running_on_batch(slurm, tmp_path, fake, config)
    fake.remove(_name(dispatch_id))
    _wait_state(slurm, tmp_path, dispatch_id, "WITHDRAWN")
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        note = journal.steps(dispatch_id)[-1].note
    assert row is not None
    assert row.outcome == "withdrawn-outside"
    assert "outside fellows-fsm" in note
    time.sleep(2.0)  # four polls of 0.5 s
    assert fake.jobs == {}
    assert fake.requests_of("delete") == []
    _settled(fake, slurm, [dispatch_id])


# ----------------------------------------------------------------------------------------------- the driver's faults
@pytest.mark.usefixtures("stopped")
def test_a_driver_stopped_while_its_paid_job_ends_counts_the_run_once_resumed(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """The background driver SIGSTOPped while the Batch job runs; the fake moves it SUCCEEDED (no runDuration);
    SIGCONT: PAID_DONE, its GPU-hours counted from the followed run, from the look that first saw it running to
    the look that saw it ended, so at least the time it really ran and never less."""
    config = batch_config(tmp_path, fake)
    dispatch_id = _running_on_batch(slurm, tmp_path, fake, config)
    pid = driver_pid(tmp_path)
    time.sleep(1.0)
    os.kill(pid, signal.SIGSTOP)
    moved_at = time.time()
    fake.move(_name(dispatch_id), "SUCCEEDED")
    time.sleep(2.0)
    assert state_of(tmp_path, dispatch_id) == "PAID_RUNNING"
    resumed_at = time.time()
    os.kill(pid, signal.SIGCONT)
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_DONE")
    assert driver_pid(tmp_path) == pid
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
    assert run is not None
    assert run.running_at is not None
    assert run.ended_at is not None
    assert run.ended_at >= resumed_at  # seen ended only once the driver ran again
    assert run.gpu_hours(time.time()) == pytest.approx(8 * (run.ended_at - run.running_at) / 3600)
    assert run.gpu_hours(time.time()) >= 8 * (moved_at - run.running_at) / 3600
    _settled(fake, slurm, [dispatch_id])


@pytest.mark.usefixtures("stopped")
def test_a_driver_killed_while_its_paid_job_runs_is_followed_on_by_the_next(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """SIGKILL of the background driver while the Batch job runs; ``status`` starts the next driver, which
    follows the job to PAID_DONE with the lane's run time: one Batch job, no delete."""
    config = batch_config(tmp_path, fake)
    dispatch_id = _running_on_batch(slurm, tmp_path, fake, config)
    first = driver_pid(tmp_path)
    os.kill(first, signal.SIGKILL)
    slurm.wait_for(lambda: not process_alive(first), "the killed driver to die", timeout=10)
    status = cli(config, "status", dispatch_id)
    assert status.returncode == 0, status.stderr
    slurm.wait_for(lambda: driver_pid(tmp_path) != first, "the next driver", timeout=30, tick=0.25)
    fake.move(_name(dispatch_id), "SUCCEEDED", run_seconds=450.0)
    _wait_state(slurm, tmp_path, dispatch_id, "PAID_DONE")
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
    assert run is not None
    assert run.gpu_hours(time.time()) == pytest.approx(1.0)
    assert fake.requests_of("delete") == []
    _settled(fake, slurm, [dispatch_id])


@pytest.mark.usefixtures("stopped")
def test_a_cancel_while_the_create_is_held_waits_for_the_job_then_deletes_it_once(
    slurm: Cluster, tmp_path: Path, fake: FakeBatchApi
) -> None:
    """The fake makes the Batch job and holds the create's reply; a ``cancel`` meanwhile is not answered while the
    handoff is under way, and once the lane has the job the cancel exits 0, the dispatch is WITHDRAWN and the job
    is deleted exactly once."""
    fake.inject(Fault(method="create", hold_reply=True))
    config = batch_config(tmp_path, fake)
    dispatch_id = _submit(slurm, config)
    slurm.wait_for(lambda: len(fake.jobs) == 1, "the create to be made", timeout=90, tick=0.1)
    cancel = start_cli(config, "cancel", dispatch_id)
    try:
        time.sleep(2.0)
        assert cancel.poll() is None  # the reply is still held: the lane does not have the job yet
        assert state_of(tmp_path, dispatch_id) == "HANDING_OFF"
        assert fake.requests_of("delete") == []
        _, err = cancel.communicate(timeout=90)
    finally:
        if cancel.poll() is None:
            cancel.kill()
            cancel.communicate()
    assert cancel.returncode == 0, err
    assert state_of(tmp_path, dispatch_id) == "WITHDRAWN"
    with read_journal(tmp_path) as journal:
        handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert (handoff.status, handoff.stdout) == (HandoffStatus.DONE, _name(dispatch_id))  # the lane had the job
    slurm.wait_for(lambda: len(fake.requests_of("delete")) == 1, "the delete", timeout=30, tick=0.25)
    time.sleep(2.0)  # four polls of 0.5 s: a second delete would have been asked by now
    assert len(fake.requests_of("delete")) == 1
    assert fake.jobs[_name(dispatch_id)]["status"]["state"] == "DELETION_IN_PROGRESS"
    assert list(fake.jobs) == [_name(dispatch_id)]
    # The create whose reply was lost is tried again by its name (answered 409: this dispatch's job), so the
    # record may hold two creates for ONE Batch job.
    assert 1 <= _creates(fake, dispatch_id) <= 2
    jobs = jobs_of(slurm, dispatch_id)
    assert not [j for j in jobs if j.state == "PENDING" or j.ever_ran], jobs
