"""The driver's environment is never a trap (issue 41 item 5), on the real local SLURM: a background driver started
from a shell whose PATH lacks SLURM says so (submit at once, ``driver status``, ``status``), a later command from a
shell that finds SLURM gives it a working PATH (journaled), and ``cancel`` always journals the withdrawal and says
when its jobs are cancelled."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.driver.environment import DRIVER_ENV_PROBLEM, DRIVER_ENV_REPLACED
from fellows_fsm.driver.inbox import CANCEL_REQUEST

from .cli_harness import cli, driver_pid, ledger_config, read_journal, submit_args
from .conftest import Cluster
from .settled import assert_settled

pytestmark = pytest.mark.slurm


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    """A config with long caps (nothing parks during the test); its background driver is stopped afterwards."""
    path = ledger_config(tmp_path, cap=300, poll=0.5)
    yield path
    cli(path, "driver", "stop", timeout=60)


def _bare(tmp_path: Path) -> dict[str, str]:
    """This environment with a PATH that has Python but no SLURM command (a forgotten `module load slurm`)."""
    bare = tmp_path / "bare-bin"
    bare.mkdir(exist_ok=True)
    if not (bare / "python3").exists():
        (bare / "python3").symlink_to(sys.executable)
    return {**os.environ, "PATH": str(bare)}


def _meta(tmp_path: Path, key: str) -> object:
    journal = read_journal(tmp_path)
    try:
        return journal.get_meta(key)
    finally:
        journal.close()


def _row(tmp_path: Path, dispatch_id: str) -> tuple[str, str | None, str]:
    journal = read_journal(tmp_path)
    try:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        return row.state, row.job_id, row.outcome
    finally:
        journal.close()


def _dispatch_of(stderr: str) -> str:
    """The dispatch id a refused submit names (``dispatch <id> stays journaled``)."""
    words = stderr.split()
    return words[words.index("dispatch") + 1]


def test_a_driver_without_sbatch_says_so_and_a_good_shell_fixes_it(
    slurm: Cluster, tmp_path: Path, config: Path
) -> None:
    """Submit from a shell without SLURM: it exits at once naming sbatch and the PATH (not after 30 s of silence),
    the dispatch journaled; `driver status` and `status` say it in one line. A submit from a shell that finds SLURM
    gives the same driver its PATH (journaled): both dispatches get their job, each exactly one."""
    bare = _bare(tmp_path)
    first = cli(config, *submit_args(slurm, "--detach"), env=bare, timeout=60)
    assert first.returncode == 6, first.stdout + first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert "stays journaled, not queued yet: the driver (pid " in last
    assert f"cannot run sbatch: it is not on its PATH={bare['PATH']}" in last
    first_id = _dispatch_of(last)
    pid = driver_pid(tmp_path)

    status = cli(config, "driver", "status", env=bare)
    assert status.returncode == 0, status.stderr
    [said] = [line for line in status.stdout.splitlines() if line.startswith("environment: ")]
    assert f"the driver (pid {pid}) cannot run sbatch" in said
    as_json = cli(config, "driver", "status", "--json", env=bare)
    assert "cannot run sbatch" in as_json.stdout
    listed = cli(config, "status", env=bare)
    assert listed.returncode == 0, listed.stderr
    assert [line for line in listed.stderr.splitlines() if "cannot run sbatch" in line] != []
    assert _row(tmp_path, first_id)[1] is None

    second = cli(config, *submit_args(slurm, "--detach"), timeout=60)  # this test's own PATH finds SLURM
    assert second.returncode == 0, second.stderr
    second_id = second.stdout.strip()
    assert driver_pid(tmp_path) == pid  # the same driver, with a PATH of its own now
    replaced = _meta(tmp_path, DRIVER_ENV_REPLACED)
    assert isinstance(replaced, dict)
    assert (replaced["pid"], replaced["missing"], replaced["before"]) == (pid, "sbatch", bare["PATH"])
    assert replaced["path"] == os.environ["PATH"]
    assert _meta(tmp_path, DRIVER_ENV_PROBLEM) is None
    slurm.wait_for(lambda: _row(tmp_path, first_id)[1] is not None, "the first dispatch's job", timeout=30)
    for dispatch_id in (first_id, second_id):  # nothing blocks high-eur: each runs once slurmctld schedules it
        job_id = str(_row(tmp_path, dispatch_id)[1])
        slurm.wait_for(lambda j=job_id: slurm.row(j).state == "RUNNING", f"job {job_id} to run", timeout=30)
    status = cli(config, "driver", "status")
    assert "environment:" not in status.stdout
    journal = read_journal(tmp_path)
    try:
        assert_settled(slurm, journal, tmp_path, [first_id, second_id])
    finally:
        journal.close()


def test_cancel_from_a_shell_without_slurm_withdraws_at_once_and_says_when(
    slurm: Cluster, tmp_path: Path, config: Path
) -> None:
    """The driver cannot run SLURM's commands and cancel comes from a shell that cannot either: the dispatch is
    journaled WITHDRAWN at once (never submitted), the line says its jobs are cancelled at the driver's first poll
    that runs scancel and why; a later command from a good shell lets the driver finish it (the request gone, no job
    of the dispatch on the cluster)."""
    bare = _bare(tmp_path)
    first = cli(config, *submit_args(slurm, "--detach"), env=bare, timeout=60)
    assert first.returncode == 6, first.stdout + first.stderr
    dispatch_id = _dispatch_of(first.stderr.strip().splitlines()[-1])
    cancelled = cli(config, "cancel", dispatch_id, env=bare, timeout=60)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    line = cancelled.stdout.strip()
    assert line.startswith(f"dispatch {dispatch_id} withdrawn: any job of it is cancelled at the driver's first poll")
    assert f"PATH={bare['PATH']}" in line
    state, job_id, outcome = _row(tmp_path, dispatch_id)
    assert (state, job_id, outcome) == ("WITHDRAWN", None, "withdrawn")
    assert _meta(tmp_path, CANCEL_REQUEST + dispatch_id) is not None  # kept for the scancel

    again = cli(config, "cancel", dispatch_id, timeout=60)  # a shell that finds SLURM
    assert again.returncode == 0, again.stdout + again.stderr
    slurm.wait_for(lambda: _meta(tmp_path, CANCEL_REQUEST + dispatch_id) is None, "the kept cancel done", timeout=30)
    assert [r for r in slurm.queue() if r.comment.startswith(f"fsm-{dispatch_id}-")] == []
    assert _row(tmp_path, dispatch_id)[2] == "withdrawn"
