"""`fellows-fsm logs` on the fake port and a MockRunner's SLURM: the file where scontrol says it is, --err, the
journaled #SBATCH --output, exit 30/31/32, a command lane's logs template (ui/logs.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fellows_fsm.config.file import load_config
from fellows_fsm.driver.inbox import enqueue
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.transport import Reply, Request
from fellows_fsm.ui import app as ui_app
from tests.unit.cli_helpers import SchedulingFake, _toml, refused, run


def _detached(script: Path) -> str:
    result = run("submit", "--detach", str(script))
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def _row_of(env: Path, dispatch_id: str):  # type: ignore[no-untyped-def]
    journal = Journal(env / "state" / "journal.sqlite3", readonly=True)
    try:
        return journal.dispatch(dispatch_id)
    finally:
        journal.close()


def _slurm_answering(monkeypatch: pytest.MonkeyPatch, job_id: str, out: Path, err: Path) -> MockRunner:
    """The port becomes a real SlurmScheduler whose scontrol says job ``job_id`` writes ``out`` and ``err``."""

    def handler(request: Request) -> Reply:
        assert request.argv == ("scontrol", "show", "job", "-o", job_id), request.argv
        return Reply(0, f"JobId={job_id} WorkDir=/w StdErr={err} StdIn=/dev/null StdOut={out} Power=\n", "", 0.0)

    runner = MockRunner(handler)
    monkeypatch.setattr(ui_app, "make_scheduler", lambda config: SlurmScheduler(runner))
    return runner


def test_logs_prints_the_file_scontrol_names_and_err_the_error_file(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 0 with the file's bytes as they are (non-UTF-8 too); --err prints the error file; one scontrol each."""
    dispatch_id = _detached(script)
    job_id = _row_of(env, dispatch_id).job_id
    out, err = env / "o.txt", env / "e.txt"
    out.write_bytes(b"step 1\n\xffraw\n")
    err.write_text("warning\n")
    runner = _slurm_answering(monkeypatch, job_id, out, err)
    shown = run("logs", dispatch_id)
    assert (shown.exit_code, shown.stdout_bytes) == (0, b"step 1\n\xffraw\n")
    shown = run("logs", "--err", dispatch_id[:6])
    assert (shown.exit_code, shown.stdout) == (0, "warning\n")
    assert [a[0] for a in runner.argvs] == ["scontrol", "scontrol"]


def test_a_missing_file_is_exit_31_naming_the_path_and_where(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's file not there: one line, exit 31, with the path, the job and where it was looked for."""
    dispatch_id = _detached(script)
    job_id = _row_of(env, dispatch_id).job_id
    _slurm_answering(monkeypatch, job_id, env / "none.out", env / "none.err")
    line = refused(run("logs", dispatch_id), 31, str(env / "none.out"), f"SLURM job {job_id}", "in a MockTransport")
    assert "scontrol says" in line


def test_the_scripts_output_line_is_journaled_with_the_dispatch(env: Path, scheduling_fake: SchedulingFake) -> None:
    """#SBATCH --output and --error are kept in the dispatch's settings at submit (its script copy goes at the end)."""
    script = env / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH -t 10\n#SBATCH --output=o-%j.txt\n#SBATCH -e x\nls\n")
    row = _row_of(env, _detached(script))
    assert row.settings["output"] == {"output": "o-%j.txt", "error": "x"}


def test_a_dispatch_with_no_job_yet_is_exit_30_and_an_unknown_one_exit_2(env: Path) -> None:
    """A dispatch journaled but not yet submitted has no job: exit 30 in one line; no such dispatch: exit 2."""
    config = load_config(env / "fellows.toml")
    journal = Journal(config.journal_path)
    try:
        dispatch_id = enqueue(config, journal, JobSpec(name="t", script=str(env / "t.sbatch"), gpus=1))
    finally:
        journal.close()
    refused(run("logs", dispatch_id), 30, dispatch_id, "has no SLURM job")
    refused(run("logs", "ffffffffffff"), 2, "no dispatch 'ffffffffffff'")


def _printer() -> str:
    code = "import sys; print('log of', sys.argv[1])"
    return json.dumps([sys.executable, "-c", code, "{dispatch_id}"])


def test_a_command_lanes_logs_template_is_run_and_a_lane_without_one_says_where(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A dispatch handed to a command lane: its logs argv's output, exit 0; a lane with no logs: one line, exit 32."""
    ledger = json.dumps([sys.executable, "-c", "pass"])
    (env / "fellows.toml").write_text(_toml(env, gcp=f"{ledger}\nlogs = {_printer()}"))
    result = run("submit", "--pin", "gcp", "--json", str(script))
    assert result.exit_code == 0, result.output
    dispatch_id = json.loads(result.stdout)["dispatch_id"]
    shown = run("logs", dispatch_id)
    assert (shown.exit_code, shown.stdout) == (0, f"log of {dispatch_id}\n")

    (env / "fellows.toml").write_text(_toml(env, gcp=ledger))
    result = run("submit", "--pin", "gcp", "--json", str(script))
    other = json.loads(result.stdout)["dispatch_id"]
    shown = run("logs", other)
    assert shown.exit_code == 32
    assert shown.stdout.strip().splitlines() == [
        f"[lanes.gcp] has no logs command: look for job fsm-{other} with the lane's own tools, or add logs = [...] "
        "to the lane"
    ]


def test_the_completion_script_completes_logs_and_its_options() -> None:
    """The shell completion (click's, from the commands themselves) completes 'lo' to logs and offers --err, -f."""
    from click.testing import CliRunner  # noqa: PLC0415 - only these lines drive the completion protocol

    from fellows_fsm import cli  # noqa: PLC0415

    def complete(words: str) -> list[str]:
        env = {"_FELLOWS_FSM_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        return CliRunner().invoke(cli.main, [], env=env, prog_name="fellows-fsm").output.split()

    assert "plain,logs" in complete("fellows-fsm lo")
    options = complete("fellows-fsm logs abc -")
    assert {"plain,--err", "plain,--follow", "plain,-f"} <= set(options)


@pytest.mark.parametrize(
    ("code", "timeout", "words"),
    [
        ("import sys; print('partial'); sys.exit(3)", 30, "logs of dispatch"),
        ("import time; print('partial', flush=True); time.sleep(60)", 0.5, "ran past its 0.5 s"),
    ],
    ids=["exits-3", "hangs-past-its-timeout"],
)
def test_a_logs_command_that_fails_or_hangs_is_exit_8_in_one_line(
    env: Path, scheduling_fake: SchedulingFake, script: Path, code: str, timeout: float, words: str
) -> None:
    """A lane's logs that exits non-zero, or runs past the lane's timeout_seconds (killed with its group), is a
    LaneError (exit 8, one line); what it printed before is printed."""
    ledger = json.dumps([sys.executable, "-c", "pass"])
    logs = json.dumps([sys.executable, "-c", code])
    (env / "fellows.toml").write_text(_toml(env, gcp=f"{ledger}\nlogs = {logs}\ntimeout_seconds = {timeout}"))
    result = run("submit", "--pin", "gcp", "--json", str(script))
    assert result.exit_code == 0, result.output
    dispatch_id = json.loads(result.stdout)["dispatch_id"]
    shown = run("logs", dispatch_id)
    assert shown.stdout == "partial\n"
    refused(shown, 8, "[lanes.gcp] logs", words)
