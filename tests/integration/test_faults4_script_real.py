# ruff: noqa: F811 - the fixtures imported from test_ssh_real.py are parameters here
"""The fourth round of faults on the real local SLURM (issue 36), around the job's script: removed or edited while
its job waits on a rung, every later rung submits the script as it was at submit (kept in the state dir).

Each ends with ``assert_settled``: exactly one job that ran or exactly one paid handoff, nothing left pending.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import (
    check_settled,
    cli,
    final_row,
    ledger_config,
    read_journal,
    stop_background_driver,
    submit_args,
)
from .conftest import Cluster
from .settled import assert_settled, jobs_of, ledger
from .test_ssh_real import Remote, _dispatch_of, _pending_dispatch, remote, sshd  # noqa: F401

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def _waiting_on_high_eur(slurm: Cluster, tmp_path: Path, *, script: str | None = None) -> tuple[str, Path]:
    """High-eur held by this user's own jobs, a 10 s cap a rung: a submitted dispatch's job waits there; return the
    dispatch id and the script it was submitted with."""
    slurm.occupy("high-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=10.0, poll=0.5, park_early="off")
    args = submit_args(slurm, "--detach")
    if script is not None:
        args[args.index("--") - 1] = script
    submitted = cli(config, *args, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    [job] = jobs_of(slurm, dispatch_id)
    assert (job.state, job.qos) == ("PENDING", "high-eur")
    return dispatch_id, Path(args[args.index("--") - 1])


def test_a_script_removed_while_its_job_waits_on_high_eur_runs_on_the_next_rung(slurm: Cluster, tmp_path: Path) -> None:
    """The script (and its folder) removed while the job waits on high-eur: normal-eur's sbatch submits the script as
    it was at submit, the job RUNS there, nothing is paid, and the kept copy is gone once the dispatch is final (its
    job followed to its end: here withdrawn while it runs)."""
    dispatch_id, script = _waiting_on_high_eur(slurm, tmp_path)
    script.unlink()
    script.parent.rmdir()
    row = final_row(slurm, tmp_path, dispatch_id, timeout=90)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur"), row
    assert ledger(tmp_path) == []
    kept = tmp_path / "state" / "scripts" / dispatch_id
    assert kept.exists()  # kept while its job runs (a requeue submits it again)
    assert cli(tmp_path / "fellows.toml", "cancel", dispatch_id).returncode == 0
    slurm.wait_for(lambda: not kept.exists(), "the kept copy to go once the dispatch is final", timeout=30)
    check_settled(slurm, tmp_path, [dispatch_id])


def test_a_script_edited_after_submit_runs_as_it_was_on_the_next_rung(slurm: Cluster, tmp_path: Path) -> None:
    """The script rewritten while the job waits on high-eur: the job that runs on normal-eur is the script as it was at
    submit (it writes "original" to its marker file, never "edited")."""
    marker = slurm.jobs_dir / f"it-marker-{uuid.uuid4().hex[:8]}"
    folder = slurm.jobs_dir / f"it-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    script = folder / "job.sh"
    script.write_text(f"#!/bin/bash\necho original > {marker}\nsleep 300\n", encoding="utf-8")
    dispatch_id, _ = _waiting_on_high_eur(slurm, tmp_path, script=str(script))
    script.write_text(f"#!/bin/bash\necho edited > {marker}\nsleep 300\n", encoding="utf-8")
    row = final_row(slurm, tmp_path, dispatch_id, timeout=90)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur"), row
    slurm.wait_for(lambda: marker.exists() and marker.read_text().strip() != "", "the job to write its marker")
    assert marker.read_text().strip() == "original"
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def test_over_ssh_a_script_removed_while_its_job_waits_runs_on_the_next_rung(
    remote: Remote, slurm: Cluster, tmp_path: Path
) -> None:
    """Over ssh (the script's content sent with each sbatch), the script removed here while the job waits on high-eur:
    normal-eur's sbatch sends the copy kept at submit, the job RUNS there, and nothing is paid."""
    slurm.occupy("high-eur", 8, count=2)
    remote.config = remote.write_config(cap=6.0)
    script = remote.script()
    follower = remote.popen("submit", "--json", "--gpus", "8", "--time", "10:00", str(script))
    try:
        row = _pending_dispatch(slurm, "high-eur")
        script.unlink()
        out, err = follower.communicate(timeout=180)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err
    result = json.loads(out)
    assert (result["state"], result["qos"]) == ("RUNNING", "normal-eur"), err
    dispatch_id = _dispatch_of(row)
    assert ledger(tmp_path) == []
    assert remote.local_calls() == []
    with read_journal(tmp_path) as journal:
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
