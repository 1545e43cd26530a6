"""An agent's loop on the real local SLURM: the driver's wake-up (a submit's first sbatch and a cancel's scancel at
once, not at the next poll; a deleted or unwritable wake-up FIFO leaves the poll driving, said by `driver status`), and
a submit of several scripts (one dispatch each, one job each, even with the driver killed in the middle, or
slurmctld stopped while they are submitted)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import (
    FELLOWS_FSM,
    check_settled,
    cli,
    ctld_pid,
    driver_pid,
    final_row,
    ledger_config,
    process_alive,
    read_journal,
    stop_background_driver,
    submit_args,
)
from .conftest import Cluster
from .settled import jobs_of, ledger

pytestmark = pytest.mark.slurm

LONG_POLL = 120.0
"""Longer than any wait below: what happens within them did not need the poll."""
WAIT = 30.0


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGTERM,))


def _submit_detached(config: Path, slurm: Cluster) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(FELLOWS_FSM), "--config", str(config), *submit_args(slurm, "--detach")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_submit_and_a_cancel_wake_the_driver_instead_of_waiting_for_its_poll(slurm: Cluster, tmp_path: Path) -> None:
    """With a 120 s poll and a driver already past its first poll, two submits racing each other are queued in
    SLURM and `cancel` withdraws each dispatch, all within 30 s: one driver, one job per dispatch, none ran."""
    slurm.occupy("high-eur", 8, count=2)  # our jobs stay pending: a cancel withdraws them before they run
    config = ledger_config(tmp_path, cap=600, poll=LONG_POLL, router="driver_idle_seconds = 600\n")
    first = cli(config, *submit_args(slurm, "--detach"), timeout=WAIT)
    assert first.returncode == 0, first.stderr
    procs = [_submit_detached(config, slurm) for _ in range(2)]
    results = [p.communicate(timeout=WAIT) for p in procs]  # --detach returns once the first job is queued
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    ids = [first.stdout.strip(), *(out.strip() for out, _ in results)]
    for dispatch_id in ids:
        [job] = jobs_of(slurm, dispatch_id)
        assert job.state == "PENDING"
    log = (tmp_path / "state" / "driver.log").read_text()
    assert log.count(" starting for ") == 1, log
    assert json.loads(cli(config, "driver", "status", "--json").stdout)["wake"] is None
    for dispatch_id in ids:
        cancelled = cli(config, "cancel", dispatch_id, timeout=WAIT)
        assert cancelled.returncode == 0, cancelled.stderr
    with read_journal(tmp_path) as j:
        assert [j.dispatch(i).state for i in ids] == ["WITHDRAWN"] * 3  # type: ignore[union-attr]
    slurm.wait_for(
        lambda: all(j.state != "PENDING" for i in ids for j in jobs_of(slurm, i)), "the jobs to go", timeout=WAIT
    )
    check_settled(slurm, tmp_path, ids)


def test_a_deleted_wake_up_fifo_leaves_the_poll_driving_and_driver_status_says_so(
    slurm: Cluster, tmp_path: Path
) -> None:
    """The wake-up FIFO removed under a running driver: a submit is still walked (by the 1 s poll) and runs, and
    `driver status` says in one line that the driver reads new messages at its next poll."""
    config = ledger_config(tmp_path, cap=5, poll=1.0, router="driver_idle_seconds = 60\n")
    first = cli(config, *submit_args(slurm, "--detach"))
    assert first.returncode == 0, first.stderr
    fifo = tmp_path / "state" / "journal.sqlite3.wake"
    assert fifo.is_fifo()
    fifo.unlink()
    said = cli(config, "driver", "status")
    assert said.returncode == 0, said.stderr
    [line] = [line for line in said.stdout.splitlines() if line.startswith("wake-up:")]
    assert "missing" in line
    assert "every 1 s" in line
    second = cli(config, *submit_args(slurm, "--detach"))
    assert second.returncode == 0, second.stderr
    ids = [first.stdout.strip(), second.stdout.strip()]
    for dispatch_id in ids:
        assert final_row(slurm, tmp_path, dispatch_id).label in ("RUNNING", "ENDED")  # its job ran (or already ended)
    check_settled(slurm, tmp_path, ids)


@pytest.mark.parametrize("put", ["a directory", "a regular file"])
def test_an_unwritable_wake_up_fifo_leaves_the_poll_driving_and_driver_status_says_so(
    slurm: Cluster, tmp_path: Path, put: str
) -> None:
    """The wake-up FIFO replaced under a running driver by something a submit cannot wake it through (a directory:
    unwritable even for root; a regular file: no driver reads it, and nothing is written into it): a submit is
    still walked (by the 1 s poll) and runs, and `driver status` says so in one line."""
    config = ledger_config(tmp_path, cap=5, poll=1.0, router="driver_idle_seconds = 60\n")
    first = cli(config, *submit_args(slurm, "--detach"))
    assert first.returncode == 0, first.stderr
    fifo = tmp_path / "state" / "journal.sqlite3.wake"
    assert fifo.is_fifo()
    fifo.unlink()
    if put == "a directory":
        fifo.mkdir()
    else:
        fifo.write_bytes(b"")
    said = cli(config, "driver", "status")
    assert said.returncode == 0, said.stderr
    [line] = [line for line in said.stdout.splitlines() if line.startswith("wake-up:")]
    assert f"{fifo} is not a FIFO" in line
    assert "every 1 s" in line
    assert json.loads(cli(config, "driver", "status", "--json").stdout)["wake"] == f"{fifo} is not a FIFO"
    second = cli(config, *submit_args(slurm, "--detach"))
    assert second.returncode == 0, second.stderr
    ids = [first.stdout.strip(), second.stdout.strip()]
    for dispatch_id in ids:
        assert final_row(slurm, tmp_path, dispatch_id).label in ("RUNNING", "ENDED")  # its job ran (or already ended)
    if put == "a regular file":
        assert fifo.read_bytes() == b""  # the submit's wake wrote nothing into it
    log = (tmp_path / "state" / "driver.log").read_text()
    assert log.count(" starting for ") == 1, log  # the one driver walked both
    check_settled(slurm, tmp_path, ids)


def _several(slurm: Cluster, count: int, *flags: str) -> list[str]:
    """A submit of ``count`` 1-GPU scripts that sleep 2 s (each its own file), with the job options after --."""
    scripts = [slurm.script(2) for _ in range(count)]
    return ["submit", *flags, "--gpus", "1", "--time", "10:00", *scripts, "--", *slurm.job_args()]


def test_several_scripts_make_one_dispatch_each_with_one_job(slurm: Cluster, tmp_path: Path) -> None:
    """`submit a b c --json` prints a list of three dispatches, each with its SLURM job queued; each runs once."""
    config = ledger_config(tmp_path, cap=60, poll=1.0, router="driver_idle_seconds = 30\n")
    result = cli(config, *_several(slurm, 3, "--json"))
    assert result.returncode == 0, result.stderr
    objects = json.loads(result.stdout)
    assert [o["slurm_job_id"] is not None for o in objects] == [True] * 3
    ids = [o["dispatch_id"] for o in objects]
    assert len(set(ids)) == 3
    for dispatch_id in ids:
        assert final_row(slurm, tmp_path, dispatch_id).label in ("RUNNING", "ENDED")  # its job ran (or already ended)
        assert len(jobs_of(slurm, dispatch_id)) == 1
    check_settled(slurm, tmp_path, ids)


def test_a_driver_killed_in_the_middle_of_a_multi_submit_loses_none_and_queues_none_twice(
    slurm: Cluster, tmp_path: Path
) -> None:
    """Twelve scripts paced at 2 sbatch a second; the driver SIGKILLed after its first sbatch: the command
    starts a new one, returns 0 once every job is queued, and each printed dispatch has exactly one job, which ran."""
    config = ledger_config(
        tmp_path, cap=60, poll=1.0, fellows="max_submits_per_second = 2\n", router="driver_idle_seconds = 30\n"
    )
    proc = subprocess.Popen(
        [str(FELLOWS_FSM), "--config", str(config), *_several(slurm, 12)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def submitted() -> int:
        """How many dispatches have their first submit journaled (written ahead of each sbatch)."""
        with read_journal(tmp_path) as j:
            return sum(bool(j.steps(r.id)) for r in j.dispatches())

    assert proc.stdout is not None
    ids = [proc.stdout.readline().strip() for _ in range(12)]  # printed once journaled (and the driver running)
    slurm.wait_for(lambda: submitted() > 0, "the first sbatch", timeout=WAIT, tick=0.05)
    assert submitted() < 12  # the kill lands in the middle of the paced sbatch calls
    first = driver_pid(tmp_path)
    os.kill(first, signal.SIGKILL)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err + (tmp_path / "state" / "driver.log").read_text()
    assert out == ""
    assert len(set(ids)) == 12
    assert driver_pid(tmp_path) != first
    assert not process_alive(first)
    for dispatch_id in ids:
        assert final_row(slurm, tmp_path, dispatch_id).label in ("RUNNING", "ENDED")  # its job ran (or already ended)
        assert len(jobs_of(slurm, dispatch_id)) == 1, jobs_of(slurm, dispatch_id)
    check_settled(slurm, tmp_path, ids)


def test_a_multi_submit_while_slurmctld_is_stopped_queues_each_once_after_and_pays_for_none(
    slurm: Cluster, tmp_path: Path
) -> None:
    """Twelve scripts submitted while slurmctld is stopped (SIGSTOP) for 20 s, longer than each rung's 15 s window:
    once it answers, each dispatch's one job is queued on high-eur and runs; no window closed for the outage (no
    second job, no rung change) and nothing was handed to the paid lane. (The issue's 1,000 at once, scaled to a
    test's size: the same code path, every sbatch of the burst waiting on the stopped controller.)"""
    config = ledger_config(
        tmp_path, cap=15, poll=1.0, fellows="max_submits_per_second = 20\n", router="driver_idle_seconds = 30\n"
    )
    ctld = ctld_pid()
    os.kill(ctld, signal.SIGSTOP)
    try:
        proc = subprocess.Popen(
            [str(FELLOWS_FSM), "--config", str(config), *_several(slurm, 12)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(20)
        assert proc.poll() is None  # nothing could be queued yet
    finally:
        os.kill(ctld, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err + (tmp_path / "state" / "driver.log").read_text()
    ids = out.split()
    assert len(set(ids)) == 12
    for dispatch_id in ids:
        row = final_row(slurm, tmp_path, dispatch_id, timeout=90)
        assert (row.label, row.qos) in (("RUNNING", "high-eur"), ("ENDED", "high-eur"))  # its job ran
        assert len(jobs_of(slurm, dispatch_id)) == 1, jobs_of(slurm, dispatch_id)
    with read_journal(tmp_path) as j:
        assert not any(s.trigger == "park" for i in ids for s in j.steps(i))
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, ids)
