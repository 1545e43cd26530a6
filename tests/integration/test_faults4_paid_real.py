"""The fourth round of faults on the real local SLURM (issue 36), around a paid job: the state dir filled while its
paid job is made, and what a command then tells the user (never to pay twice).

Each ends with ``assert_settled``: exactly one job that ran or exactly one paid handoff, nothing left pending.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import FELLOWS_FSM, cli, json_of, ledger_config, read_journal, stop_background_driver, submit_args
from .conftest import Cluster
from .settled import assert_settled, jobs_of, ledger
from .test_faults3_handoff_real import _fill_node, small_state_dir

pytestmark = pytest.mark.slurm

__all__ = ["small_state_dir"]  # a fixture, used by name


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def _filling_lane(tmp_path: Path, state: Path) -> Path:
    """A config whose gcp lane makes the paid job (appends the dispatch id to the ledger), then fills the state dir's
    filesystem before it exits 0: the driver cannot journal how the handoff ended."""
    book = tmp_path / "gcp.ledger"
    code = f'echo "$1" >> {book}; cat /dev/zero > {state / "filler"} 2>/dev/null; exit 0'
    lane = f"command = {json.dumps(['sh', '-c', code, 'sh', '{dispatch_id}'])}\n"
    return ledger_config(tmp_path, cap=2.0, poll=0.5, park_early="off", router="driver_idle_seconds = 5\n", lane=lane)


@pytest.mark.parametrize("walk", [False, True], ids=["pinned", "walked"])
def test_a_disk_filled_during_the_paid_create_names_the_dispatch_and_never_says_submit_again(
    slurm: Cluster, tmp_path: Path, small_state_dir: Path, walk: bool
) -> None:
    """The gcp command makes the paid job, then fills the state dir: `submit` (pinned to gcp, or walked there) exits
    non-zero naming the dispatch, saying its paid job exists and not to submit it again; once space is freed,
    `watch` ends it HANDED_OFF with one paid handoff."""
    if walk:
        _fill_node(slurm)
    config = _filling_lane(tmp_path, small_state_dir)
    flags = () if walk else ("--pin", "gcp")
    done = cli(config, *submit_args(slurm, *flags), timeout=120)
    # 7: the full disk, or 1: a driver started on it that died at once (the issue saw both), said of the dispatch
    assert done.returncode in (1, 7), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [dispatch_id] = ledger(tmp_path)
    said = done.stdout + done.stderr
    assert dispatch_id in said, said
    assert "paid job" in said, said
    assert "do not submit it again" in said, said
    assert "run the command again" not in said, said
    assert "nothing is started or queued" not in said, said
    (small_state_dir / "filler").unlink()
    watched = cli(config, "watch", timeout=120)
    assert watched.returncode == 0, watched.stderr
    assert ledger(tmp_path) == [dispatch_id]
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert row.state == "HANDED_OFF", row
        assert_settled(slurm, journal, tmp_path, [dispatch_id])


# --------------------------------------------------------------------------- a lane that will not cancel
def _refusing_lane(tmp_path: Path) -> Path:
    """A config whose followed gcp lane makes a paid job (a file, and the ledger line), says it runs until it is
    cancelled, and refuses every cancel ("quota exceeded", exit 1) until tmp_path/allow-cancel exists."""
    jobs = tmp_path / "paid-jobs"
    jobs.mkdir()
    make = f'echo "$1" >> {tmp_path / "gcp.ledger"}; touch {jobs}/"$1"'
    status = f'if [ -e {jobs}/"$FSM_DISPATCH_ID".cancelled ]; then echo cancelled; else echo running; fi'
    cancel = (
        f'if [ -e {tmp_path / "allow-cancel"} ]; then touch {jobs}/"$FSM_DISPATCH_ID".cancelled; '
        'else echo "quota exceeded" >&2; exit 1; fi'
    )
    lane = (
        f"command = {json.dumps(['sh', '-c', make, 'sh', '{dispatch_id}'])}\n"
        f"status = {json.dumps(['sh', '-c', status])}\n"
        f"cancel = {json.dumps(['sh', '-c', cancel])}\n"
        "price_per_gpu_hour = 2.5\n"
    )
    return ledger_config(tmp_path, cap=2.0, poll=0.5, park_early="off", lane=lane)


def _paid_status(tmp_path: Path, dispatch_id: str) -> str | None:
    """The dispatch's paid run's status in the journal (None: no paid run)."""
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
    return None if run is None else run.status


def test_a_cancel_its_lane_refuses_says_the_delete_is_pending_until_it_is_taken(slurm: Cluster, tmp_path: Path) -> None:
    """The lane's cancel fails ("quota exceeded", exit 1) on a running paid job: `cancel` exits 8 saying the delete
    is pending and asked again each poll (never "withdrawn (... cancelled)"), `status` shows it being cancelled, a
    second `cancel` says the same; once the lane takes the delete the run is cancelled, paid once."""
    config = _refusing_lane(tmp_path)
    submitted = cli(config, *submit_args(slurm, "--pin", "gcp", "--detach"), timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    slurm.wait_for(lambda: _paid_status(tmp_path, dispatch_id) == "running", "the paid job to run", timeout=60)
    for attempt in ("first", "second"):
        done = cli(config, "cancel", dispatch_id, timeout=120)
        assert done.returncode == 8, (attempt, done.stdout, done.stderr)
        assert "withdrawn (" not in done.stdout, (attempt, done.stdout)
        errors = [line for line in done.stderr.splitlines() if line.startswith("fellows-fsm: error: ")]
        assert len(errors) == 1, (attempt, done.stderr)
        assert "its paid job on lane gcp is not deleted yet (" in errors[0], (attempt, errors)
        assert "quota exceeded" in errors[0], (attempt, errors)
        assert "again each poll" in errors[0], (attempt, errors)
        assert "cannot take it back" not in done.stderr, (attempt, done.stderr)
    shown = cli(config, "status", timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"{dispatch_id} on gcp: being cancelled" in " ".join(shown.stdout.split()), shown.stdout
    [listed] = json_of(cli(config, "status", "--json", timeout=60))
    assert (listed["state"], listed["paid"]["status"]) == ("WITHDRAWN", "cancelling"), listed
    (tmp_path / "allow-cancel").touch()
    slurm.wait_for(lambda: _paid_status(tmp_path, dispatch_id) == "cancelled", "the delete to be taken", timeout=60)
    shown = cli(config, "status", timeout=60)
    assert "being cancelled" not in shown.stdout, shown.stdout
    assert ledger(tmp_path) == [dispatch_id]  # one paid job, never made again
    assert jobs_of(slurm, dispatch_id) == []


# --------------------------------------------------------------------------- words
def test_ctrl_c_while_the_live_view_follows_a_handoff_says_detached_on_a_line_of_its_own(
    slurm: Cluster, tmp_path: Path
) -> None:
    """`submit --pin gcp` with stdout and stderr in one pipe, Ctrl-C while the gcp command runs: the live view's
    last line ("... lane gcp") and "detached: dispatch ..." are two lines (exit 130), and its panel says the dispatch is
    pinned to lane gcp (not "to None"); the handoff goes on, once."""
    book = tmp_path / "gcp.ledger"
    code = f'sleep 8; echo "$1" >> {book}'
    lane = f"command = {json.dumps(['sh', '-c', code, 'sh', '{dispatch_id}'])}\n"
    config = ledger_config(tmp_path, cap=2.0, poll=0.5, park_early="off", lane=lane)
    submit = subprocess.Popen(
        [str(FELLOWS_FSM), "--config", str(config), *submit_args(slurm, "--pin", "gcp")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def handing_off() -> bool:
            with read_journal(tmp_path) as journal:
                rows = journal.dispatches()
            return bool(rows) and rows[0].state == "HANDING_OFF"

        slurm.wait_for(handing_off, "the gcp command to run", timeout=60)
        time.sleep(3.0)  # a redraw or two of the live view (1 s was too short for a loaded machine to start it)
        submit.send_signal(signal.SIGINT)
        out, _ = submit.communicate(timeout=60)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    assert submit.returncode == 130, out
    [said] = [line for line in out.splitlines() if "detached: dispatch" in line]
    assert said.startswith("detached: dispatch"), out
    assert "pinned to None" not in out, out
    assert "never: pinned to lane gcp" in out, out
    with read_journal(tmp_path) as journal:
        [row] = journal.dispatches()
    watched = cli(config, "watch", timeout=120)
    assert watched.returncode == 0, watched.stderr
    assert ledger(tmp_path) == [row.id]
    with read_journal(tmp_path) as journal:
        assert_settled(slurm, journal, tmp_path, [row.id])
