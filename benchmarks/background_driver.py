"""Benchmark: the background driver (fellows_fsm.driver.process) on the real local SLURM, driven through the CLI.

Three measurements, each through ``fellows-fsm submit --detach`` as a user runs it, on a fresh state dir per run:

1. walk: high-eur self-capped (two 8-GPU high-eur jobs of our own running), park cap 5 s, poll 1 s; an 8-GPU
   dispatch; the time from the submit's start, from its return, and from its first sbatch (the high-eur window
   opening, as journaled) to the job RUNNING on normal-eur (squeue read every 20 ms from here). Once with
   ``park_early = "off"`` (the cap waited out) and once with the default ``"own-cap"`` (left at the first poll).
   Between runs: ``fellows-fsm driver stop`` and the dispatch's jobs scancelled.
2. start: from the start of ``submit --detach`` on an idle journal with no driver to the driver's first poll,
   read from the lock file's ``last_tick`` (written at the start of every poll; read here every 5 ms).
3. idle: SLURM commands the driver process runs once nothing is live, counted by wrapper scripts first on the
   submitting shell's PATH (the driver journals that PATH and uses it); then when the driver process is gone
   after ``driver_idle_seconds = 5``.

Run it with a cluster of its own (no lock needed):

    scripts/in-netns bench17 bash -c 'scripts/dev-slurm up && eval "$(scripts/dev-slurm env)" && \
        nice -n 10 .venv/bin/python -m benchmarks.background_driver'
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import realslurm
from benchmarks.common import spread, write_result

CLI = str(Path(sys.executable).with_name("fellows-fsm"))
CAP = 5.0
POLL = 1.0
IDLE = 5.0
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "sacctmgr")


def write_config(state_dir: Path, *, park_early: str, idle: float = 30.0) -> Path:
    path = state_dir / "fellows.toml"
    path.write_text(
        f'state_dir = "{state_dir}"\n\n[fellows]\nqos = "high-eur"\nqos_ladder = ["normal-eur", "low-eur"]\n'
        f'park_cap_seconds = {CAP:g}\npoll_interval_seconds = {POLL:g}\npark_early = "{park_early}"\n\n'
        f'[router]\norder = ["fellows"]\ncontroller_deadline = false\ndriver_idle_seconds = {idle:g}\n',
        encoding="utf-8",
    )
    return path


def env_of(config: Path, path_prefix: str | None = None) -> dict[str, str]:
    env = {**os.environ, "FELLOWS_FSM_CONFIG": str(config)}
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return env


def submit_argv(name: str) -> list[str]:
    return [
        CLI,
        "submit",
        "--detach",
        "--gpus",
        "8",
        "--time",
        "10:00",
        "--name",
        name,
        realslurm.script(600),
        "--",
        *realslurm.job_args(),
    ]


def jobs_named(name: str) -> list[tuple[str, str, str]]:
    out = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i %q %T"], check=False, capture_output=True, text=True
    ).stdout
    return [tuple(line.split()) for line in out.splitlines() if len(line.split()) == 3]  # type: ignore[misc]


def history(config: Path, dispatch_id: str) -> list[dict[str, Any]]:
    """The dispatch's transitions from the journal itself (the CLI's JSON rounds times to the second)."""
    path = config.parent / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        cur = db.execute(
            "SELECT at, source, dest, trigger, qos, job_id, reason FROM transitions WHERE dispatch_id = ? ORDER BY seq",
            (dispatch_id,),
        )
        keys = ("at", "from", "to", "trigger", "qos", "slurm_job_id", "reason")
        return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]


def sbatch_times(config: Path, dispatch_id: str) -> dict[int, float]:
    """When each rung's job id was journaled (its sbatch returned), by rung index."""
    path = config.parent / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        cur = db.execute("SELECT rung_index, at FROM jobs WHERE dispatch_id = ?", (dispatch_id,))
        return {int(i): float(at) for i, at in cur.fetchall()}


def owner(state_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((state_dir / "journal.sqlite3.lock").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def alive(pid: int) -> bool:
    """Is ``pid`` running (a zombie is not: under scripts/in-netns this benchmark is the namespace's PID 1, so
    the driver, reparented to it, stays a zombie until reaped here)?"""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def log_time(line: str) -> float:
    """The epoch time of a driver log line (``2026-12-01 12:24:42,487 ...``, local time)."""
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def stop_driver(config: Path) -> None:
    subprocess.run([CLI, "driver", "stop"], env=env_of(config), check=False, capture_output=True)


def cancel_named(name: str) -> None:
    realslurm.cancel([j for j, _, _ in jobs_named(name)])
    end = time.monotonic() + 30
    while jobs_named(name) and time.monotonic() < end:
        time.sleep(0.1)


def walk_once(park_early: str, run: int) -> dict[str, Any]:
    state_dir = Path(tempfile.mkdtemp(prefix=f"bg-walk-{park_early}-"))
    config = write_config(state_dir, park_early=park_early)
    name = f"bgw-{uuid.uuid4().hex[:6]}"
    t0 = time.time()
    proc = subprocess.run(submit_argv(name), env=env_of(config), capture_output=True, text=True, check=False)
    t1 = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"submit failed ({proc.returncode}): {proc.stderr}")
    dispatch_id = proc.stdout.strip().splitlines()[-1]
    running = None
    end = time.monotonic() + 60
    while running is None and time.monotonic() < end:
        for _, qos, st in jobs_named(name):
            if qos == "normal-eur" and st == "RUNNING":
                running = time.time()
        if running is None:
            time.sleep(0.02)
    if running is None:
        raise RuntimeError(f"dispatch {dispatch_id} not RUNNING on normal-eur within 60 s: {jobs_named(name)}")
    rows = history(config, dispatch_id)
    sbatches = sbatch_times(config, dispatch_id)
    stop_driver(config)
    cancel_named(name)
    first_queued = sbatches.get(0)  # the high-eur job id journaled: its sbatch returned
    window_open = next(float(r["at"]) for r in rows if r["to"] == "SUBMITTED_high_eur")  # the window's start
    parked = next((float(r["at"]) for r in rows if r["to"] == "PARKED"), None)
    started = "fellows-fsm: started the background driver" in proc.stderr
    return {
        "run": run,
        "dispatch": dispatch_id,
        "driver_started_by_submit": started,
        "submit_seconds": round(t1 - t0, 3),
        "from_submit_start": round(running - t0, 3),
        "from_submit_return": round(running - t1, 3),
        "from_first_sbatch": None if first_queued is None else round(running - first_queued, 3),
        "from_window_open": round(running - window_open, 3),
        "window_open_after_submit_start": round(window_open - t0, 3),
        "first_sbatch_after_submit_start": None if first_queued is None else round(first_queued - t0, 3),
        "parked_after_window_open": None if parked is None else round(parked - window_open, 3),
        "normal_eur_sbatch_to_running": None if 1 not in sbatches else round(running - sbatches[1], 3),
        "history": rows,
    }


def walk(park_early: str, runs: int) -> dict[str, Any]:
    blockers = [realslurm.sbatch("high-eur", 8, 600, name="bg-block", time_limit=1800) for _ in range(2)]
    try:
        realslurm.wait_state(blockers, "RUNNING")
        results = [walk_once(park_early, i) for i in range(runs)]
    finally:
        realslurm.cancel(blockers)
        realslurm.wait_empty()
    out: dict[str, Any] = {"park_early": park_early, "runs": results}
    keys = (
        "submit_seconds",
        "from_submit_start",
        "from_submit_return",
        "from_first_sbatch",
        "from_window_open",
        "window_open_after_submit_start",
        "first_sbatch_after_submit_start",
        "parked_after_window_open",
        "normal_eur_sbatch_to_running",
    )
    for key in keys:
        values = [r[key] for r in results if r[key] is not None]
        out[key] = spread(values) if values else None
    return out


def start_once(run: int) -> dict[str, Any]:
    state_dir = Path(tempfile.mkdtemp(prefix="bg-start-"))
    config = write_config(state_dir, park_early="own-cap")
    name = f"bgs-{uuid.uuid4().hex[:6]}"
    t0 = time.time()
    proc = subprocess.Popen(
        submit_argv(name), env=env_of(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first_tick = since = None
    end = time.monotonic() + 30
    while first_tick is None and time.monotonic() < end:
        rec = owner(state_dir)
        if rec is not None:
            since = rec.get("since")
            first_tick = rec.get("last_tick")
        if first_tick is None:
            time.sleep(0.005)
    _out, err = proc.communicate(timeout=60)
    t1 = time.time()
    stop_driver(config)
    cancel_named(name)
    log_first = ""
    with contextlib.suppress(OSError):
        log_first = (state_dir / "driver.log").read_text(encoding="utf-8").splitlines()[0]
    return {
        "run": run,
        "exit": proc.returncode,
        "driver_started_by_submit": "fellows-fsm: started the background driver" in err,
        "to_first_tick": None if first_tick is None else round(float(first_tick) - t0, 3),
        "to_lock_taken": None if since is None else round(float(since) - t0, 3),
        "submit_seconds": round(t1 - t0, 3),
        "driver_log_first_line": log_first,
    }


def start(runs: int) -> dict[str, Any]:
    results = [start_once(i) for i in range(runs)]
    realslurm.wait_empty()
    out: dict[str, Any] = {"runs": results}
    for key in ("to_first_tick", "to_lock_taken", "submit_seconds"):
        values = [r[key] for r in results if r[key] is not None]
        out[key] = spread(values) if values else None
    return out


def wrappers(folder: Path, counter: Path) -> None:
    for cmd in SLURM_COMMANDS:
        real = shutil.which(cmd) or f"/usr/bin/{cmd}"
        path = folder / cmd
        path.write_text(
            f'#!/bin/sh\necho "{cmd} $(date +%s.%N) $PPID" >> {counter}\nexec {real} "$@"\n', encoding="utf-8"
        )
        path.chmod(0o755)


def idle() -> dict[str, Any]:
    state_dir = Path(tempfile.mkdtemp(prefix="bg-idle-"))
    config = write_config(state_dir, park_early="own-cap", idle=IDLE)
    bin_dir = state_dir / "bin"
    bin_dir.mkdir()
    counter = state_dir / "calls.txt"
    wrappers(bin_dir, counter)
    name = f"bgi-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(
        submit_argv(name), env=env_of(config, str(bin_dir)), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"submit failed ({proc.returncode}): {proc.stderr}")
    dispatch_id = proc.stdout.strip().splitlines()[-1]
    rec = owner(state_dir)
    assert rec is not None
    pid = int(rec["pid"])
    gone = None
    end = time.monotonic() + 120
    while gone is None and time.monotonic() < end:
        if not alive(pid):
            gone = time.time()
        else:
            time.sleep(0.02)
    rows = history(config, dispatch_id)
    final = rows[-1]
    final_at = float(final["at"])
    calls = []
    for line in counter.read_text(encoding="utf-8").splitlines():
        cmd, at, ppid = line.split()
        calls.append((cmd, float(at), int(ppid)))
    by_driver = [(c, a) for c, a, p in calls if p == pid]
    after_final = [(c, a) for c, a in by_driver if a > final_at]
    cancel_named(name)
    realslurm.wait_empty()
    log_lines = (state_dir / "driver.log").read_text(encoding="utf-8").splitlines()
    exit_line = next((line for line in log_lines if "exits: nothing live" in line), None)
    logged_exit = None if exit_line is None else log_time(exit_line)
    return {
        "dispatch": dispatch_id,
        "logged_exit_after_final_seconds": None if logged_exit is None else round(logged_exit - final_at, 3),
        "logged_exit_after_grace_seconds": None if logged_exit is None else round(logged_exit - final_at - IDLE, 3),
        "driver_pid": pid,
        "driver_idle_seconds": IDLE,
        "final_state": final.get("to"),
        "driver_calls_total": dict(Counter(c for c, _ in by_driver)),
        "driver_calls_after_final": dict(Counter(c for c, _ in after_final)),
        "driver_calls_after_final_n": len(after_final),
        "other_calls": dict(Counter(c for c, _, p in calls if p != pid)),
        "driver_gone": gone is not None and not alive(pid),
        "gone_after_final_seconds": None if gone is None else round(gone - final_at, 3),
        "gone_after_grace_seconds": None if gone is None else round(gone - final_at - IDLE, 3),
        "driver_log": log_lines[-5:],
        "history": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    realslurm.wait_empty()
    data: dict[str, Any] = {
        "park_cap_seconds": CAP,
        "poll_interval_seconds": POLL,
        "walk_target_seconds": CAP + POLL + 0.5,
        "start_target_seconds": 1.0,
    }
    data["walk_off"] = walk("off", args.runs)
    data["walk_own_cap"] = walk("own-cap", args.runs)
    data["start"] = start(args.runs)
    data["idle"] = idle()
    path = write_result("background_driver", data)
    print(
        json.dumps(
            {
                k: {kk: vv for kk, vv in v.items() if kk not in ("runs", "history")} if isinstance(v, dict) else v
                for k, v in data.items()
            },
            indent=1,
        )
    )
    print(path)


if __name__ == "__main__":
    main()
