"""`fellows-fsm wait` and `submit --wait` on the scheduling fake: they block until the job ended, say how, and exit
0 when it succeeded, a code per result otherwise (usage.md's table), 124 at `--timeout`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.unit.cli_helpers import SchedulingFake, run


def _running(scheduling_fake: SchedulingFake, script: Path) -> tuple[str, str]:
    """``submit --detach`` of ``script``, followed until its job runs: the dispatch id and its job id."""
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    for _ in range(200):
        [row] = json.loads(run("status", dispatch_id, "--json").stdout)
        if row["state"] == "RUNNING":
            return dispatch_id, row["slurm_job_id"]
        time.sleep(0.05)
    raise AssertionError(f"dispatch {dispatch_id} never ran")


def test_submit_wait_exits_0_once_its_job_succeeded(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """submit --wait follows past RUNNING to the end and exits 0 for a job that succeeded, saying so."""
    scheduling_fake.run_seconds = 0.2
    result = run("submit", "--wait", str(script))
    assert result.exit_code == 0, result.output
    assert "succeeded (exit 0)" in result.stdout


def test_wait_exits_by_the_result(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """wait exits 20 for a job that failed (exit 3 said), 25 for one cancelled outside, 0 for both only if both
    succeeded; --json lists each dispatch with its result and exit code."""
    failed, failed_job = _running(scheduling_fake, script)
    cancelled, cancelled_job = _running(scheduling_fake, script)
    scheduling_fake.end(failed_job, "FAILED", exit_code=3)
    scheduling_fake.end(cancelled_job, "CANCELLED by 1000")
    result = run("wait", failed)
    assert result.exit_code == 20, result.output
    assert "failed (exit 3)" in result.stdout
    assert run("wait", cancelled).exit_code == 25
    both = run("wait", cancelled, failed, "--json")
    assert both.exit_code == 25  # the first that did not succeed
    rows = json.loads(both.stdout)
    assert [(r["result"], r["exit_code"], r["final"]) for r in rows] == [("cancelled", None, True), ("failed", 3, True)]


def test_wait_gives_up_at_its_timeout_and_the_job_goes_on(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """wait --timeout on a job that still runs exits 124 with one line; the dispatch is still RUNNING."""
    dispatch_id, _ = _running(scheduling_fake, script)
    result = run("wait", dispatch_id, "--timeout", "0.3")
    assert result.exit_code == 124, result.output
    assert f"{dispatch_id} not ended after 0.3 s" in result.stderr
    [row] = json.loads(run("status", dispatch_id, "--json").stdout)
    assert (row["state"], row["final"]) == ("RUNNING", False)


def test_wait_of_a_withdrawn_dispatch_and_of_an_unknown_id(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A dispatch withdrawn before its job ran is cancelled (25); an id the journal does not hold is a usage
    error (2) before any waiting."""
    scheduling_fake.scheduling = False
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    assert run("cancel", dispatch_id).exit_code == 0
    assert run("wait", dispatch_id).exit_code == 25
    assert run("wait", "nosuchid").exit_code == 2


def test_cancel_of_a_running_dispatch_ends_it_cancelled(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """cancel of a dispatch whose job runs scancels the job and ends it WITHDRAWN with the result cancelled (wait
    exits 25); a cancel of a dispatch whose job ended says so and changes nothing (exit 1)."""
    dispatch_id, job_id = _running(scheduling_fake, script)
    result = run("cancel", dispatch_id)
    assert result.exit_code == 0, result.output
    assert scheduling_fake.jobs[job_id].state == "CANCELLED"
    [row] = json.loads(run("status", dispatch_id, "--json").stdout)
    assert (row["state"], row["final"], row["result"]) == ("WITHDRAWN", True, "cancelled")
    assert run("wait", dispatch_id).exit_code == 25
    scheduling_fake.run_seconds = 0.1
    ended = run("submit", "--wait", str(script))
    assert ended.exit_code == 0, ended.output
    [last] = [r for r in json.loads(run("status", "--json").stdout) if r["state"] == "ENDED"]
    again = run("cancel", last["dispatch_id"])
    assert again.exit_code == 1
    assert "has ended (succeeded)" in again.stderr
