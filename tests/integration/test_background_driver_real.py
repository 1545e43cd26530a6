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
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.journal import DriverOwner, Journal

from .conftest import RUNTIME, Cluster, QueueRow
from .settled import LEDGER_CODE, assert_settled, jobs_of, ledger

pytestmark = pytest.mark.slurm

FELLOWS_FSM = Path(sys.executable).parent / "fellows-fsm"
CAP = 5.0
POLL = 1.0


def _config(tmp_path: Path, *, cap: float = CAP, idle: float = 30.0, park_early: str = "off") -> Path:
    """Short caps, a 1 s poll, the plain ladder (these tests wait on a capped high-eur on purpose), a ledger lane."""
    command = json.dumps([sys.executable, "-c", LEDGER_CODE, str(tmp_path / "gcp.ledger"), "{dispatch_id}"])
    path = tmp_path / "fellows.toml"
    path.write_text(
        f'state_dir = "{tmp_path / "state"}"\n\n'
        f'[fellows]\npark_cap_seconds = {cap}\npoll_interval_seconds = {POLL}\npark_early = "{park_early}"\n\n'
        f"[router]\ndriver_idle_seconds = {idle}\n\n"
        f"[lanes.gcp]\ncommand = {command}\n",
        encoding="utf-8",
    )
    return path


def _cli(
    config: Path, *args: str, timeout: float = 90, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FELLOWS_FSM), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def _submit_args(slurm: Cluster, *flags: str) -> list[str]:
    return ["submit", *flags, "--gpus", "8", "--time", "10:00", slurm.script(300), "--", *slurm.job_args()]


def _journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "state" / "journal.sqlite3", readonly=True)


def _owner(tmp_path: Path) -> DriverOwner | None:
    lock = tmp_path / "state" / "journal.sqlite3.lock"
    return DriverOwner.parse(lock.read_text()) if lock.exists() else None


def _driver_pid(tmp_path: Path) -> int:
    owner = _owner(tmp_path)
    assert owner is not None
    assert owner.kind == "background", owner
    return owner.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie answers kill(0): read its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def _final(slurm: Cluster, tmp_path: Path, dispatch_id: str, timeout: float = 90) -> Any:
    def done() -> bool:
        with _journal(tmp_path) as j:
            row = j.dispatch(dispatch_id)
            return row is not None and row.final

    slurm.wait_for(done, f"dispatch {dispatch_id} to end", timeout=timeout, tick=0.25)
    with _journal(tmp_path) as j:
        return j.dispatch(dispatch_id)


def _triggers(tmp_path: Path, dispatch_id: str) -> list[tuple[str, str]]:
    with _journal(tmp_path) as j:
        return [(s.trigger, s.qos) for s in j.steps(dispatch_id)]


def _settled(slurm: Cluster, tmp_path: Path, ids: list[str]) -> None:
    with _journal(tmp_path) as j:
        assert_settled(slurm, j, tmp_path, ids)


def _pending_job(slurm: Cluster, dispatch_id: str) -> QueueRow:
    [job] = [j for j in jobs_of(slurm, dispatch_id) if j.state == "PENDING"]
    return job


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it (SIGCONT first, in case a test stopped one)."""
    yield
    owner = _owner(tmp_path)
    if owner is not None and owner.kind == "background" and _alive(owner.pid):
        for sig in (signal.SIGCONT, signal.SIGTERM):
            os.kill(owner.pid, sig)
        end = time.monotonic() + 15
        while _alive(owner.pid) and time.monotonic() < end:
            time.sleep(0.1)
        if _alive(owner.pid):
            os.kill(owner.pid, signal.SIGKILL)


def test_a_detached_dispatch_walks_to_normal_eur_with_no_process_of_the_user_left(
    slurm: Cluster, tmp_path: Path
) -> None:
    """submit --detach returns; with no other command run, the background driver parks the capped high-eur job
    at its window's end and the job RUNS on normal-eur; the submitting process is gone."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    submit = subprocess.Popen(
        [str(FELLOWS_FSM), "--config", str(config), *_submit_args(slurm, "--detach")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = submit.communicate(timeout=60)
    assert submit.returncode == 0, err
    assert "started the background driver" in err
    dispatch_id = out.strip()
    assert not _alive(submit.pid)
    row = _final(slurm, tmp_path, dispatch_id, timeout=CAP + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    assert _triggers(tmp_path, dispatch_id) == [
        ("submit", "high-eur"),
        ("park", "high-eur"),
        ("cancel", "high-eur"),
        ("resubmit", "normal-eur"),
        ("start", "normal-eur"),
    ]
    assert ledger(tmp_path) == []
    _settled(slurm, tmp_path, [dispatch_id])


def test_a_closed_terminal_stops_the_follower_not_the_walk(slurm: Cluster, tmp_path: Path) -> None:
    """A foreground submit in a real pseudo-terminal whose master is closed mid-walk (SIGHUP) dies; the walk goes
    on in the background driver and the job RUNS on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader with the pty as its controlling terminal
        env = dict(os.environ, TERM="xterm", COLUMNS="100")
        os.execve(str(FELLOWS_FSM), [str(FELLOWS_FSM), "--config", str(config), *_submit_args(slurm)], env)
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
    with _journal(tmp_path) as j:
        [row] = j.dispatches()
    assert not row.final
    os.close(master)  # the terminal closes: the kernel hangs up the follower
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
    row = _final(slurm, tmp_path, row.id, timeout=CAP + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    assert ledger(tmp_path) == []
    _settled(slurm, tmp_path, [row.id])


def test_a_killed_driver_drops_nothing_and_any_command_restarts_the_walk(slurm: Cluster, tmp_path: Path) -> None:
    """The driver SIGKILLed while its dispatch waits on high-eur, then nothing runs for three times the ladder's
    worst case: the job is still queued. `status` (from another directory, with no config file and no SLURM_CONF)
    starts a driver with the journaled config, and the dispatch RUNS on a free rung; no handoff."""
    cap = 3.0
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path, cap=cap)
    result = _cli(config, *_submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    os.kill(_driver_pid(tmp_path), signal.SIGKILL)
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
    row = _final(slurm, tmp_path, dispatch_id, timeout=4 * cap + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    triggers = _triggers(tmp_path, dispatch_id)
    assert ("pause", "high-eur") in triggers  # the time nobody watched is not spent from the window
    assert ledger(tmp_path) == []
    _settled(slurm, tmp_path, [dispatch_id])


def test_a_stopped_driver_passes_over_no_free_rung(slurm: Cluster, tmp_path: Path) -> None:
    """The driver stopped (SIGSTOP, as a laptop's sleep) for three caps, then continued, with normal-eur empty:
    the job is not handed to GCP past the free rungs; it RUNS on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    result = _cli(config, *_submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    pid = _driver_pid(tmp_path)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3 * CAP)
    finally:
        os.kill(pid, signal.SIGCONT)
    row = _final(slurm, tmp_path, dispatch_id, timeout=CAP + 30)
    assert (row.label, row.qos) == ("RUNNING", "normal-eur")
    with _journal(tmp_path) as j:
        notes = [s.note for s in j.steps(dispatch_id)]
    assert not [n for n in notes if "window closed before it opened" in n]
    assert any("no driver watched" in n for n in notes)
    assert ledger(tmp_path) == []
    _settled(slurm, tmp_path, [dispatch_id])


def test_a_hold_past_the_window_waits_and_the_job_runs_after_release(slurm: Cluster, tmp_path: Path) -> None:
    """scontrol hold for three windows, then release: SLURM drops nothing (no --deadline by default), the
    dispatch waits on its rung while held, then walks on and the job RUNS; never withdrawn, never handed off."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path)
    result = _cli(config, *_submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    job = _pending_job(slurm, dispatch_id)
    subprocess.run(["scontrol", "hold", job.job_id], check=True, timeout=30)
    time.sleep(3 * CAP)
    assert _pending_job(slurm, dispatch_id).job_id == job.job_id  # still queued, still ours
    subprocess.run(["scontrol", "release", job.job_id], check=True, timeout=30)
    row = _final(slurm, tmp_path, dispatch_id, timeout=2 * CAP + 30)
    assert row.label == "RUNNING"
    triggers = [t for t, _ in _triggers(tmp_path, dispatch_id)]
    assert "hold" in triggers
    assert "release" in triggers
    assert ledger(tmp_path) == []
    _settled(slurm, tmp_path, [dispatch_id])


def test_a_controller_stalled_during_the_first_sbatch_costs_no_free_run(slurm: Cluster, tmp_path: Path) -> None:
    """slurmctld stopped for 12 s while the first sbatch waits, on an empty cluster with a 5 s cap: the job is
    queued when it answers and RUNS on high-eur; nothing is dropped or handed to GCP."""
    config = _config(tmp_path)
    ctld = int((RUNTIME / "run" / "slurmctld.pid").read_text().strip())
    os.kill(ctld, signal.SIGSTOP)
    try:
        submit = subprocess.Popen(
            [str(FELLOWS_FSM), "--config", str(config), *_submit_args(slurm, "--detach", "--json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(12)
    finally:
        os.kill(ctld, signal.SIGCONT)
    _out, err = submit.communicate(timeout=90)
    assert submit.returncode in (0, 6), err  # 6: the first job was queued later than submit waited
    with _journal(tmp_path) as j:
        [row] = j.dispatches()
    row = _final(slurm, tmp_path, row.id, timeout=60)
    assert (row.label, row.qos) == ("RUNNING", "high-eur")
    assert ledger(tmp_path) == []
    _settled(slurm, tmp_path, [row.id])


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
        assert _final(slurm, tmp_path, dispatch_id).label == "RUNNING"
        assert len(jobs_of(slurm, dispatch_id)) == 1
    _settled(slurm, tmp_path, ids)


def test_the_driver_exits_when_idle_and_the_next_submit_starts_a_new_one(slurm: Cluster, tmp_path: Path) -> None:
    """With nothing live the driver exits after its idle grace; `driver status` then says there is none, and the
    next submit starts a new one."""
    config = _config(tmp_path, idle=2.0)
    first = _cli(config, *_submit_args(slurm, "--detach"))
    assert first.returncode == 0, first.stderr
    pid = _driver_pid(tmp_path)
    assert _final(slurm, tmp_path, first.stdout.strip()).label == "RUNNING"
    slurm.wait_for(lambda: not _alive(pid), "the idle driver to exit", timeout=30, tick=0.2)
    status = _cli(config, "driver", "status", "--json")
    assert json.loads(status.stdout)["running"] is False
    assert "no driver" in _cli(config, "driver", "status").stdout
    second = _cli(config, *_submit_args(slurm, "--detach"))
    assert second.returncode == 0, second.stderr
    assert "started the background driver" in second.stderr
    assert _driver_pid(tmp_path) != pid
    assert _final(slurm, tmp_path, second.stdout.strip()).label == "RUNNING"
    stopped = _cli(config, "driver", "stop")
    assert stopped.returncode == 0, stopped.stderr
    _settled(slurm, tmp_path, [first.stdout.strip(), second.stdout.strip()])
