"""Faults, third round, on the real local SLURM: the user's shell reaching sbatch, a journal row that is not
UTF-8, a router in another time zone than the cluster (here and over ssh), a job's working directory, and errors
that must be one line naming their real source.

After each, ``assert_settled``: every dispatch has exactly one job that ran or exactly one handoff (or was
refused with nothing queued).
"""

from __future__ import annotations

import calendar
import json
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from fellows_fsm.scheduler.port import Phase
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.slurm.transport import SshTransport

from .cli_harness import FELLOWS_FSM, check_settled, cli, submit_args
from .conftest import RUNTIME, Cluster
from .settled import ledger
from .test_faults_real import cli_config
from .test_ssh_real import HOST, Remote, remote, sshd

pytestmark = pytest.mark.slurm

__all__ = ["remote", "sshd"]  # the ssh fixtures, used here under their own names

BEHIND = "Etc/GMT+8"
"""A time zone eight hours behind the cluster's (UTC here): POSIX's sign is inverted, so GMT+8 is UTC-8."""


@pytest.fixture
def stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Stop the background driver a test's commands started (its dispatches stay journaled)."""
    yield
    config = tmp_path / "fellows.toml"
    if config.exists() and (tmp_path / "state" / "journal.sqlite3").exists():
        cli(config, "driver", "stop", timeout=60)


def _scontrol_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` as key=value pairs, its times in the cluster's zone (UTC) as it prints them."""
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=20, check=True, env=env
    ).stdout
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


def _runs_once(slurm: Cluster, tmp_path: Path, dispatch_id: str, job_id: str) -> None:
    """The dispatch's job runs (the queue is free), it is its only job, and nothing was handed to GCP."""
    slurm.wait_for(lambda: slurm.row(job_id).state == "RUNNING", f"job {job_id} to run", timeout=30)
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def _utc_epoch(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


# --------------------------------------------------------------------------- 4: the user's shell reaches sbatch
HOSTILE_ENV = {
    "SBATCH_GRES": "gpu:64",
    "SBATCH_TIMELIMIT": "30-00:00:00",
    "SBATCH_WAIT": "1",
    "SBATCH_QOS": "low-eur",
    "SBATCH_COMMENT": "not-a-token",
    "SLURM_TIME_FORMAT": "relative",
    "SQUEUE_STATES": "COMPLETED",
}


def test_sbatch_and_slurm_variables_of_the_users_shell_never_reach_sbatch(
    slurm: Cluster, tmp_path: Path, stop_drivers: None
) -> None:
    """With SBATCH_GRES=gpu:64, SBATCH_TIMELIMIT=30 days and SBATCH_WAIT in the shell that starts the driver, the
    job runs on high-eur with the 8 GPUs and 10 minutes it was given, and nothing is handed to GCP."""
    config = cli_config(tmp_path)
    env = {**os.environ, **HOSTILE_ENV}
    done = cli(config, "submit", "--json", *submit_args(slurm)[1:], env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["state"], answer["qos"]) == ("RUNNING", "high-eur"), answer
    job = _scontrol_job(answer["slurm_job_id"])
    assert job["TimeLimit"] == "00:10:00"
    assert "gpu:8" in job.get("TresPerNode", job.get("Gres", "")), job
    assert job["Comment"].startswith(f"fsm-{answer['dispatch_id']}-r")
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [answer["dispatch_id"]])


# --------------------------------------------------------------------------- 7: a row that is not UTF-8
def test_a_row_that_is_not_utf8_refuses_submit_as_status_does(slurm: Cluster, tmp_path: Path) -> None:
    """A dispatch row whose label is not valid UTF-8: status exits 7, and so does submit --detach, queueing
    nothing and leaving the file as it was."""
    config = cli_config(tmp_path)
    first = cli(config, "submit", "--json", "--pin", "gcp", slurm.script(1), timeout=120)
    assert first.returncode == 0, first.stderr
    path = tmp_path / "state" / "journal.sqlite3"
    with closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE dispatches SET label = CAST(X'c3284e6f' AS TEXT)")
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # SQLite itself sees nothing wrong
    status = cli(config, "status", timeout=120)
    assert status.returncode == 7, status.stderr
    assert len(status.stderr.strip().splitlines()) == 1
    kept = path.read_bytes()
    before = {r.job_id for r in slurm.queue()}
    result = cli(config, *submit_args(slurm, "--detach"), timeout=120)
    assert result.returncode == 7, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "unreadable or damaged" in result.stderr
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
    assert path.read_bytes() == kept
    assert ledger(tmp_path) == [json.loads(first.stdout)["dispatch_id"]]


# --------------------------------------------------------------------------- 10: time zones
def _deadline_config(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "fellows.toml"
    config.write_text(text + "\n[router]\ncontroller_deadline = true\n", encoding="utf-8")
    return config


def test_a_router_in_another_zone_sets_the_deadline_the_cluster_means_here(
    slurm: Cluster, tmp_path: Path, stop_drivers: None
) -> None:
    """A router eight hours behind the cluster (local SLURM) with controller_deadline: the job is queued and its
    Deadline is its window's end plus its time limit, read in the cluster's own zone."""
    config = _deadline_config(tmp_path, cli_config(tmp_path, "base.toml", cap=30).read_text())
    t0 = time.time()
    done = cli(config, *submit_args(slurm, "--detach", "--json"), env={**os.environ, "TZ": BEHIND}, timeout=120)
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["slurm_job_id"]
    deadline = _utc_epoch(_scontrol_job(job_id)["Deadline"])
    assert t0 + 30 + 600 <= deadline + 2 <= time.time() + 30 + 600 + 120, (deadline - t0) / 3600
    _runs_once(slurm, tmp_path, json.loads(done.stdout)["dispatch_id"], job_id)


def test_a_router_in_another_zone_sets_the_deadline_the_cluster_means_over_ssh(
    remote: Remote, slurm: Cluster, tmp_path: Path
) -> None:
    """Over ssh from a workstation eight hours behind the cluster, with controller_deadline: the job is queued
    and its Deadline is its window's end plus its time limit in the cluster's zone, not eight hours off."""
    config = _deadline_config(tmp_path, remote.write_config(cap=30).read_text())
    remote.env["TZ"] = BEHIND
    t0 = time.time()
    done = remote.cli(
        "submit", "--detach", "--json", "--gpus", "8", "--time", "10:00", str(remote.script()), config=config
    )
    try:
        assert done.returncode == 0, done.stderr
        job_id = json.loads(done.stdout)["slurm_job_id"]
        deadline = _utc_epoch(_scontrol_job(job_id)["Deadline"])
        assert t0 + 30 + 600 <= deadline + 2 <= time.time() + 30 + 600 + 120, (deadline - t0) / 3600
        _runs_once(slurm, tmp_path, json.loads(done.stdout)["dispatch_id"], job_id)
    finally:
        remote.cli("driver", "stop", config=config)


@pytest.fixture
def behind() -> Iterator[None]:
    """This process's time zone eight hours behind the cluster's, for the test; the real one back after."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = BEHIND
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def _ssh_port(remote: Remote) -> SlurmScheduler:
    transport = SshTransport(HOST, options=["-F", str(remote.sshd.ssh_config)], control_dir=remote.tmp_path / "ssh")
    return SlurmScheduler(CommandRunner(timeout_seconds=20, transport=transport), remote_workdir=str(RUNTIME / "jobs"))


@pytest.mark.parametrize("where", ["here", "over ssh"])
def test_start_times_read_in_another_zone_are_the_real_ones(
    request: pytest.FixtureRequest, slurm: Cluster, where: str, behind: None
) -> None:
    """With the router eight hours behind the cluster, a running job's start time as the poll's squeue and the
    history's squeue read it is the moment it started, here and over ssh."""
    port = _ssh_port(request.getfixturevalue("remote")) if where == "over ssh" else slurm.port()
    t0 = time.time()
    job = port.submit(slurm.spec(gpus=1, seconds=120), qos="low-eur", token=f"fsm-tz{uuid.uuid4().hex[:6]}-r0")
    seen: dict[str, float] = {}

    def started() -> bool:
        obs = port.observe([job])[job]
        if obs.start_time is not None:
            seen["start"] = obs.start_time
        return obs.phase is not Phase.PENDING

    slurm.wait_for(started, f"job {job} to start", timeout=30)
    assert t0 - 5 <= seen["start"] <= time.time() + 5, (seen["start"] - t0) / 3600
    running = {j.job_id: j for j in port.workload(since=t0 - 60).running}
    assert t0 - 5 <= running[job].started_at <= time.time() + 5, (running[job].started_at - t0) / 3600


# --------------------------------------------------------------------------- 11: the job's working directory
def test_a_job_without_chdir_runs_in_the_directory_submit_was_run_from(
    slurm: Cluster, tmp_path: Path, stop_drivers: None
) -> None:
    """A script with no #SBATCH --chdir or --output, submitted from a directory: it runs there (a relative path
    in it lands there) and its default output slurm-N.out is written there, as a plain sbatch would."""
    here = Path(slurm.script()).parent
    marker = f"where-{uuid.uuid4().hex[:8]}.txt"
    script = here / "job.sh"
    script.write_text(f"#!/bin/bash\npwd > {marker}\necho done\n", encoding="utf-8")
    config = cli_config(tmp_path)
    done = cli(config, "submit", "--json", "--gpus", "1", "--time", "5:00", "job.sh", cwd=here, timeout=120)
    job_id = ""
    try:
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        job_id = answer["slurm_job_id"]
        slurm.wait_for(lambda: (here / marker).exists() and (here / f"slurm-{job_id}.out").exists(), "the job's files")
        assert (here / marker).read_text().strip() == str(here)
        assert ledger(tmp_path) == []
        check_settled(slurm, tmp_path, [answer["dispatch_id"]])
    finally:
        for stray in (Path("/") / marker, Path("/") / f"slurm-{job_id}.out"):
            stray.unlink(missing_ok=True)  # where the job wrote before the fix


# --------------------------------------------------------------------------- 13: one-line errors
@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("status", "zzzz9999"), "zzzz9999"),
        (("history", "zzzz9999"), "zzzz9999"),
        (("status", "--last", "-1"), "--last"),
        (("driver", "log", "-n", "0"), "-n"),
        (("status", "--no-such-flag"), "--no-such-flag"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else "",
)
def test_a_usage_error_is_one_line_naming_its_source(
    slurm: Cluster, tmp_path: Path, args: tuple[str, ...], names: str
) -> None:
    """An unknown dispatch id, --last -1, driver log -n 0, an unknown option: exit 2 and one line naming it."""
    config = cli_config(tmp_path)
    assert cli(config, "submit", "--detach", "--pin", "gcp", slurm.script(1), timeout=120).returncode == 0
    result = cli(config, *args, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fellows-fsm: error: ")
    assert names in lines[0]


def test_a_directory_given_as_config_is_one_line_naming_it(slurm: Cluster, tmp_path: Path) -> None:
    """`--config <dir>` before or after the command: exit 2, one line naming --config and the directory."""
    for argv in (["--config", str(tmp_path), "status"], ["status", "--config", str(tmp_path)]):
        result = subprocess.run([str(FELLOWS_FSM), *argv], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "--config" in lines[0]
        assert str(tmp_path) in lines[0]


def test_an_escape_in_the_scripts_job_name_is_reported_as_the_scripts_line(slurm: Cluster, tmp_path: Path) -> None:
    """`#SBATCH --job-name` holding an escape character: exit 2, one line naming the script's line, not --name,
    and nothing queued."""
    script = Path(slurm.script())
    script.write_text("#!/bin/bash\n#SBATCH --job-name=bad\x1bname\nsleep 1\n", encoding="utf-8")
    before = {r.job_id for r in slurm.queue()}
    result = cli(
        cli_config(tmp_path), "submit", "--detach", "--gpus", "1", str(script), "--", *slurm.job_args(), timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{script.name}:2" in lines[0]
    assert "--name" not in lines[0]
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
