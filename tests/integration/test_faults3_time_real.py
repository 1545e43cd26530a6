"""Time on the real local SLURM (issue 29): an sbatch a stopped controller leaves unanswered past the submit's wait,
a `watch --once` from cron after a gap nobody watched, a wall clock stepped back under the driver.

Each ends with ``assert_settled``: exactly one job that ran or exactly one paid handoff, and none of them while a
free rung could start the job.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import (
    check_settled,
    cli,
    ctld_pid,
    driver_owner,
    driver_pid,
    final_row,
    ledger_config,
    process_alive,
    read_journal,
    sbatch_running,
    start_cli,
    step_notes,
    stop_background_driver,
    submit_args,
)
from .conftest import Cluster
from .settled import jobs_of, ledger, walked

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it (SIGCONT first, in case a test stopped one)."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


# --------------------------------------------------------------------------- case 1: a submit nobody answers
def test_a_first_sbatch_unanswered_past_the_submit_wait_still_runs_on_the_free_rung(
    slurm: Cluster, tmp_path: Path
) -> None:
    """slurmctld stopped (SIGSTOP) for 45 s while the driver's first sbatch waits, longer than submit's 30 s wait,
    with high-eur self-capped and normal-eur free (caps of 5 s): the time nobody answered is not spent from any
    window, so the job RUNS on normal-eur with one job and no paid handoff."""
    slurm.occupy("high-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=5.0, poll=0.5, park_early="own-cap")
    # The grants cache: the submit below goes straight to the driver's sbatch.
    warmed = cli(config, "ladder", timeout=120)
    assert warmed.returncode == 0, warmed.stderr
    ctld = ctld_pid()
    os.kill(ctld, signal.SIGSTOP)
    try:
        submit = start_cli(config, *submit_args(slurm, "--detach", "--json"))
        slurm.wait_for(sbatch_running, "the driver's sbatch to wait on the stopped controller", timeout=30)
        time.sleep(45)
    finally:
        os.kill(ctld, signal.SIGCONT)
    _out, err = submit.communicate(timeout=120)
    assert submit.returncode in (0, 6), err  # 6: SLURM had not queued the job within submit's wait
    with read_journal(tmp_path) as j:
        [row] = j.dispatches()
    row = final_row(slurm, tmp_path, row.id, timeout=90)
    notes = step_notes(tmp_path, row.id)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur"), notes
    assert not [n for n in notes if "window closed before it opened" in n], notes
    assert ledger(tmp_path) == []
    assert len([j for j in jobs_of(slurm, row.id) if j.ever_ran]) == 1
    check_settled(slurm, tmp_path, [row.id])


# --------------------------------------------------------------------------- case 9: cron after a gap
def test_watch_once_from_cron_after_a_gap_nobody_watched_runs_on_the_free_rung(slurm: Cluster, tmp_path: Path) -> None:
    """The driver SIGKILLed while its job waits out high-eur's 8 s window, then 40 s with no process (more than the
    whole ladder): the first `watch --once` (cron's fallback) catches that time up as the background driver and
    `status` do, so the walk goes on to the free normal-eur (one job that RUNS), never to GCP."""
    slurm.occupy("high-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=8.0, poll=2.0, park_early="off")  # the poll interval is cron's period
    result = cli(config, *submit_args(slurm, "--detach"), timeout=120)
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    pid = driver_pid(tmp_path)
    os.kill(pid, signal.SIGKILL)
    slurm.wait_for(lambda: not process_alive(pid), "the killed driver to be gone", timeout=10)
    time.sleep(40)  # three rungs of 8 s, twice over: every window would have closed
    [job] = jobs_of(slurm, dispatch_id)
    assert (job.state, job.qos) == ("PENDING", "high-eur")  # nobody removed it while nobody watched
    end = time.monotonic() + 60
    while True:  # cron: `watch --once` again and again, each a process of its own, until the dispatch ends
        once = cli(config, "watch", "--once", timeout=120)
        assert once.returncode == 0, once.stderr
        assert "started the background driver" not in once.stderr  # cron's own process took the polls
        with read_journal(tmp_path) as j:
            row = j.dispatch(dispatch_id)
        assert row is not None
        if walked(row):
            break
        assert time.monotonic() < end, step_notes(tmp_path, dispatch_id)
        time.sleep(1.0)
    notes = step_notes(tmp_path, dispatch_id)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur"), notes
    assert any(n.startswith("pause high-eur: no driver watched") for n in notes), notes
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


# --------------------------------------------------------------------------- case 5: the wall clock steps back
WALLSTEP_SOURCE = Path(__file__).resolve().parents[1] / "wallstep" / "wallstep.c"
WALLSTEP_LIBRARY = Path(__file__).resolve().parents[2] / "build" / "wallstep" / "libwallstep.so"


def _wallstep() -> Path:
    """The LD_PRELOAD library that steps a process tree's wall clock (scripts/test builds it; built here if a C
    compiler is at hand). Without it the test fails under CI=true, and is skipped elsewhere."""
    if not WALLSTEP_LIBRARY.exists() and shutil.which("cc") is not None:
        WALLSTEP_LIBRARY.parent.mkdir(parents=True, exist_ok=True)
        argv = ["cc", "-shared", "-fPIC", "-O2", "-o", str(WALLSTEP_LIBRARY), str(WALLSTEP_SOURCE), "-ldl"]
        subprocess.run(argv, check=True, timeout=120)
    if not WALLSTEP_LIBRARY.exists():
        why = f"{WALLSTEP_LIBRARY} is missing and no C compiler builds it: run scripts/test"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return WALLSTEP_LIBRARY


def test_a_wall_clock_stepped_back_under_the_driver_stops_nothing(slurm: Cluster, tmp_path: Path) -> None:
    """The background driver's wall clock stepped back one hour mid-rung (an LD_PRELOAD library steps
    CLOCK_REALTIME of the driver's process tree only, monotonic left alone, as NTP does): the driver goes on polling,
    queues a second submit within its wait, answers a `cancel`, and the first job leaves its self-capped high-eur
    after its 8 s window and RUNS on normal-eur; no handoff, no traceback."""
    step = tmp_path / "wall-step-seconds"
    step.write_text("0\n")
    stepped = {**os.environ, "LD_PRELOAD": str(_wallstep()), "WALLSTEP_FILE": str(step)}
    slurm.occupy("high-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=8.0, poll=0.5, park_early="off")
    # The driver it starts inherits the step.
    first = cli(config, *submit_args(slurm, "--detach"), env=stepped, timeout=120)
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.strip()
    pid = driver_pid(tmp_path)
    probe = subprocess.run(["date", "+%s"], env=stepped, capture_output=True, text=True, check=True, timeout=10)
    assert abs(int(probe.stdout) - time.time()) < 5  # not stepped yet
    time.sleep(2)
    step.write_text("-3600\n")
    probe = subprocess.run(["date", "+%s"], env=stepped, capture_output=True, text=True, check=True, timeout=10)
    assert 3590 < time.time() - int(probe.stdout) < 3610  # the driver's tree now reads an hour earlier
    second = cli(config, *submit_args(slurm, "--detach"), timeout=120)
    assert second.returncode == 0, second.stderr  # queued by the stepped driver within submit's wait
    second_id = second.stdout.strip()
    cancelled = cli(config, "cancel", second_id, timeout=120)
    assert cancelled.returncode == 0, cancelled.stderr  # answered by the stepped driver
    row = final_row(slurm, tmp_path, first_id, timeout=60)
    notes = step_notes(tmp_path, first_id)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur"), notes
    with read_journal(tmp_path) as j:
        withdrawn = j.dispatch(second_id)
    assert withdrawn is not None
    assert withdrawn.state == "WITHDRAWN"
    after = driver_owner(tmp_path)
    assert after is not None
    assert after.pid == pid  # the stepped driver did all of it; none was started beside it
    log = (tmp_path / "state" / "driver.log").read_text()
    assert "Traceback" not in log, log[-2000:]
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [first_id, second_id])
