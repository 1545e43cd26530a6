"""`fellows-fsm logs` on the real SLURM (issue 38 item 4): a local job's SLURM default file and a custom
--output/--error with patterns, read here; `logs -f` following a running job to its end; and a job on the second
cluster, read over that lane's ssh master by a command that cannot see the file locally (its folder hidden in a
mount namespace)."""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.journal.queries import spec_of
from fellows_fsm.slurm.logs import OutputPatterns, locate
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.slurm.transport import LocalTransport, Reply, Request

from .cli_harness import FELLOWS_FSM, cli, ledger_config, one_error, read_journal, stop_background_driver
from .conftest import Cluster
from .two_clusters import SecondCluster

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def _no_driver_left(tmp_path: Path) -> Iterator[None]:
    """The background driver the test's commands started is stopped after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def _config(tmp_path: Path, extra: str = "") -> Path:
    """1 s polls and follows; ``extra``: more tables (the second cluster's lane)."""
    path = ledger_config(tmp_path, cap=30, poll=1, router="follow_interval_seconds = 1\n")
    if extra:
        path.write_text(path.read_text() + "\n" + extra, encoding="utf-8")
    return path


def _script(jobs_dir: Path, body: str) -> tuple[Path, str]:
    """A job script running ``body`` in a fresh folder of a 1777 jobs dir: the folder and the script."""
    folder = jobs_dir / f"it-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    path = folder / "job.sh"
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)
    return folder, str(path)


def _submit(config: Path, script: str, *sbatch: str, flags: tuple[str, ...] = ()) -> str:
    """`submit --detach` of a 1-GPU, 5-minute job (``flags`` before the script); its dispatch id."""
    done = cli(config, "submit", "--detach", *flags, "--gpus", "1", "--time", "5:00", script, "--", *sbatch, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _row(tmp_path: Path, dispatch_id: str) -> Any:
    with read_journal(tmp_path) as journal:
        return journal.dispatch(dispatch_id)


def _ended(config: Path, *ids: str) -> None:
    """`wait` until each dispatch ended; each succeeded."""
    done = cli(config, "wait", "--timeout", "90", *ids, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_logs_prints_a_local_jobs_default_file_and_its_own_output_and_error(slurm: Cluster, tmp_path: Path) -> None:
    """A job with no --output: logs and logs --err both print slurm-<id>.out in its --chdir (both streams); a job
    whose #SBATCH --output has %j and %x and --error has %j: each file, expanded as sbatch did; the file gone:
    exit 31 naming the path and 'here'."""
    config = _config(tmp_path)
    plain_dir, plain = _script(slurm.jobs_dir, "echo plain-out\necho plain-err >&2")
    own_dir, own = _script(
        slurm.jobs_dir,
        "#SBATCH --output=own-%j-%x.txt\n#SBATCH --error=own-%j.err\necho own-out\necho own-err >&2",
    )
    first = _submit(config, plain, f"--chdir={plain_dir}")
    second = _submit(config, own, f"--chdir={own_dir}", flags=("--name", "named"))
    _ended(config, first, second)
    job1, job2 = _row(tmp_path, first).job_id, _row(tmp_path, second).job_id
    assert (plain_dir / f"slurm-{job1}.out").exists()

    out = cli(config, "logs", first)
    assert (out.returncode, out.stdout) == (0, "plain-out\nplain-err\n"), out.stderr
    err = cli(config, "logs", "--err", first)
    assert (err.returncode, err.stdout) == (0, "plain-out\nplain-err\n"), err.stderr

    assert (own_dir / f"own-{job2}-named.txt").exists()
    out = cli(config, "logs", second)
    assert (out.returncode, out.stdout) == (0, "own-out\n"), out.stderr
    err = cli(config, "logs", second, "--err")
    assert (err.returncode, err.stdout) == (0, "own-err\n"), err.stderr

    (plain_dir / f"slurm-{job1}.out").unlink()
    line = one_error(cli(config, "logs", first), 31)
    assert f"{plain_dir}/slurm-{job1}.out" in line
    assert "here" in line
    unknown = cli(config, "logs", "feedfacecafe")
    assert unknown.returncode == 2, unknown.stderr


def test_logs_follow_prints_a_running_jobs_lines_as_they_come_until_it_ends(slurm: Cluster, tmp_path: Path) -> None:
    """`logs -f` started before the job runs prints its first line while the dispatch is still not final, and every
    line by the time it exits 0 on its own, once the dispatch ENDED."""
    config = _config(tmp_path)
    folder, script = _script(slurm.jobs_dir, "for i in 1 2 3 4 5 6; do echo line-$i; sleep 1; done")
    dispatch_id = _submit(config, script, f"--chdir={folder}")
    with subprocess.Popen(
        [str(FELLOWS_FSM), "--config", str(config), "logs", "-f", dispatch_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as follower:
        try:
            assert follower.stdout is not None
            assert follower.stderr is not None
            first = follower.stdout.readline()
            assert first == "line-1\n"
            assert not _row(tmp_path, dispatch_id).final  # printed while the job ran
            rest = follower.stdout.read()  # to its end, the process's exit (communicate would skip readline's buffer)
            follower.wait(timeout=90)
            errors = follower.stderr.read()
        finally:
            if follower.poll() is None:
                follower.kill()
    assert follower.returncode == 0, errors
    assert first + rest == "".join(f"line-{i}\n" for i in range(1, 7))
    row = _row(tmp_path, dispatch_id)
    assert (row.state, row.final) == ("ENDED", True)


def _hidden(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run in a mount namespace of its own where ``folder`` is an empty tmpfs: nothing in it is readable
    here; the sshd (outside) still sees it."""
    program = 'mount -t tmpfs none "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", program, "sh", str(folder), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_logs_of_a_job_on_the_second_cluster_is_read_over_its_ssh_master(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """A job pinned to the inst lane (reached only over its sshd) writes slurm-<id>.out in a folder hidden from the
    `logs` command (an empty tmpfs over it in the command's own mount namespace): logs prints it all the same,
    read over the lane's ssh master, and --err of a path with a space and a quote prints its error file."""
    config = _config(tmp_path, second_slurm.lane_toml())
    folder, script = _script(second_slurm.jobs_dir, "echo remote-out\necho remote-err >&2")
    odd = folder / "it's here"
    odd.mkdir(mode=0o777)
    odd.chmod(0o777)
    args = (f"--partition={second_slurm.partition}", f"--account={second_slurm.account}", f"--chdir={folder}")
    dispatch_id = _submit(config, script, *args, "--error=it's here/err-%j.txt", flags=("--pin", "inst"))
    _ended(config, dispatch_id)
    row = _row(tmp_path, dispatch_id)
    raw = row.job_id.partition("@")[0]
    assert row.job_id == f"{raw}@inst"
    assert (folder / f"slurm-{raw}.out").read_text() == "remote-out\n"

    assert _hidden(folder, "test", "-e", str(folder / f"slurm-{raw}.out")).returncode == 1  # not there, locally
    out = _hidden(folder, str(FELLOWS_FSM), "--config", str(config), "logs", dispatch_id)
    assert (out.returncode, out.stdout) == (0, "remote-out\n"), out.stderr
    err = _hidden(folder, str(FELLOWS_FSM), "--config", str(config), "logs", "--err", dispatch_id)
    assert (err.returncode, err.stdout) == (0, "remote-err\n"), err.stderr
    # and the same file missing over there: exit 31, naming it and the host
    (folder / f"slurm-{raw}.out").unlink()
    gone = _hidden(folder, str(FELLOWS_FSM), "--config", str(config), "logs", dispatch_id)
    assert gone.returncode == 31, gone.stderr
    assert f"on {second_slurm.host} over ssh" in gone.stderr
    assert str(folder / f"slurm-{raw}.out") in gone.stderr


class _Forgetful:
    """A transport here whose slurmctld has forgotten every job (past MinJobAge): scontrol answers as for an unknown
    id, every other command runs for real."""

    remote = False
    where = "here"
    peer = "the SLURM controller"
    reach_hint = "check `scontrol ping`"

    def __init__(self) -> None:
        self.inner = LocalTransport()
        self.asked: list[str] = []

    def run(self, request: Request) -> Reply:
        self.asked.append(request.argv[0])
        if request.argv[0] == "scontrol":
            return Reply(1, "", "slurm_load_jobs error: Invalid job id specified", 0.0)
        return self.inner.run(request)


def test_a_job_slurmctld_forgot_is_found_through_accounting_and_its_journaled_lines(
    slurm: Cluster, tmp_path: Path
) -> None:
    """With scontrol no help, the real sacct (StdOut/StdErr expanded on 24.11; WorkDir, JobName and User on 22.05,
    with the #SBATCH --output/--error lines journaled at submit) finds the very files the job wrote."""
    config = _config(tmp_path)
    folder, script = _script(
        slurm.jobs_dir, "#SBATCH --output=late-%x-%j.txt\n#SBATCH --error=late-%u-%j.err\necho late-out\necho e >&2"
    )
    dispatch_id = _submit(config, script, f"--chdir={folder}", flags=("--name", "late"))
    _ended(config, dispatch_id)
    row = _row(tmp_path, dispatch_id)
    assert row.settings["output"] == {"output": "late-%x-%j.txt", "error": "late-%u-%j.err"}
    spec = spec_of(row)
    transport = _Forgetful()
    runner = CommandRunner(transport=transport)
    port = SlurmScheduler(runner)
    slurm.sacct_row(row.job_id)  # accounting has recorded its end
    # ... and its details (slurmdbd's first record may lack them for a few seconds: JobName "allocation", no WorkDir)
    plain = CommandRunner(transport=LocalTransport())
    slurm.wait_for(
        lambda: plain.run(("sacct", "-X", "-n", "-P", "-j", str(row.job_id), "-o", "WorkDir")).stdout.strip() != "",
        f"sacct to record job {row.job_id}'s working dir",
        timeout=30,
    )
    found = locate(
        runner,
        row.job_id,
        OutputPatterns.of(row.settings["output"], spec.extra_args),
        name=spec.name,
        user=lambda: port.user,
        workdir=spec.workdir,
    )
    assert found.source == "sacct"
    assert found.stdout == str(folder / f"late-late-{row.job_id}.txt")
    assert found.stderr == str(folder / f"late-{port.user}-{row.job_id}.err")
    assert Path(found.stdout).read_text() == "late-out\n"
    assert Path(found.stderr).read_text() == "e\n"
    assert transport.asked[:2] == ["scontrol", "sacct"]
