"""The fellows-fsm command line as the real-SLURM tests run it: a config file with a ledger lane, the command as a
subprocess, and what it leaves in the state dir (the journal, the background driver's lock).

Each helper takes the real differences between the tests as keyword arguments; a test whose bound differs from a
default (a poll interval, a timeout) passes its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fellows_fsm.journal.lock import DriverOwner
from fellows_fsm.journal.store import Journal

from .conftest import RUNTIME, Cluster
from .settled import LEDGER_CODE, assert_settled, walked

FELLOWS_FSM = Path(sys.executable).parent / "fellows-fsm"
"""The console script of the venv running the tests (.venv on the host, .venv-24.11 in the Debian 13 root)."""


def ledger_config(
    tmp_path: Path,
    *,
    cap: float,
    poll: float,
    park_early: str = "off",
    fellows: str = "",
    router: str = "",
    lane: str | None = None,
    lanes: bool = True,
    name: str = "fellows.toml",
) -> Path:
    """tmp_path/NAME: state in tmp_path/state, these caps and poll, a gcp lane that appends to tmp_path/gcp.ledger."""
    # ``fellows`` and ``router``: lines added to those tables; ``lane``: the gcp lane's own lines in place of the
    # ledger command; lanes=False: no lane at all.
    if lane is None:
        command = json.dumps([sys.executable, "-c", LEDGER_CODE, str(tmp_path / "gcp.ledger"), "{dispatch_id}"])
        lane = f"command = {command}\n"
    text = f'state_dir = "{tmp_path / "state"}"\n\n'
    text += f'[fellows]\npark_cap_seconds = {cap}\npoll_interval_seconds = {poll}\npark_early = "{park_early}"\n'
    text += fellows
    if router:
        text += f"\n[router]\n{router}"
    if lanes:
        text += f"\n[lanes.gcp]\n{lane}"
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def cli(
    config: Path, *args: str, timeout: float = 90, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """fellows-fsm --config CONFIG ARGS as a user runs it: its output captured, its exit status left to the test."""
    return subprocess.run(
        [str(FELLOWS_FSM), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=cwd,
    )


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a command that exited 0 printed (any other exit fails, showing its stderr)."""
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    return json.loads(result.stdout)


def one_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one line of a command that failed with exit ``code`` (``fellows-fsm: error: ...``): anything else fails."""
    assert result.returncode == code, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fellows-fsm: error: ")
    return lines[0]


def start_cli(
    config: Path, *args: str, env: dict[str, str] | None = None, start_new_session: bool = False
) -> subprocess.Popen[str]:
    """fellows-fsm --config CONFIG ARGS started and left running, its stdout and stderr piped."""
    return subprocess.Popen(
        [str(FELLOWS_FSM), "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=start_new_session,
    )


def submit_args(slurm: Cluster, *flags: str, seconds: int = 300) -> list[str]:
    """A submit of an 8-GPU, 10-minute job sleeping ``seconds`` (the job options every test job needs after --)."""
    return ["submit", *flags, "--gpus", "8", "--time", "10:00", slurm.script(seconds), "--", *slurm.job_args()]


def read_journal(tmp_path: Path) -> Journal:
    """The journal in tmp_path/state, opened read-only (never the driver lock)."""
    return Journal(tmp_path / "state" / "journal.sqlite3", readonly=True)


def driver_owner(tmp_path: Path) -> DriverOwner | None:
    """The driver recorded in tmp_path/state's lock file (None if there is no lock file or no record)."""
    lock = tmp_path / "state" / "journal.sqlite3.lock"
    return DriverOwner.parse(lock.read_text()) if lock.exists() else None


def driver_pid(tmp_path: Path) -> int:
    """The pid of the background driver recorded in tmp_path/state's lock file, checked to be one."""
    owner = driver_owner(tmp_path)
    assert owner is not None
    assert owner.kind == "background", owner
    return owner.pid


def process_alive(pid: int) -> bool:
    """Is process ``pid`` alive (a zombie is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie answers kill(0): read its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def stop_background_driver(tmp_path: Path, signals: Sequence[signal.Signals]) -> None:
    """Send ``signals`` to the background driver of tmp_path/state if one runs; SIGKILL it if it outlives 15 s."""
    owner = driver_owner(tmp_path)
    if owner is not None and owner.kind == "background" and process_alive(owner.pid):
        for sig in signals:
            os.kill(owner.pid, sig)
        end = time.monotonic() + 15
        while process_alive(owner.pid) and time.monotonic() < end:
            time.sleep(0.1)
        if process_alive(owner.pid):
            os.kill(owner.pid, signal.SIGKILL)


def final_row(slurm: Cluster, tmp_path: Path, dispatch_id: str, timeout: float = 90) -> Any:
    """The dispatch's journal row once its walk is over (final, or its job runs: followed from then on); fail after
    ``timeout`` seconds."""

    def done() -> bool:
        with read_journal(tmp_path) as j:
            row = j.dispatch(dispatch_id)
            return row is not None and walked(row)

    slurm.wait_for(done, f"dispatch {dispatch_id} to end", timeout=timeout, tick=0.25)
    with read_journal(tmp_path) as j:
        return j.dispatch(dispatch_id)


def watch_walked(slurm: Cluster, config: Path, tmp_path: Path, dispatch_id: str, timeout: float = 90) -> Any:
    """`watch --once` (cron's way: a poll of its own when no driver holds the journal) until the dispatch's walk is
    over (final, or its job runs: `watch` itself now follows a running job to its end); its status JSON object."""

    def over() -> bool:
        once = cli(config, "watch", "--once", timeout=60)
        assert once.returncode == 0, once.stderr
        with read_journal(tmp_path) as j:
            row = j.dispatch(dispatch_id)
            return row is not None and walked(row)

    slurm.wait_for(over, f"dispatch {dispatch_id}'s walk to end", timeout=timeout, tick=0.5)
    [row] = json_of(cli(config, "status", dispatch_id, "--json", timeout=60))
    return row


def step_notes(tmp_path: Path, dispatch_id: str) -> list[str]:
    """The dispatch's steps as "trigger qos: note" lines, oldest first."""
    with read_journal(tmp_path) as j:
        return [f"{s.trigger} {s.qos}: {s.note}" for s in j.steps(dispatch_id)]


def check_settled(slurm: Cluster, tmp_path: Path, ids: list[str]) -> None:
    """``assert_settled`` on the journal in tmp_path/state."""
    with read_journal(tmp_path) as j:
        assert_settled(slurm, j, tmp_path, ids)


def ctld_pid() -> int:
    """The pid of the running slurmctld."""
    return int((RUNTIME / "run" / "slurmctld.pid").read_text().strip())


def sbatch_running() -> bool:
    """Does an sbatch of a dispatch's rung (its --comment a fellows-fsm token) run?"""
    found = subprocess.run(["pgrep", "-f", "sbatch .*--comment=fsm-"], capture_output=True, check=False)
    return found.returncode == 0
