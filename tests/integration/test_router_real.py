"""The router on the real local SLURM: kill -9 at each dangerous point, then a restart; 200 dispatches.

Every assertion reads real squeue state (job ids, QoS, whether a job ever ran) and the journal.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import attrs
import pytest

from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.effects import Step
from fellows_fsm.driver.reports import TickReport
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec
from tests.integration.conftest import REPO, Cluster, QueueRow
from tests.integration.settled import walked_out

pytestmark = pytest.mark.slurm

HARNESS = Path(__file__).with_name("router_harness.py")


def harness(state_dir: Path, *args: str, kill_in_handoff: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the router harness as its own process (so a kill -9 is a real one)."""
    env = {**os.environ, "HARNESS_KILL_IN_HANDOFF": "1" if kill_in_handoff else "0"}
    env["PYTHONPATH"] = str(REPO / "src")
    return subprocess.run(
        [sys.executable, str(HARNESS), str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def spec_json(spec: JobSpec) -> str:
    """A JobSpec as the harness takes it."""
    return json.dumps(attrs.asdict(spec))


def only_dispatch(state_dir: Path) -> str:
    """The id of the one dispatch in the journal."""
    journal = Journal(state_dir / "journal.sqlite3")
    rows = journal.dispatches()
    journal.close()
    assert len(rows) == 1, rows
    return rows[0].id


def journal_of(state_dir: Path) -> Journal:
    """The journal, opened to read (no driver lock)."""
    return Journal(state_dir / "journal.sqlite3")


def jobs_of(cluster: Cluster, dispatch_id: str) -> list[QueueRow]:
    """Every job on the cluster tagged with one of the dispatch's rung tokens, oldest first."""
    prefix = f"fsm-{dispatch_id}-r"
    return sorted((r for r in cluster.queue() if r.comment.startswith(prefix)), key=lambda r: int(r.job_id))


def assert_history_complete(steps: list[Step], final: str) -> None:
    """The journaled steps start with the submit, chain state to state, and end in ``final``."""
    assert steps, "no steps journaled"
    assert (steps[0].trigger, steps[0].source) == ("submit", "")
    for before, after in itertools.pairwise(steps):
        assert after.source == before.dest, (before, after)
    assert steps[-1].dest == final


@pytest.mark.parametrize("point", ["before-sbatch", "after-sbatch"])
def test_kill_around_the_first_sbatch_then_restart(slurm: Cluster, tmp_path: Path, point: str) -> None:
    """kill -9 right before or right after the first sbatch: after a restart exactly one job ever runs."""
    spec = slurm.spec(gpus=8)
    # Caps of 8 s: the window counts from the journaled submit, and the restart (a new Python process) must land in
    # it on a busy machine too; the empty cluster starts the job at once, so no test waits them out.
    first = harness(tmp_path, "dispatch", spec_json(spec), "--crash-at", point, "--cap", "8")
    assert first.returncode == -9, first.stderr
    dispatch_id = only_dispatch(tmp_path)
    queued = jobs_of(slurm, dispatch_id)
    journal = journal_of(tmp_path)
    assert [s.trigger for s in journal.steps(dispatch_id)] == ["submit"]
    assert journal.jobs(dispatch_id) == []  # the job id never reached the journal
    assert len(queued) == (0 if point == "before-sbatch" else 1)

    second = harness(tmp_path, "resume", "--cap", "8")
    assert second.returncode == 0, second.stderr
    handle = journal.dispatch(dispatch_id)
    assert handle is not None
    assert (handle.state, handle.qos, handle.final) == ("RUNNING", "high-eur", False)  # followed to its end
    jobs = jobs_of(slurm, dispatch_id)
    assert len(jobs) == 1, jobs
    assert (jobs[0].state, jobs[0].qos, jobs[0].job_id) == ("RUNNING", "high-eur", handle.job_id)
    if point == "after-sbatch":
        assert jobs[0].job_id == queued[0].job_id  # found again by its token, not submitted twice
    assert_history_complete(journal.steps(dispatch_id), "RUNNING")
    journal.close()


def test_kill_between_cancel_and_resubmit_then_restart(slurm: Cluster, tmp_path: Path) -> None:
    """kill -9 after the high-eur job is cancelled but before the resubmit: the restart runs it on normal-eur."""
    slurm.occupy("high-eur", gpus=8, count=2)
    spec = slurm.spec(gpus=8)
    # Caps of 6 s: the restart (a new Python process) and its sbatch must land in normal-eur's window on a busy
    # machine too.
    first = harness(tmp_path, "dispatch", spec_json(spec), "--crash-at", "after-cancel", "--cap", "6")
    assert first.returncode == -9, first.stderr
    dispatch_id = only_dispatch(tmp_path)
    jobs = jobs_of(slurm, dispatch_id)
    assert [(j.qos, j.state, j.ever_ran) for j in jobs] == [("high-eur", "CANCELLED", False)]

    second = harness(tmp_path, "resume", "--cap", "6")
    assert second.returncode == 0, second.stderr
    jobs = jobs_of(slurm, dispatch_id)
    assert [(j.qos, j.state) for j in jobs] == [("high-eur", "CANCELLED"), ("normal-eur", "RUNNING")]
    assert [j.ever_ran for j in jobs] == [False, True]
    journal = journal_of(tmp_path)
    steps = journal.steps(dispatch_id)
    triggers = [s.trigger for s in steps]
    # A restart that comes late (a loaded machine: CI saw it) first records the time nobody watched as a pause and a
    # resume (driver/cadence.py: ``unwatched``); the walk is the same either way.
    if triggers[2:4] == ["pause", "resume"]:
        del triggers[2:4]
    assert triggers == ["submit", "park", "cancel", "resubmit", "start"]
    assert steps[1].reason == "QOSMaxGRESPerUser"
    assert_history_complete(steps, "RUNNING")
    journal.close()


def test_kill_during_the_gcp_handoff_then_restart(slurm: Cluster, tmp_path: Path) -> None:
    """kill -9 while the GCP command runs: after a restart the handoff is recorded once, never repeated."""
    spec = slurm.spec(gpus=8, extra=("--time=15-00:00:00",))  # over every rung's MaxWall: none can start it
    first = harness(tmp_path, "dispatch", spec_json(spec), "--cap", "1", kill_in_handoff=True)
    assert first.returncode == -9, first.stderr
    dispatch_id = only_dispatch(tmp_path)
    ledger = tmp_path / "gcp.ledger"
    assert ledger.read_text().split() == [dispatch_id]
    journal = journal_of(tmp_path)
    handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert handoff.status == "started"

    second = harness(tmp_path, "resume", "--cap", "1")
    assert second.returncode == 0, second.stderr
    assert ledger.read_text().split() == [dispatch_id]  # exactly one handoff
    handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert (handoff.status, handoff.exit_status) == ("done", 0)
    row = journal.dispatch(dispatch_id)
    assert row is not None
    assert (row.state, row.outcome, row.final) == ("HANDED_OFF", "handed-off", True)
    jobs = jobs_of(slurm, dispatch_id)
    assert [j.qos for j in jobs] == ["high-eur", "normal-eur", "low-eur"]
    assert all(j.state == "CANCELLED" and not j.ever_ran for j in jobs)
    assert_history_complete(journal.steps(dispatch_id), "HANDED_OFF")
    journal.close()


def test_200_dispatches_one_squeue_per_tick(slurm: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """200 one-GPU dispatches are driven with exactly one squeue per tick and end as the caps dictate."""
    # Caps of 8 s: 200 sbatch calls in a row must leave the first rung's window room for SLURM to start its jobs on
    # a busy machine too (with 3 s, none had started on high-eur when its windows closed).
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=8, poll_interval_seconds=0.5),
        router=RouterConfig(order=("fellows",), controller_deadline=False, max_rung_changes_per_tick=50),
        state_dir=tmp_path,
    )
    port = slurm.port()
    journal = Journal(config.journal_path)
    request.addfinalizer(journal.close)  # closed even when an assertion fails (an open one warns later on)
    router = Router(config, port, journal).start()
    spec = slurm.spec(gpus=1)
    ids = [router.dispatch(spec).dispatch_id for _ in range(200)]
    squeue_per_tick: list[int] = []
    seen = [port.runner.calls["squeue"]]

    def count(report: TickReport) -> None:
        squeue_per_tick.append(port.runner.calls["squeue"] - seen[0])
        seen[0] = port.runner.calls["squeue"]

    router.run(on_tick=count, until=lambda _: walked_out(router))  # a running job is followed on: not waited for
    assert walked_out(router), "dispatches still walking"
    assert set(squeue_per_tick) == {1}, Counter(squeue_per_tick)
    outcomes = Counter((h.state, h.qos) for h in (router.handle(i) for i in ids))
    # high-eur and normal-eur each cap this user at 16 GPUs; low-eur has no cap: the node's 64 GPUs fill.
    assert outcomes[("RUNNING", "high-eur")] == 16
    assert outcomes[("RUNNING", "normal-eur")] == 16
    assert outcomes[("RUNNING", "low-eur")] == 32
    assert outcomes[("NO_LANE_LEFT", "low-eur")] == 200 - 64  # order has no lane after fellows
    running = [r for r in slurm.queue() if r.state == "RUNNING" and r.comment.startswith("fsm-")]
    assert len(running) == 64
    pending = [r for r in slurm.queue() if r.state == "PENDING" and r.comment.startswith("fsm-")]
    assert pending == []


def test_in_place_rung_change_on_real_slurm(slurm: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """change_rung='in-place' moves the parked job to normal-eur with scontrol: same job id, and it runs."""
    slurm.occupy("high-eur", gpus=8, count=2)
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=2, poll_interval_seconds=0.3),
        router=RouterConfig(order=("fellows",), change_rung="in-place"),
        state_dir=tmp_path,
    )
    port = slurm.port()
    journal = Journal(config.journal_path)
    request.addfinalizer(journal.close)  # closed even when an assertion fails (an open one warns later on)
    router = Router(config, port, journal).start()
    handle = router.dispatch(slurm.spec(gpus=8, time_limit=600))
    router.run(until=lambda _: walked_out(router))  # a running job is followed on: not waited for
    final = router.handle(handle.dispatch_id)
    assert (final.state, final.qos, final.slurm_job_id) == ("RUNNING", "normal-eur", handle.slurm_job_id)
    jobs = jobs_of(slurm, handle.dispatch_id)
    assert [(j.job_id, j.qos, j.state) for j in jobs] == [(handle.slurm_job_id, "normal-eur", "RUNNING")]
    assert port.runner.calls["scancel"] == 0
    assert [s.trigger for s in router.journal.steps(handle.dispatch_id)] == ["submit", "park", "move", "start"]
