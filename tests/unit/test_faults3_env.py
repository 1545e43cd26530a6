"""Faults, third round, without a cluster: the user's SLURM variables dropped from every command (here and in the
remote program), times in UTC whatever the zone, a journal row that is not UTF-8, the job's working directory,
and click's usage errors as one line."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from fellows_fsm.cli import main
from fellows_fsm.config.file import Config
from fellows_fsm.driver.inbox import admit
from fellows_fsm.errors import SubmitRejected, UsageError
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fields import parse_utc, utc_stamp
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.scheduler.script import read_script_defaults
from fellows_fsm.slurm.mock import MockRunner, MockTransport
from fellows_fsm.slurm.observe import parse_slurm_time
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.render import format_deadline, render_sbatch
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.slurm.transport import Reply, remote_command
from fellows_fsm.slurm.workload import parse_queue

HOSTILE = {
    "SBATCH_GRES": "gpu:64",
    "SBATCH_TIMELIMIT": "30-00:00:00",
    "SBATCH_WAIT": "1",
    "SLURM_CLUSTERS": "elsewhere",
    "SLURM_TIME_FORMAT": "relative",
    "SQUEUE_STATES": "COMPLETED",
    "SACCT_FORMAT": "JobID",
    "SINFO_FORMAT": "%n",
    "SRUN_CPUS_PER_TASK": "64",
}
WATCHED = ("SBATCH_", "SLURM_", "SQUEUE_", "SACCT_", "SINFO_", "SRUN_", "TZ", "KEPT")
DUMP = f"import json, os; print(json.dumps({{k: v for k, v in os.environ.items() if k.startswith({WATCHED!r})}}))"


def test_a_local_command_never_sees_the_users_slurm_input_variables() -> None:
    """A command run through the runner here gets no SBATCH_*, SLURM_* (but SLURM_CONF), SQUEUE_*, ... variable."""
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": "/etc/x/slurm.conf", "KEPT": "yes", **HOSTILE}
    result = CommandRunner(env=env).run([sys.executable, "-c", DUMP])
    seen = json.loads(result.stdout)
    assert seen == {
        "SLURM_CONF": "/etc/x/slurm.conf",
        "KEPT": "yes",
        "SLURM_TIME_FORMAT": "standard",
        "TZ": "UTC",
    }


def test_the_remote_program_drops_the_input_variables_and_keeps_slurm_conf() -> None:
    """The program ssh hands the login shell unsets every input variable the login set, SLURM_CONF aside."""
    runner = MockRunner(lambda request: Reply(0, "", "", 0.0))
    runner.run(["squeue"])
    (request,) = runner.requests
    command = remote_command([sys.executable, "-c", DUMP], request.env, request.drop_env_prefixes, request.keep_env)
    login = {"PATH": "/usr/bin:/bin", "HOME": "/root", "SLURM_CONF": "/etc/x/slurm.conf", **HOSTILE}
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=login, timeout=30, check=True)
    assert json.loads(proc.stdout) == {"SLURM_CONF": "/etc/x/slurm.conf", "SLURM_TIME_FORMAT": "standard", "TZ": "UTC"}


def test_every_command_but_sbatch_runs_in_utc() -> None:
    """squeue, sacct and scontrol run with TZ=UTC; sbatch keeps the user's zone (its environment is the job's)."""
    runner = MockRunner(lambda request: Reply(0, "1\n", "", 0.0))
    for name in ("squeue", "sacct", "scontrol", "sbatch"):
        runner.run([name])
    zones = {request.argv[0]: request.env.get("TZ") for request in runner.requests}
    assert zones == {"squeue": "UTC", "sacct": "UTC", "scontrol": "UTC", "sbatch": None}
    assert all("SBATCH_" in request.drop_env_prefixes for request in runner.requests)


@pytest.fixture
def far_zone() -> Iterator[None]:
    """This process's zone set to UTC-8 for the test (the real one back after)."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Etc/GMT+8"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


def test_slurm_times_are_read_and_written_as_utc_whatever_the_local_zone(far_zone: None) -> None:
    """In a zone eight hours behind UTC, a SLURM stamp still reads as the UTC moment it names, both ways."""
    epoch = float(calendar.timegm((2026, 12, 1, 21, 0, 0, 0, 0, 0)))
    assert parse_slurm_time("2026-12-01T21:00:00") == epoch
    assert parse_utc(utc_stamp(epoch)) == epoch
    line = "7|me|R|2026-12-01T21:00:00|10:00|cpu=1,gres/gpu=8|100|low-eur|None"
    (running,), _ = parse_queue(line, user="me")
    assert running.started_at == epoch


@pytest.mark.parametrize(("ahead", "text"), [(600.0, "now+600"), (600.2, "now+601"), (-5.0, "now+1")])
def test_the_deadline_is_relative_so_no_zone_is_involved(ahead: float, text: str) -> None:
    """--deadline is now+N seconds (rounded up, at least 1), never a wall time in some zone."""
    assert format_deadline(1_900_000_000.0 + ahead, 1_900_000_000.0) == text
    spec = JobSpec("j", "/jobs/j.sh")
    argv = render_sbatch(spec, qos="high-eur", token=None, deadline=1_900_000_000.0 + ahead, now=1_900_000_000.0).argv
    assert f"--deadline={text}" in argv


# --------------------------------------------------------------------------- 7: a row that is not UTF-8


# --------------------------------------------------------------------------- 11: where the job runs
def _port(tmp_path: Path, *, remote: bool = False) -> tuple[SlurmScheduler, MockTransport]:
    transport = MockTransport(lambda request: Reply(0, "42\n", "", 0.01), remote=remote)
    return SlurmScheduler(CommandRunner(transport=transport), user="me", remote_workdir="/scratch"), transport


def test_a_local_sbatch_runs_in_the_directory_submit_was_run_from(tmp_path: Path) -> None:
    """A local submit runs sbatch in the spec's workdir; over ssh no local directory is used."""
    script = tmp_path / "j.sh"
    script.write_text("#!/bin/bash\nsleep 1\n")
    spec = JobSpec("j", str(script), workdir=str(tmp_path))
    port, transport = _port(tmp_path)
    port.submit(spec, qos="high-eur", token="fsm-a-r0")
    assert transport.requests[0].cwd == str(tmp_path)
    port, transport = _port(tmp_path, remote=True)
    port.submit(spec, qos="high-eur", token="fsm-a-r0")
    assert transport.requests[0].cwd is None


def test_a_workdir_that_is_gone_is_one_refusal_naming_it(tmp_path: Path) -> None:
    """A submit from a directory removed before the driver's sbatch: SubmitRejected naming it, nothing run."""
    port, transport = _port(tmp_path)
    with pytest.raises(SubmitRejected, match="no longer a directory"):
        port.submit(JobSpec("j", "/j.sh", workdir=str(tmp_path / "gone")), qos="high-eur", token="fsm-a-r0")
    assert transport.requests == []


def test_admit_journals_the_current_directory_for_a_local_job_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local dispatch carries the directory submit ran in; one for a remote host carries none."""
    monkeypatch.chdir(tmp_path)
    local = Config(fellows=SlurmSettings(), state_dir=tmp_path / "state")
    assert admit(local, JobSpec("j", "/j.sh"), local.route()).spec.workdir == str(tmp_path)
    remote = Config(fellows=SlurmSettings(host="charmander"), state_dir=tmp_path / "state")
    assert admit(remote, JobSpec("j", "/j.sh"), remote.route()).spec.workdir is None


# --------------------------------------------------------------------------- 13: one-line errors
def test_a_control_character_in_the_scripts_job_name_names_the_line(tmp_path: Path) -> None:
    """An escape in `#SBATCH --job-name` is reported as that line of the script, not as --name."""
    script = tmp_path / "j.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=a\x1bb\nsleep 1\n")
    with pytest.raises(UsageError, match=r"j\.sh:2: #SBATCH --job-name") as caught:
        read_script_defaults(script)
    assert "--name " not in str(caught.value)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["status", "--last", "-1"], "--last"),
        (["driver", "log", "-n", "0"], "-n"),
        (["status", "--nope"], "--nope"),
        (["--config", "."], "--config"),
        (["history"], "DISPATCH_ID"),
    ],
    ids=" ".join,
)
def test_a_usage_error_of_the_command_line_is_one_line(args: list[str], names: str) -> None:
    """click's refusals are one `fellows-fsm: error:` line naming the option, exit 2, never the usage block."""
    result = CliRunner().invoke(main, args, prog_name="fellows-fsm")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fellows-fsm: error: ")
    assert names in lines[0]


def test_no_command_still_shows_the_help() -> None:
    """`fellows-fsm` alone still prints its help (click's own way of asking for a command)."""
    result = CliRunner().invoke(main, [], prog_name="fellows-fsm")
    assert "Commands:" in result.output
