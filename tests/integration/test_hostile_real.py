"""The second round of faults on the real local SLURM: a failed handoff whose child would still pay, sbatch
options that would stop the loop or miscount, a damaged journal, and someone else moving a job (scontrol update).

After each, the promise of ``assert_settled``: one job that ran or one handoff (or withdrawn, or a failed
handoff with neither), and nothing of the dispatch left pending.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.processes import processes_with

from .cli_harness import cli, read_journal, submit_args, watch_walked
from .conftest import Cluster
from .settled import assert_settled, ledger
from .test_faults_real import cli_config, damage_journal

pytestmark = pytest.mark.slurm


def _our_jobs(slurm: Cluster) -> set[str]:
    """Every job squeue shows (ended ones too, for MinJobAge) that carries a dispatch token. A test compares what is
    new against what was there before it: an earlier test's ended job may leave squeue meanwhile (MinJobAge)."""
    return {r.job_id for r in slurm.queue() if r.comment.startswith("fsm-")}


def test_a_failed_handoff_leaves_no_child_to_pay_and_a_retry_pays_once(slurm: Cluster, tmp_path: Path) -> None:
    """A gcp command that exits 3 while its children (one in a new session) would append to the ledger 3 s later:
    exit 8, no process of it left, and a retry with a working command makes exactly one paid handoff."""
    before = _our_jobs(slurm)
    book = tmp_path / "gcp.ledger"
    late = f'trap "" TERM; sleep 8; echo "$1" >> {book}'
    code = f'(sleep 8; echo "$1" >> {book}) & setsid sh -c \'{late}\' sh "$1" & exit 3'
    config = cli_config(tmp_path)
    text = config.read_text().split("[lanes.gcp]")[0]
    config.write_text(text + f"[lanes.gcp]\ncommand = {json.dumps(['sh', '-c', code, 'sh', '{dispatch_id}'])}\n")
    failed = cli(config, "submit", "--json", "--pin", "gcp", slurm.script(1))
    assert failed.returncode == 8, failed.stderr
    assert processes_with(str(book)) == []  # nothing is left that could still write the ledger
    assert ledger(tmp_path) == []
    retry = cli_config(tmp_path)  # the ledger lane: appends the dispatch id at once
    done = cli(retry, "submit", "--json", "--pin", "gcp", slurm.script(1))
    assert done.returncode == 0, done.stderr
    second = json.loads(done.stdout)["dispatch_id"]
    assert ledger(tmp_path) == [second]
    journal = read_journal(tmp_path)
    try:
        first = json.loads(failed.stdout)["dispatch_id"]
        row = journal.dispatch(first)
        assert row is not None
        assert row.state == "HANDOFF_FAILED"
        assert_settled(slurm, journal, tmp_path, [second])
    finally:
        journal.close()
    assert _our_jobs(slurm) - before == set()  # no new job (an ended one of an earlier test may age out)


# --------------------------------------------------------------------------- 3: sbatch options that break the loop
@pytest.mark.parametrize(
    "args", [("--", "--wait"), ("--", "-W"), ("--", "--gpus-per-node=2"), ("--", "--gpus-per-node", "2")], ids=" ".join
)
def test_an_sbatch_option_that_would_block_or_miscount_is_refused(
    slurm: Cluster, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`-- --wait` or `--gpus-per-node=2`: exit 2 with one line naming it, nothing queued, no journal written."""
    before = _our_jobs(slurm)
    config = cli_config(tmp_path)
    result = cli(config, "submit", "--detach", "--gpus", "8", slurm.script(300), *args, *slurm.job_args())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert repr(args[1]) in lines[0]
    assert _our_jobs(slurm) - before == set()  # no new job (an ended one of an earlier test may age out)
    assert not (tmp_path / "state" / "journal.sqlite3").exists()


@pytest.mark.parametrize("line", ["#SBATCH --wait", "#SBATCH --gpus-per-node=2"])
def test_an_sbatch_line_that_would_block_or_miscount_is_refused(slurm: Cluster, tmp_path: Path, line: str) -> None:
    """The same options in the script's #SBATCH lines: exit 2 naming the file and the line, nothing queued."""
    before = _our_jobs(slurm)
    script = Path(slurm.script(300))
    script.write_text(f"#!/bin/bash\n#SBATCH --gres=gpu:8\n{line}\nsleep 300\n")
    result = cli(cli_config(tmp_path), "submit", "--detach", str(script), "--", *slurm.job_args())
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"{script.name}:3" in result.stderr
    assert _our_jobs(slurm) - before == set()  # no new job (an ended one of an earlier test may age out)


# --------------------------------------------------------------------------- 5: a damaged journal
def test_a_damaged_journal_refuses_submit_before_sbatch(slurm: Cluster, tmp_path: Path) -> None:
    """With a page of the journal damaged, submit --detach exits 7 with one line and queues no job."""
    before = _our_jobs(slurm)
    config = cli_config(tmp_path)
    for _ in range(3):
        assert cli(config, "submit", "--detach", "--pin", "gcp", slurm.script(1)).returncode == 0
    path = tmp_path / "state" / "journal.sqlite3"
    damage_journal(path)
    kept = path.read_bytes()
    handed = ledger(tmp_path)
    result = cli(config, *submit_args(slurm, "--detach"))
    assert result.returncode == 7, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "keep the file" in result.stderr
    assert _our_jobs(slurm) - before == set()  # no new job (an ended one of an earlier test may age out)
    assert path.read_bytes() == kept
    assert ledger(tmp_path) == handed
    watch = cli(config, "watch", "--once")
    assert watch.returncode == 7, watch.stderr
    assert _our_jobs(slurm) - before == set()  # no new job (an ended one of an earlier test may age out)


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True, timeout=20)


# --------------------------------------------------------------------------- 4: someone else moves the job
def _status(config: Path, dispatch_id: str) -> dict[str, object]:
    result = cli(config, "status", dispatch_id, "--json")
    assert result.returncode == 0, result.stderr
    value = json.loads(result.stdout)
    row: dict[str, object] = value[0] if isinstance(value, list) else value
    return row


def test_a_job_moved_to_another_qos_runs_there_and_every_view_says_so(slurm: Cluster, tmp_path: Path) -> None:
    """`scontrol update JobId=N QOS=low-eur` on the pending job: it runs on low-eur, and status, JSON and history
    say low-eur (what SLURM reports) and that someone else moved it."""
    slurm.occupy("high-eur", 8, count=2)
    config = cli_config(tmp_path, cap=120.0)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    job_id = str(_status(config, dispatch_id)["slurm_job_id"])
    _scontrol("update", f"JobId={job_id}", "QOS=low-eur")
    watch_walked(slurm, config, tmp_path, dispatch_id)  # (watch itself follows a running job to its end)
    status = _status(config, dispatch_id)
    assert (status["state"], status["qos"], status["slurm_job_id"]) == ("RUNNING", "low-eur", job_id)
    assert "low-eur" in cli(config, "status").stdout
    history = json.loads(cli(config, "history", dispatch_id, "--json").stdout)
    assert history[-1]["qos"] == "low-eur"
    assert "someone else moved" in history[-1]["note"]
    assert slurm.row(job_id).qos == "low-eur"
    journal = read_journal(tmp_path)
    try:
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
    finally:
        journal.close()


def test_a_job_whose_time_limit_someone_changed_is_never_walked(slurm: Cluster, tmp_path: Path) -> None:
    """`scontrol update JobId=N TimeLimit=20` on the pending job: history names the change and whose decision it
    is, the job stays on high-eur past its window (never walked to GCP), and runs there once room frees. The window
    is 15 s: the update and the look that sees it must come before it closes, on a machine the whole suite loads
    (with 3 s, a slow submit-and-update let the window close first, and the job was walked to normal-eur)."""
    cap = 15.0
    blockers = slurm.occupy("high-eur", 8, count=2)
    config = cli_config(tmp_path, cap=cap)
    # Without sbatch --deadline: slurmctld would drop a job whose limit grew past it (then withdrawn, not walked).
    config.write_text(config.read_text().replace("[lanes.gcp]", "[router]\ncontroller_deadline = false\n\n[lanes.gcp]"))
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    job_id = str(_status(config, dispatch_id)["slurm_job_id"])
    _scontrol("update", f"JobId={job_id}", "TimeLimit=20")
    assert cli(config, "watch", "--once").returncode == 0
    steps = json.loads(cli(config, "history", dispatch_id, "--json").stdout)
    defer = steps[-1]
    assert defer["trigger"] == "defer"
    assert "time limit 10 min -> 20 min" in defer["note"]
    assert "someone else" in defer["note"]
    assert _status(config, dispatch_id)["outcome"] == "moved-outside"
    closed = datetime.fromisoformat(steps[0]["at"]).timestamp() + cap + 1.0  # the window's end, and a poll
    slurm.wait_for(lambda: time.time() > closed, "the window to close", timeout=cap + 20)
    assert cli(config, "watch", "--once").returncode == 0
    status = _status(config, dispatch_id)
    assert (status["state"], status["slurm_job_id"]) == ("SUBMITTED(high-eur)", job_id)
    assert [j.job_id for j in slurm.queue() if j.comment.startswith(f"fsm-{dispatch_id}")] == [job_id]
    slurm.cancel(*blockers)
    watch_walked(slurm, config, tmp_path, dispatch_id)  # (watch itself follows a running job to its end)
    status = _status(config, dispatch_id)
    assert (status["state"], status["qos"]) == ("RUNNING", "high-eur")
    assert ledger(tmp_path) == []
    journal = read_journal(tmp_path)
    try:
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
    finally:
        journal.close()
