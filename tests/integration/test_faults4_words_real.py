# ruff: noqa: F811 - the fixtures imported from test_ssh_real.py are parameters here
"""The fourth round on the real local SLURM (issue 36), what the tool says: `cancel` lists only the jobs it ended,
and a walk paused because ssh refuses the cluster's changed host key says so.

Each ends with ``assert_settled``: exactly one job that ran or exactly one paid handoff, nothing left pending.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from fellows_fsm.slurm.transport import SshTransport

from .cli_harness import check_settled, cli, ledger_config, read_journal, stop_background_driver, submit_args
from .conftest import Cluster
from .settled import assert_settled, jobs_of, ledger
from .test_ssh_real import HOST, Remote, _dispatch_of, _pending_dispatch, remote, sshd  # noqa: F401

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def test_cancel_lists_only_the_job_it_ended_not_those_a_park_ended(slurm: Cluster, tmp_path: Path) -> None:
    """A dispatch parked off high-eur (its job there cancelled by the park) and pending on normal-eur: `cancel` says
    it cancelled the normal-eur job alone; a second `cancel` says it was withdrawn already and lists none."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=3.0, poll=0.5, park_early="off", fellows="later_park_cap_seconds = 600\n")
    submitted = cli(config, *submit_args(slurm, "--detach"), timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()

    def on_normal_eur() -> bool:
        jobs = jobs_of(slurm, dispatch_id)
        return any(j.qos == "normal-eur" and j.state == "PENDING" for j in jobs)

    slurm.wait_for(on_normal_eur, "the job to pend on normal-eur", timeout=60)
    [first, second] = jobs_of(slurm, dispatch_id)
    assert (first.qos, first.state) == ("high-eur", "CANCELLED")
    done = cli(config, "cancel", dispatch_id, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"dispatch {dispatch_id} withdrawn (SLURM jobs cancelled: {second.job_id})"
    again = cli(config, "cancel", dispatch_id, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"dispatch {dispatch_id} was withdrawn already: no job of it was pending or running"
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def test_a_pause_for_a_changed_host_key_names_the_host_key(remote: Remote, slurm: Cluster, tmp_path: Path) -> None:
    """The cluster's host key in known_hosts replaced (and the ssh master ended) while the job pends on high-eur: the
    walk's pause step says ssh refused the changed host key; once known_hosts is right again it RUNS on normal-eur."""
    known = tmp_path / "known_hosts"
    right = (remote.sshd.ssh_config.parent / "known_hosts").read_text()
    known.write_text(right)
    strict = tmp_path / "ssh_config_strict"
    strict.write_text(
        re.sub(r"UserKnownHostsFile \S+", f"UserKnownHostsFile {known}", remote.sshd.ssh_config.read_text())
    )
    remote.config = remote.write_config(ssh_config=strict, cap=6.0)
    slurm.occupy("high-eur", 8, count=2)
    follower = remote.popen("submit", "--json", "--gpus", "8", "--time", "10:00", str(remote.script()))
    try:
        row = _pending_dispatch(slurm, "high-eur")
        dispatch_id = _dispatch_of(row)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
        other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
        known.write_text("".join(f"{line.split()[0]} {other}\n" for line in right.splitlines() if line.strip()))
        SshTransport(HOST, options=("-F", str(strict)), control_dir=tmp_path / "state" / "ssh").close()

        def paused_for_the_key() -> bool:
            with closing(remote.journal()) as journal:
                return any(s.trigger == "pause" and "host key" in s.note for s in journal.steps(dispatch_id))

        slurm.wait_for(paused_for_the_key, "a pause step naming the host key", timeout=60, tick=0.25)
        known.write_text(right)
        out, err = follower.communicate(timeout=180)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err
    assert '"normal-eur"' in out, out
    with read_journal(tmp_path) as journal:
        note = next(s.note for s in journal.steps(dispatch_id) if s.trigger == "pause" and "host key" in s.note)
        assert f"ssh could not log in to {HOST}" in note, note
        assert "host key is unknown or has changed" in note or "host key has changed" in note, note
        assert ledger(tmp_path) == []
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
