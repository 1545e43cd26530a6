"""The [budget] has no back door, on the real local SLURM through the real CLI and background driver, the paid lane a
command lane whose command appends each dispatch id to a ledger file: ``submit --pin <paid lane>`` asks the same
budget as a walked handoff (refused with exit 12, or waiting for room), several pins racing for the last of it pass
it together never; and a command on the state dir without the config (or with another project's) never replaces the
budget the driver applies: only the config it came from changes it, and says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.core.vocab import State

from .cli_harness import cli, final_row, json_of, ledger_config, read_journal, start_cli, stop_background_driver
from .conftest import Cluster
from .settled import LEDGER_CODE, assert_settled, jobs_of, ledger

pytestmark = pytest.mark.slurm

PRICE = 1.0
"""The paid lane's price per GPU-hour."""
NEED = 8 * 10 * 60 / 3600
"""An 8-GPU, 10-minute job's worst case in paid GPU-hours (1.33)."""


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[None]:
    """Stop the test's background driver after it."""
    yield
    stop_background_driver(tmp_path, [signal.SIGCONT, signal.SIGTERM])


def _config(tmp_path: Path, budget: str, *, name: str = "fellows.toml", lane: bool = True) -> Path:
    """Short caps, a 0.5 s poll, the ledger command lane ``gcp`` at PRICE a GPU-hour, and ``budget``'s lines."""
    command = json.dumps([sys.executable, "-c", LEDGER_CODE, str(tmp_path / "gcp.ledger"), "{dispatch_id}"])
    path = ledger_config(
        tmp_path,
        cap=1.0,
        poll=0.5,
        router="driver_idle_seconds = 5\n",
        lane=f"command = {command}\nprice_per_gpu_hour = {PRICE}\n",
        lanes=lane,
        name=name,
    )
    if budget:
        path.write_text(path.read_text(encoding="utf-8") + f"\n[budget]\n{budget}", encoding="utf-8")
    return path


def _pin(slurm: Cluster, *flags: str, lane: str = "gcp", gpus: int = 8, limit: str = "10:00") -> list[str]:
    """A submit pinned to ``lane`` (the paid lane ``gcp`` by default) of a job sleeping a minute."""
    script = slurm.script(60)
    return ["submit", "--pin", lane, *flags, "--gpus", str(gpus), "--time", limit, script, "--", *slurm.job_args()]


def _row(tmp_path: Path, dispatch_id: str) -> Any:
    """The dispatch's journal row."""
    with read_journal(tmp_path) as journal:
        return journal.dispatch(dispatch_id)


def _ids(tmp_path: Path) -> list[str]:
    """Every dispatch of the journal."""
    with read_journal(tmp_path) as journal:
        return [row.id for row in journal.dispatches()]


def _day_committed(config: Path) -> float:
    """Today's paid GPU-hours at worst (what ran plus what the live runs may still add), as ``spend`` counts them."""
    total = json_of(cli(config, "spend", "--json"))["day"]["total"]
    return float(total["gpu_hours"]) + float(total["open_gpu_hours"] or 0.0)


def _pins_settled(tmp_path: Path, ids: list[str]) -> None:
    """Each pinned dispatch: handed off once (one ledger line) or NO_BUDGET with none; nothing left to hand off."""
    handed = ledger(tmp_path)
    for dispatch_id in ids:
        row = _row(tmp_path, dispatch_id)
        assert row is not None, dispatch_id
        assert row.final, (dispatch_id, row)
        expected = 1 if row.state == State.HANDED_OFF else 0
        assert row.state in (State.HANDED_OFF, State.NO_BUDGET), (dispatch_id, row.state)
        assert handed.count(dispatch_id) == expected, (dispatch_id, row.state, handed)


@pytest.mark.usefixtures("stopped")
def test_a_pin_over_the_budget_is_refused_with_exit_12_and_its_command_never_runs(
    slurm: Cluster, tmp_path: Path
) -> None:
    """The issue's case: a 20-GPU x 1 h job pinned to the paid lane against 10 GPU-h a day, 4 a job and 5 a month,
    ``on_budget = "refuse"``: exit 12 with the budget's reason in one line, NO_BUDGET, the ledger empty, nothing
    spent."""
    config = _config(
        tmp_path,
        'paid_gpu_hours_per_day = 10\nmax_paid_gpu_hours_per_job = 4\npaid_cost_per_month = 5\non_budget = "refuse"\n',
    )
    result = cli(config, *_pin(slurm, gpus=20, limit="1:00:00"))
    assert result.returncode == 12, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    errors = [line for line in result.stderr.splitlines() if line.startswith("fellows-fsm: error: ")]
    assert len(errors) == 1, result.stderr
    assert "NO_BUDGET" in errors[0], errors[0]
    assert "max_paid_gpu_hours_per_job = 4" in errors[0], errors[0]
    [dispatch_id] = _ids(tmp_path)
    row = _row(tmp_path, dispatch_id)
    assert (row.state, row.outcome) == ("NO_BUDGET", "no-budget")
    time.sleep(1.0)  # two polls: a command started late would have written the ledger by now
    assert ledger(tmp_path) == []
    assert _day_committed(config) == 0.0
    _pins_settled(tmp_path, [dispatch_id])


@pytest.mark.usefixtures("stopped")
def test_five_pins_at_once_never_pass_the_last_of_the_budget_together(slurm: Cluster, tmp_path: Path) -> None:
    """With 3 paid GPU-hours a day and one 1.33 GPU-h pin already handed off, five more started at once race for the
    1.67 left: exactly one is handed off, the four others exit 12 (NO_BUDGET) and their command never runs; today's
    committed paid GPU-hours stay within 3."""
    config = _config(tmp_path, 'paid_gpu_hours_per_day = 3\non_budget = "refuse"\n')
    first = cli(config, *_pin(slurm, "--detach"))
    assert first.returncode == 0, first.stderr
    assert ledger(tmp_path) == [first.stdout.strip()]
    racing = [start_cli(config, *_pin(slurm, "--detach")) for _ in range(5)]
    codes = []
    for process in racing:
        _, err = process.communicate(timeout=120)
        codes.append(process.returncode)
        assert process.returncode in (0, 12), err
    assert sorted(codes) == [0, 12, 12, 12, 12], codes
    ids = _ids(tmp_path)
    assert len(ids) == 6
    time.sleep(1.0)  # two polls: a command started late would have written the ledger by now
    assert len(ledger(tmp_path)) == 2, ledger(tmp_path)
    assert _day_committed(config) == pytest.approx(2 * NEED)
    assert _day_committed(config) <= 3
    _pins_settled(tmp_path, ids)


@pytest.mark.usefixtures("stopped")
def test_a_pin_waits_for_the_budget_and_only_its_own_config_lets_it_through(slurm: Cluster, tmp_path: Path) -> None:
    """``on_budget = "wait"`` with 2 paid GPU-hours a day: a second 1.33 GPU-h pin waits (``--detach`` returns its
    id; status says why; its command does not run). ``spend`` from a directory with no config (the state dir from the
    environment) and a submit with another project's config (no [budget]) leave the budget as it was, and say so on
    stderr; the pin still waits. ``spend`` with its own config, raised to 4, lets it through: handed off once."""
    config = _config(tmp_path, "paid_gpu_hours_per_day = 2\n")
    first = cli(config, *_pin(slurm, "--detach"))
    assert first.returncode == 0, first.stderr
    second = cli(config, *_pin(slurm, "--detach"))
    assert second.returncode == 0, second.stderr
    waiting = second.stdout.strip()
    row = _row(tmp_path, waiting)
    assert (row.state, row.outcome) == ("HANDING_OFF", "budget")
    [shown] = json_of(cli(config, "status", "--json", waiting))
    assert shown["budget_reason"].startswith("budget: 1.3 of 2 paid GPU-hours used today"), shown
    time.sleep(1.5)  # three polls: it waits, its command not run
    assert ledger(tmp_path) == [first.stdout.strip()]

    # No config file: the state dir from the environment.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FELLOWS_FSM_CONFIG"}
    env["FELLOWS_FSM_STATE_DIR"] = str(tmp_path / "state")
    spend = subprocess.run(
        [str(Path(sys.executable).parent / "fellows-fsm"), "spend"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=elsewhere,
    )
    assert spend.returncode == 0, spend.stderr
    assert "keeps the [budget] of" in spend.stderr, spend.stderr
    assert "no config file" in spend.stderr, spend.stderr
    # Another project's config on the same state dir, with no [budget]: its pin fellows is queued, the budget kept.
    other = _config(tmp_path, "", name="other.toml")
    pinned = cli(other, *_pin(slurm, "--detach", lane="fellows"))
    assert pinned.returncode == 0, pinned.stderr
    assert "keeps the [budget] of" in pinned.stderr, pinned.stderr
    assert "not applied" in pinned.stderr, pinned.stderr
    time.sleep(1.5)  # three polls: the driver's budget is still 2, the pin still waits
    assert ledger(tmp_path) == [first.stdout.strip()]
    assert _row(tmp_path, waiting).state == "HANDING_OFF"

    config.write_text(config.read_text().replace("= 2\n", "= 4\n"), encoding="utf-8")
    raised = cli(config, "spend")
    assert raised.returncode == 0, raised.stderr
    assert "applies the [budget] of" in raised.stderr
    assert "paid_gpu_hours_per_day = 4" in raised.stderr
    slurm.wait_for(lambda: _row(tmp_path, waiting).final, "the waiting pin's handoff", timeout=60, tick=0.25)
    assert ledger(tmp_path) == [first.stdout.strip(), waiting]
    assert _day_committed(config) <= 4
    _pins_settled(tmp_path, [first.stdout.strip(), waiting])
    fellows_pin = pinned.stdout.strip()
    if not _row(tmp_path, fellows_pin).final:
        assert cli(other, "cancel", fellows_pin).returncode == 0
    with read_journal(tmp_path) as journal:
        assert_settled(slurm, journal, tmp_path, [fellows_pin])


@pytest.mark.usefixtures("stopped")
def test_a_command_without_the_config_never_hands_off_a_walk_waiting_for_the_budget(
    slurm: Cluster, tmp_path: Path
) -> None:
    """The issue's case: a job waits PENDING on low-eur for the budget (1 paid GPU-hour a day, its worst case 1.33);
    ``spend`` from a directory with no fellows.toml (the state dir from the environment) keeps the budget, says so,
    and the job still waits, its job pending on low-eur and nothing handed off."""
    config = _config(tmp_path, "paid_gpu_hours_per_day = 1\n")
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    slurm.occupy("low-eur", 8, count=4)
    script = slurm.script(60)
    submitted = cli(config, "submit", "--detach", "--gpus", "8", "--time", "10:00", script, "--", *slurm.job_args())
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    slurm.wait_for(
        lambda: _row(tmp_path, dispatch_id).outcome == "budget", "the budget_wait step", timeout=90, tick=0.25
    )
    env = {k: v for k, v in os.environ.items() if k != "FELLOWS_FSM_CONFIG"}
    env["FELLOWS_FSM_STATE_DIR"] = str(tmp_path / "state")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spend = subprocess.run(
        [str(Path(sys.executable).parent / "fellows-fsm"), "spend", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=elsewhere,
    )
    assert spend.returncode == 0, spend.stderr
    time.sleep(2.0)  # four polls: a handoff would have been made by now
    assert ledger(tmp_path) == []
    (pending,) = [j for j in jobs_of(slurm, dispatch_id) if j.state == "PENDING"]
    assert pending.qos == "low-eur"
    assert "keeps the [budget] of" in spend.stderr, spend.stderr
    assert json.loads(spend.stdout)["budget"]["paid_gpu_hours_per_day"] == 1  # what the driver applies
    assert cli(config, "cancel", dispatch_id).returncode == 0
    with read_journal(tmp_path) as journal:
        assert_settled(slurm, journal, tmp_path, [dispatch_id])


# A paid lane on the real cluster that does not stop a job at its time limit: its command queues the job with
# sbatch with no --time of its own, its status reads squeue, its cancel is scancel.
_STATUS = """\
s=$(squeue -h -t all --name="fsm-$FSM_DISPATCH_ID" -o %T | head -n 1)
case "$s" in
    PENDING|CONFIGURING) echo "queued $s" ;;
    RUNNING|COMPLETING) echo "running $s" ;;
    COMPLETED) echo succeeded ;;
    CANCELLED) echo cancelled ;;
    *) echo "failed $s" ;;
esac"""


@pytest.mark.usefixtures("stopped")
def test_a_paid_job_its_lane_does_not_stop_is_deleted_within_the_bound_it_was_handed_off_with(
    slurm: Cluster, tmp_path: Path
) -> None:
    """A 20-second, 8-GPU job pinned to a followed command lane whose job runs on with no limit: it is deleted one
    poll before its limit (PAID_FAILED, paid-over-its-limit, the note says so), its SLURM job cancelled, and what it
    counts never passes its bound of 8 GPUs x 20 s."""
    submit = (
        'exec sbatch --parsable --job-name="fsm-$FSM_DISPATCH_ID" --qos=high-eur --gres="gpu:$FSM_GPUS" '
        f'--chdir={slurm.jobs_dir} --output=/dev/null "$FSM_SCRIPT"'
    )
    lane = (
        f"command = {json.dumps(['sh', '-c', submit])}\nstatus = {json.dumps(['sh', '-c', _STATUS])}\n"
        f'cancel = ["scancel", "--name=fsm-{{dispatch_id}}"]\nprice_per_gpu_hour = {PRICE}\n'
    )
    config = ledger_config(tmp_path, cap=1.0, poll=0.5, router="driver_idle_seconds = 5\n", lane=lane)
    result = cli(config, "submit", "--pin", "gcp", "--detach", "--gpus", "8", "--time", "0:20", slurm.script(600))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    slurm.wait_for(lambda: _row(tmp_path, dispatch_id).final, "the paid job's end", timeout=90, tick=0.25)
    row = _row(tmp_path, dispatch_id)
    assert (row.state, row.outcome) == ("PAID_FAILED", "paid-over-its-limit")
    with read_journal(tmp_path) as journal:
        note = journal.steps(dispatch_id)[-1].note
        slurm.wait_for(lambda: journal.paid_run(dispatch_id).ended_at is not None, "the delete", timeout=30)
        run = journal.paid_run(dispatch_id)
    assert run.bound_gpu_hours == pytest.approx(8 * 20 / 3600)
    assert 0 < run.gpu_hours(time.time()) <= run.bound_gpu_hours
    assert "within a poll (0.5 s) of its time limit of 20 s" in note, note
    slurm.wait_for(
        lambda: (
            subprocess.run(
                ["squeue", "-h", "-t", "PENDING,RUNNING", f"--name=fsm-{dispatch_id}", "-o", "%T"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            == ""
        ),
        "its SLURM job cancelled",
        timeout=30,
    )


@pytest.mark.usefixtures("stopped")
def test_a_job_the_budget_can_never_pay_is_told_at_submit_and_walks_free_only(slurm: Cluster, tmp_path: Path) -> None:
    """Under ``on_budget = "wait"`` and 4 GPU-hours a job, an 8-GPU x 1 h job: submit notes at once that it can never
    be handed to gcp (naming the key) and walks the free cluster, where it runs; pinned to gcp it is refused with
    exit 12 and nothing journaled; the ledger stays empty."""
    config = _config(tmp_path, 'max_paid_gpu_hours_per_job = 4\non_budget = "wait"\n')
    script = slurm.script(60)
    walked = cli(config, "submit", "--detach", "--gpus", "8", "--time", "1:00:00", script, "--", *slurm.job_args())
    assert walked.returncode == 0, walked.stderr
    dispatch_id = walked.stdout.strip()
    notes = [line for line in walked.stderr.splitlines() if "can never be handed to lane gcp" in line]
    assert len(notes) == 1, walked.stderr
    assert "max_paid_gpu_hours_per_job = 4" in notes[0]
    pinned = cli(config, *_pin(slurm, limit="1:00:00"))
    assert pinned.returncode == 12, f"exit {pinned.returncode}: {pinned.stderr}"
    assert "lane gcp can never run it" in pinned.stderr
    assert _ids(tmp_path) == [dispatch_id]  # the pin journaled nothing
    assert final_row(slurm, tmp_path, dispatch_id).state == State.RUNNING  # the free cluster has room: it runs
    with read_journal(tmp_path) as journal:
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
    assert ledger(tmp_path) == []
