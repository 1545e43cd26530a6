"""The fellows-fsm command line as a user runs it (a subprocess) against the real local SLURM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .cli_harness import FELLOWS_FSM, cli, json_of, ledger_config, one_error, start_cli, submit_args, watch_walked
from .conftest import Cluster, QueueRow

pytestmark = pytest.mark.slurm

CAP = 3.0


def _config(tmp_path: Path, cap: float = CAP) -> Path:
    """A config with short park caps, a quick poll, and a gcp lane that only writes a ledger."""
    # The plain ladder (park_early off): these tests wait on a capped high-eur on purpose.
    return ledger_config(tmp_path, cap=cap, poll=0.5)


def _jobs(slurm: Cluster, dispatch_id: str) -> list[QueueRow]:
    """The jobs whose comment carries the dispatch's rung tokens, oldest first."""
    prefix = f"fsm-{dispatch_id}-r"
    return sorted((r for r in slurm.queue() if r.comment.startswith(prefix)), key=lambda r: int(r.job_id))


def test_submit_walks_a_full_high_eur_to_normal_eur(slurm: Cluster, tmp_path: Path) -> None:
    """With 16 high-eur GPUs of the user running, submit parks on QOSMaxGRESPerUser and runs on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    out = json_of(cli(config, *submit_args(slurm, "--json"), timeout=60))

    assert (out["state"], out["lane"], out["qos"]) == ("RUNNING", "fellows", "normal-eur")
    jobs = _jobs(slurm, out["dispatch_id"])
    assert [(j.qos, j.state, j.ever_ran) for j in jobs] == [
        ("high-eur", "CANCELLED", False),
        ("normal-eur", "RUNNING", True),
    ]
    assert jobs[1].job_id == out["slurm_job_id"]

    history = json_of(cli(config, "history", out["dispatch_id"], "--json", timeout=60))
    assert [(h["trigger"], h["to"]) for h in history] == [
        ("submit", "SUBMITTED(high-eur)"),
        ("park", "PARKED"),
        ("cancel", "CANCELLED"),
        ("resubmit", "RESUBMITTED(normal-eur)"),
        ("start", "RUNNING"),
    ]
    assert history[1]["reason"] == "QOSMaxGRESPerUser"
    assert [h["slurm_job_id"] for h in history][::3] == [jobs[0].job_id, jobs[1].job_id]
    assert not (tmp_path / "gcp.ledger").exists()


def test_detached_dispatch_is_driven_by_watch(slurm: Cluster, tmp_path: Path) -> None:
    """submit --detach returns once queued, printing the id alone; status reads it; the background driver walks it
    and watch follows it until it runs. (On the empty cluster the driver may already have started it by the time
    status reads it: the state is SUBMITTED or RUNNING, where it was SUBMITTED until watch drove it.)"""
    config = _config(tmp_path)
    detached = cli(config, *submit_args(slurm, "--detach"), timeout=60)
    assert detached.returncode == 0, detached.stderr
    dispatch_id = detached.stdout.strip()
    [row] = json_of(cli(config, "status", dispatch_id, "--json", timeout=60))
    assert row["state"] in ("SUBMITTED(high-eur)", "RUNNING")
    assert row["slurm_job_id"] is not None

    done = watch_walked(slurm, config, tmp_path, dispatch_id, timeout=60)  # (watch itself follows it to its end)
    assert (done["dispatch_id"], done["state"], done["qos"]) == (dispatch_id, "RUNNING", "high-eur")
    assert slurm.row(done["slurm_job_id"]).state == "RUNNING"


def test_watch_finishes_the_walk_of_a_killed_submit(slurm: Cluster, tmp_path: Path) -> None:
    """A submit killed (SIGKILL) while parked on high-eur leaves a journal that watch finishes, one job running."""
    slurm.occupy("high-eur", 8, count=2)
    # A cap long enough that the status polls below (a process each) and watch's start fit in it on a busy machine.
    config = _config(tmp_path, cap=12.0)
    proc = start_cli(config, *submit_args(slurm, "--json"))
    try:
        rows: list[dict[str, Any]] = []

        def pending_on_high_eur() -> bool:
            result = cli(config, "status", "--json", timeout=60)
            rows[:] = json.loads(result.stdout) if result.returncode == 0 else []
            return bool(rows) and rows[0]["slurm_job_id"] is not None

        slurm.wait_for(pending_on_high_eur, "the dispatch to be queued on high-eur", timeout=20, tick=0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    dispatch_id = rows[0]["dispatch_id"]
    assert rows[0]["state"] == "SUBMITTED(high-eur)"

    done = watch_walked(slurm, config, tmp_path, dispatch_id, timeout=60)  # (watch itself follows it to its end)
    assert (done["dispatch_id"], done["state"], done["qos"]) == (dispatch_id, "RUNNING", "normal-eur")
    live = [j for j in _jobs(slurm, dispatch_id) if j.state in ("PENDING", "RUNNING")]
    assert [(j.qos, j.state) for j in live] == [("normal-eur", "RUNNING")]


def test_cancel_withdraws_a_pending_dispatch(slurm: Cluster, tmp_path: Path) -> None:
    """cancel scancels the pinned, pending job on the cluster and marks the dispatch withdrawn."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    detached = cli(config, *submit_args(slurm, "--detach", "--pin", "fellows"), timeout=60)
    assert detached.returncode == 0, detached.stderr
    dispatch_id = detached.stdout.strip()
    [row] = json_of(cli(config, "status", dispatch_id, "--json", timeout=60))
    job_id = row["slurm_job_id"]
    slurm.wait_for(lambda: slurm.row(job_id).reason == "QOSMaxGRESPerUser", "the job to pend on its cap")

    cancelled = cli(config, "cancel", dispatch_id, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    slurm.wait_for(lambda: slurm.row(job_id).state == "CANCELLED", f"job {job_id} to be cancelled")
    [row] = json_of(cli(config, "status", dispatch_id, "--json", timeout=60))
    assert (row["state"], row["final"], row["outcome"]) == ("WITHDRAWN", True, "withdrawn")


def test_ladder_reads_the_real_grants(slurm: Cluster, tmp_path: Path) -> None:
    """ladder --json shows the dev cluster's QoS limits and skips rungs a 32-GPU job can never fit."""
    out = json_of(cli(_config(tmp_path), "ladder", "--json", "--gpus", "32", timeout=60))
    rungs = {r["qos"]: r for r in out["ladder"]}
    assert rungs["high-eur"]["max_gpus_per_user"] == 16
    assert not rungs["high-eur"]["usable"]
    assert not rungs["normal-eur"]["usable"]
    assert rungs["low-eur"]["usable"]
    assert any("skipping high-eur" in w for w in out["warnings"])


def test_demo_walks_the_ladder_and_cleans_up(slurm: Cluster) -> None:
    """`fellows-fsm demo` parks on high-eur (QOSMaxGRESPerUser), runs on normal-eur, and leaves no job behind."""
    result = subprocess.run(
        [str(FELLOWS_FSM), "demo", "--cap", "3"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "QOSMaxGRESPerUser" in result.stdout
    assert "is RUNNING on normal-eur" in result.stdout
    slurm.wait_for(lambda: not slurm.live_ids(), "the demo's jobs to be gone", timeout=20)


def _with_fellows(config: Path, lines: str) -> Path:
    """The same config with ``lines`` added to its [fellows] table."""
    config.write_text(config.read_text().replace("[fellows]\n", f"[fellows]\n{lines}\n"), encoding="utf-8")
    return config


@pytest.fixture
def ungranted_qos(slurm: Cluster) -> Any:
    """A QoS that exists on the cluster but is granted to nobody (removed again afterwards)."""
    name = "gold-eur"
    subprocess.run(["sacctmgr", "-i", "add", "qos", name], capture_output=True, text=True, timeout=30, check=True)
    try:
        yield name
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "qos", name], capture_output=True, timeout=30, check=False)


def test_submit_refuses_an_ungranted_qos_with_nothing_queued(
    slurm: Cluster, tmp_path: Path, ungranted_qos: str
) -> None:
    """A ladder naming a QoS the cluster has but does not grant exits 3 naming it; no job reaches the queue."""
    config = _with_fellows(_config(tmp_path), f"qos_ladder = ['normal-eur', '{ungranted_qos}']")
    before = {r.job_id for r in slurm.queue()}
    line = one_error(cli(config, *submit_args(slurm), timeout=60), 3)
    assert f"'{ungranted_qos}'" in line
    assert "not granted" in line
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
    assert json_of(cli(config, "status", "--json", timeout=60)) == []


def test_submit_refuses_an_unknown_qos_with_nothing_queued(slurm: Cluster, tmp_path: Path) -> None:
    """A ladder naming a QoS the cluster does not have exits 3 naming it; no job reaches the queue."""
    config = _with_fellows(_config(tmp_path), "qos_ladder = ['normal-eur', 'no-such-eur']")
    before = {r.job_id for r in slurm.queue()}
    line = one_error(cli(config, *submit_args(slurm), timeout=60), 3)
    assert "'no-such-eur'" in line
    assert "does not exist" in line
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)


def test_a_job_over_high_eur_max_wall_never_waits_on_high_eur(slurm: Cluster, tmp_path: Path) -> None:
    """--time 8 days is over high-eur's and normal-eur's MaxWall (7 days): the job is queued on low-eur only."""
    config = _config(tmp_path)
    args = ["submit", "--json", "--gpus", "8", "--time", "8-00:00:00", slurm.script(300), "--", *slurm.job_args()]
    result = cli(config, *args, timeout=60)
    out = json_of(result)
    assert (out["state"], out["qos"]) == ("RUNNING", "low-eur")
    assert [(j.qos, j.state) for j in _jobs(slurm, out["dispatch_id"])] == [("low-eur", "RUNNING")]
    assert "skipping high-eur" in result.stderr
    history = json_of(cli(config, "history", out["dispatch_id"], "--json", timeout=60))
    assert [(h["trigger"], h["to"]) for h in history] == [("submit", "SUBMITTED(low-eur)"), ("start", "RUNNING")]
    assert "skipping high-eur: the job's --time 8-00:00:00 is over its MaxWall 7-00:00:00" in history[0]["note"]


def test_a_job_no_rung_can_start_is_refused_before_the_paid_lane(slurm: Cluster, tmp_path: Path) -> None:
    """--time 20 days fits no rung: exit 5 before anything is queued, and the gcp command never runs."""
    config = _config(tmp_path)
    before = {r.job_id for r in slurm.queue()}
    args = ["submit", "--gpus", "8", "--time", "20-00:00:00", slurm.script(300), "--", *slurm.job_args()]
    line = one_error(cli(config, *args, timeout=60), 5)
    assert "no rung" in line
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
    assert not (tmp_path / "gcp.ledger").exists()


def test_pinned_submit_returns_with_the_pending_job(slurm: Cluster, tmp_path: Path) -> None:
    """With high-eur's cap full, submit --pin fellows returns at once with the job PENDING on high-eur."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    out = json_of(cli(config, *submit_args(slurm, "--pin", "fellows", "--json"), timeout=30))
    assert (out["state"], out["qos"], out["final"]) == ("SUBMITTED(high-eur)", "high-eur", False)
    assert slurm.row(out["slurm_job_id"]).state == "PENDING"


def test_owned_sbatch_option_is_refused_on_the_real_cluster(slurm: Cluster, tmp_path: Path) -> None:
    """-- --qos=low-eur exits 2 naming the option; nothing reaches the queue."""
    config = _config(tmp_path)
    before = {r.job_id for r in slurm.queue()}
    line = one_error(cli(config, *submit_args(slurm), "--qos=low-eur", timeout=60), 2)
    assert "'--qos=low-eur'" in line
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
