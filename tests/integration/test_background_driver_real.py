"""The background driver on the real local SLURM: a dispatch walks to the end with no terminal open, and no free
rung is skipped, nor a job dropped, because nobody watched (a detach, a closed terminal, a killed or stopped driver,
a hold past the window, a stalled controller, ten submits at once, the idle exit)."""

from __future__ import annotations

import json
import os
import pty
import select
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
    start_cli,
    stop_background_driver,
    submit_args,
)
from .conftest import Cluster, QueueRow
from .settled import jobs_of, ledger

pytestmark = pytest.mark.slurm

CAP = 5.0
POLL = 1.0


def _config(tmp_path: Path, *, cap: float = CAP, idle: float = 30.0) -> Path:
    """Short caps, a 1 s poll, the plain ladder (these tests wait on a capped high-eur on purpose), a ledger lane."""
    router = f"driver_idle_seconds = {idle}\nfollow_interval_seconds = 1\n"
    return ledger_config(tmp_path, cap=cap, poll=POLL, park_early="off", router=router)


def _triggers(tmp_path: Path, dispatch_id: str) -> list[tuple[str, str]]:
    """The dispatch's steps as (trigger, qos), oldest first."""
    with read_journal(tmp_path) as j:
        return [(s.trigger, s.qos) for s in j.steps(dispatch_id)]


def _pending_job(slurm: Cluster, dispatch_id: str) -> QueueRow:
    [job] = [j for j in jobs_of(slurm, dispatch_id) if j.state == "PENDING"]
    return job


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it (SIGCONT first, in case a test stopped one)."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def test_a_detached_dispatch_walks_to_normal_eur_with_no_process_of_the_user_left(
    slurm: Cluster, tmp_path: Path
) -> None:
    """submit --detach returns; with no other command run, the background driver parks the capped high-eur job
    at its window's end and the job RUNS on normal-eur; the submitting process is gone."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    submit = start_cli(config, *submit_args(slurm, "--detach"))
    out, err = submit.communicate(timeout=60)
    assert submit.returncode == 0, err
    assert "started the background driver" in err
    dispatch_id = out.strip()
    assert not process_alive(submit.pid)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=CAP + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    assert _triggers(tmp_path, dispatch_id) == [
        ("submit", "high-eur"),
        ("park", "high-eur"),
        ("cancel", "high-eur"),
        ("resubmit", "normal-eur"),
        ("start", "normal-eur"),
    ]
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def test_a_closed_terminal_stops_the_follower_not_the_walk(slurm: Cluster, tmp_path: Path) -> None:
    """A foreground submit in a real pseudo-terminal whose master is closed mid-walk (SIGHUP) dies; the walk goes
    on in the background driver and the job RUNS on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader with the pty as its controlling terminal
        env = dict(os.environ, TERM="xterm", COLUMNS="100")
        os.execve(str(FELLOWS_FSM), [str(FELLOWS_FSM), "--config", str(config), *submit_args(slurm)], env)
    seen = b""
    end = time.monotonic() + 30
    while b"SUBMITTED" not in seen and time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    assert b"SUBMITTED" in seen, seen[-2000:]
    with read_journal(tmp_path) as j:
        [row] = j.dispatches()
    assert not row.final
    os.close(master)  # the terminal closes: the kernel hangs up the follower
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
    row = final_row(slurm, tmp_path, row.id, timeout=CAP + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [row.id])


def test_a_killed_driver_drops_nothing_and_any_command_restarts_the_walk(slurm: Cluster, tmp_path: Path) -> None:
    """The driver SIGKILLed while its dispatch waits on high-eur, then nothing runs for three times the ladder's
    worst case: the job is still queued. `status` (from another directory, with no config file and no SLURM_CONF)
    starts a driver with the journaled config, and the dispatch RUNS on a free rung; no handoff."""
    cap = 3.0
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path, cap=cap)
    result = cli(config, *submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    os.kill(driver_pid(tmp_path), signal.SIGKILL)
    time.sleep(3 * 3 * cap)  # three times the worst case (three rungs of 3 s)
    job = _pending_job(slurm, dispatch_id)
    assert job.qos == "high-eur"
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["FELLOWS_FSM_STATE_DIR"] = str(tmp_path / "state")
    status = subprocess.run(
        [str(FELLOWS_FSM), "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert "started the background driver" in status.stderr
    row = final_row(slurm, tmp_path, dispatch_id, timeout=4 * cap + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    triggers = _triggers(tmp_path, dispatch_id)
    assert ("pause", "high-eur") in triggers  # the time nobody watched is not spent from the window
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def test_a_stopped_driver_passes_over_no_free_rung(slurm: Cluster, tmp_path: Path) -> None:
    """The driver stopped (SIGSTOP, as a laptop's sleep) for three caps, then continued, with normal-eur empty:
    the job is not handed to GCP past the free rungs; it RUNS on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    result = cli(config, *submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    pid = driver_pid(tmp_path)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3 * CAP)
    finally:
        os.kill(pid, signal.SIGCONT)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=CAP + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    with read_journal(tmp_path) as j:
        notes = [s.note for s in j.steps(dispatch_id)]
    assert not [n for n in notes if "window closed before it opened" in n]
    assert any("no driver watched" in n for n in notes)
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def test_a_hold_past_the_window_waits_and_the_job_runs_after_release(slurm: Cluster, tmp_path: Path) -> None:
    """scontrol hold for three windows, then release: SLURM drops nothing (no --deadline by default), the
    dispatch waits on its rung while held, then walks on and the job RUNS; never withdrawn, never handed off."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    result = cli(config, *submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    job = _pending_job(slurm, dispatch_id)
    subprocess.run(["scontrol", "hold", job.job_id], check=True, timeout=30)
    time.sleep(3 * CAP)
    assert _pending_job(slurm, dispatch_id).job_id == job.job_id  # still queued, still ours
    subprocess.run(["scontrol", "release", job.job_id], check=True, timeout=30)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=2 * CAP + 30)
    assert row.label == "RUNNING"
    triggers = [t for t, _ in _triggers(tmp_path, dispatch_id)]
    assert "hold" in triggers
    assert "release" in triggers
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [dispatch_id])


def test_a_controller_stalled_during_the_first_sbatch_costs_no_free_run(slurm: Cluster, tmp_path: Path) -> None:
    """slurmctld stopped for 12 s while the first sbatch waits, on an empty cluster with a 5 s cap: the job is
    queued when it answers and RUNS on high-eur; nothing is dropped or handed to GCP."""
    config = _config(tmp_path)
    ctld = ctld_pid()
    os.kill(ctld, signal.SIGSTOP)
    try:
        submit = start_cli(config, *submit_args(slurm, "--detach", "--json"))
        time.sleep(12)
    finally:
        os.kill(ctld, signal.SIGCONT)
    _out, err = submit.communicate(timeout=90)
    assert submit.returncode in (0, 6), err  # 6: the first job was queued later than submit waited
    with read_journal(tmp_path) as j:
        [row] = j.dispatches()
    row = final_row(slurm, tmp_path, row.id, timeout=60)
    assert (row.label, row.qos) == ("RUNNING", "high-eur")
    assert ledger(tmp_path) == []
    check_settled(slurm, tmp_path, [row.id])


def test_ten_submits_at_once_start_one_driver_and_each_gets_one_job(slurm: Cluster, tmp_path: Path) -> None:
    """Ten `submit --detach` started at the same instant on one journal: one driver process starts, and each
    of the ten dispatches gets exactly one job, which runs."""
    config = _config(tmp_path)
    args = [str(FELLOWS_FSM), "--config", str(config), "submit", "--detach", "--gpus", "1", "--time", "10:00"]
    procs = [
        subprocess.Popen(
            [*args, slurm.script(300), "--", *slurm.job_args()],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, [e for _, e in results]
    ids = [out.strip() for out, _ in results]  # the id alone, even for a dispatch already running
    assert sum("started the background driver" in err for _, err in results) == 1
    log = (tmp_path / "state" / "driver.log").read_text()
    assert log.count(" starting for ") == 1, log
    for dispatch_id in ids:
        assert final_row(slurm, tmp_path, dispatch_id).label == "RUNNING"
        assert len(jobs_of(slurm, dispatch_id)) == 1
    check_settled(slurm, tmp_path, ids)


def test_the_driver_exits_when_idle_and_the_next_submit_starts_a_new_one(slurm: Cluster, tmp_path: Path) -> None:
    """The driver stays up while a job runs (it follows it to its end); with nothing live it exits after its idle
    grace; `driver status` then says there is none, and the next submit starts a new one."""
    config = _config(tmp_path, idle=2.0)
    first = cli(config, *submit_args(slurm, "--detach", seconds=8))
    assert first.returncode == 0, first.stderr
    pid = driver_pid(tmp_path)
    assert final_row(slurm, tmp_path, first.stdout.strip()).label == "RUNNING"
    time.sleep(4)  # past the idle grace, while the job runs
    assert process_alive(pid)

    def ended() -> bool:
        with read_journal(tmp_path) as j:
            row = j.dispatch(first.stdout.strip())
            return row is not None and row.state == "ENDED"

    slurm.wait_for(ended, "the job's end to be recorded", timeout=30, tick=0.2)
    slurm.wait_for(lambda: not process_alive(pid), "the idle driver to exit", timeout=30, tick=0.2)
    status = cli(config, "driver", "status", "--json")
    assert json.loads(status.stdout)["running"] is False
    assert "no driver" in cli(config, "driver", "status").stdout
    second = cli(config, *submit_args(slurm, "--detach"))
    assert second.returncode == 0, second.stderr
    assert "started the background driver" in second.stderr
    assert driver_pid(tmp_path) != pid
    assert final_row(slurm, tmp_path, second.stdout.strip()).label == "RUNNING"
    stopped = cli(config, "driver", "stop")
    assert stopped.returncode == 0, stopped.stderr
    check_settled(slurm, tmp_path, [first.stdout.strip(), second.stdout.strip()])
