"""Issue 40's two burst faults at the issue's own sizes on the real local SLURM, through the CLI as a program runs it
(the tests, tests/integration/test_scale_real.py, run the same paths with 12 scripts; these take minutes).

1. outage: 4 shells at once, each ``fellows-fsm submit`` of 250 scripts, while slurmctld is stopped (SIGSTOP) for
   20 s from just before the first command starts. Then: every printed dispatch journaled once with one job, one
   job per dispatch in squeue (by its token), no park, nothing handed to the paid lane (a command lane that appends
   the dispatch id to a file), at most one squeue per poll interval.
2. killed: one ``fellows-fsm submit`` of 250 scripts paced at 10 sbatch a second; the background driver SIGKILLed
   once about a third of them are submitted. The command starts another driver and returns once every job is
   queued; every printed dispatch has exactly one job, none was submitted twice.

Every job is 1 GPU; the windows are an hour long (``park_cap_seconds = 3600``), so a dispatch that leaves its rung
or is handed to the paid lane during the run did so for the fault, not for its window. Run it with a cluster of
its own:

    scripts/in-netns faults40 bash -c 'scripts/dev-slurm up && eval "$(scripts/dev-slurm env)" && \
        nice -n 10 .venv/bin/python -m benchmarks.agent_faults'
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import realslurm
from benchmarks.agent_loop import POLL, driver_calls, setup, squeue_rate, submit_argv
from benchmarks.background_driver import owner, stop_driver
from benchmarks.common import write_result

OUTAGE_SECONDS = 20.0


def _paid_lane(state_dir: Path, *, pace: float | None = None) -> Path:
    """The run's config with a paid command lane after the ladder (it appends the dispatch id to paid.txt)."""
    config = state_dir / "fellows.toml"
    text = config.read_text(encoding="utf-8")
    if pace is not None:
        text = text.replace("[fellows]\n", f"[fellows]\nmax_submits_per_second = {pace:g}\n")
    command = ["/bin/sh", "-c", f'echo "$1" >> {state_dir / "paid.txt"}', "sh", "{dispatch_id}"]
    config.write_text(text + f"\n[lanes.gcp]\ncommand = {json.dumps(command)}\n", encoding="utf-8")
    return config


def _least_gap(calls: list[tuple[str, float]]) -> float | None:
    """The shortest time between two of the driver's squeue calls (a poll's is one interval after the last's)."""
    times = sorted(at for cmd, at in calls if cmd == "squeue")
    return round(min(b - a for a, b in itertools.pairwise(times)), 3) if times[1:] else None


def _ctld_pid() -> int:
    return int((Path(os.environ["FELLOWS_SLURM_RUNTIME"]) / "run" / "slurmctld.pid").read_text().strip())


def _journal(state_dir: Path) -> dict[str, Any]:
    """Per dispatch: its job id, and every trigger its steps took."""
    path = state_dir / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = {str(i): j for i, j in db.execute("SELECT id, job_id FROM dispatches").fetchall()}
        triggers = Counter(str(t) for (t,) in db.execute("SELECT trigger FROM transitions").fetchall())
        jobs = Counter(str(d) for (d,) in db.execute("SELECT dispatch_id FROM jobs").fetchall())
    return {"rows": rows, "triggers": triggers, "jobs_per_dispatch": jobs}


def _tokens() -> Counter[str]:
    """Jobs in squeue per dispatch (by the token each rung's job carries in its comment)."""
    queue = subprocess.run(["squeue", "-h", "-o", "%k"], capture_output=True, text=True, check=False).stdout
    return Counter(line.strip().rsplit("-r", 1)[0] for line in queue.splitlines() if line.startswith("fsm-"))


def _checks(state_dir: Path, printed: list[str]) -> dict[str, Any]:
    j, tokens = _journal(state_dir), _tokens()
    paid = state_dir / "paid.txt"
    return {
        "printed_ids": len(printed),
        "distinct_printed_ids": len(set(printed)),
        "journaled_dispatches": len(j["rows"]),
        "printed_not_journaled": len(set(printed) - set(j["rows"])),
        "journaled_with_job": sum(v is not None for v in j["rows"].values()),
        "dispatches_with_more_than_one_journaled_job": sum(1 for n in j["jobs_per_dispatch"].values() if n > 1),
        "jobs_in_squeue_with_a_token": sum(tokens.values()),
        "dispatches_with_more_than_one_job_in_squeue": sum(1 for n in tokens.values() if n > 1),
        "parks": j["triggers"].get("park", 0),
        "handed_to_the_paid_lane": len(paid.read_text(encoding="utf-8").split()) if paid.exists() else 0,
        "triggers": dict(j["triggers"]),
    }


def outage(shells: int, each: int) -> dict[str, Any]:
    """Every shell's submit while slurmctld is stopped; it is continued ``OUTAGE_SECONDS`` later."""
    state_dir, counter, env = setup("agent-outage-")
    _paid_lane(state_dir)
    ctld = _ctld_pid()
    try:
        argvs = [submit_argv([realslurm.script(600) for _ in range(each)]) for _ in range(shells)]
        os.kill(ctld, signal.SIGSTOP)
        t0 = time.time()
        waker = threading.Timer(OUTAGE_SECONDS, os.kill, (ctld, signal.SIGCONT))
        waker.start()
        try:
            procs = [
                subprocess.Popen(a, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs
            ]
            done = [p.communicate(timeout=1800) for p in procs]
        finally:
            waker.cancel()
            os.kill(ctld, signal.SIGCONT)
        t1 = time.time()
        failed = [err for p, (_, err) in zip(procs, done, strict=True) if p.returncode != 0]
        printed = [i for out, _ in done for i in out.split()]
        rec = owner(state_dir)
        assert rec is not None
        calls = driver_calls(counter, int(rec["pid"]))
        checks = _checks(state_dir, printed)
        stop_driver(state_dir / "fellows.toml")
    finally:
        realslurm.cancel(realslurm.live_ids())
        realslurm.wait_empty(timeout=300)
    return {
        "shells": shells,
        "scripts_each": each,
        "outage_seconds": OUTAGE_SECONDS,
        "wall_seconds_first_start_to_last_queued": round(t1 - t0, 3),
        "failed_commands": failed,
        **checks,
        "driver_calls": dict(Counter(c for c, _ in calls)),
        "squeue_rate": squeue_rate(calls, t0, t1),
        "least_seconds_between_squeue_calls": _least_gap(calls),
    }


def killed(scripts: int, pace: float) -> dict[str, Any]:
    """One submit of ``scripts``; its driver SIGKILLed once about a third of them have their first sbatch."""
    state_dir, _, env = setup("agent-killed-")
    _paid_lane(state_dir, pace=pace)
    path = state_dir / "journal.sqlite3"

    def submitted() -> int:
        with (
            contextlib.suppress(sqlite3.Error),
            contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db,
        ):
            return int(db.execute("SELECT COUNT(DISTINCT dispatch_id) FROM transitions").fetchone()[0])
        return 0

    try:
        argv = submit_argv([realslurm.script(600) for _ in range(scripts)])
        t0 = time.time()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while submitted() < scripts // 3 and proc.poll() is None:
            time.sleep(0.05)
        rec = owner(state_dir)
        assert rec is not None
        first, at_kill = int(rec["pid"]), submitted()
        os.kill(first, signal.SIGKILL)
        out, err = proc.communicate(timeout=1800)
        t1 = time.time()
        rec = owner(state_dir)
        checks = _checks(state_dir, out.split())
        stop_driver(state_dir / "fellows.toml")
    finally:
        realslurm.cancel(realslurm.live_ids())
        realslurm.wait_empty(timeout=300)
    return {
        "scripts": scripts,
        "max_submits_per_second": pace,
        "submitted_when_killed": at_kill,
        "exit_status": proc.returncode,
        "stderr": err.strip()[-2000:],
        "a_new_driver": rec is not None and int(rec["pid"]) != first,
        "wall_seconds": round(t1 - t0, 3),
        **checks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shells", type=int, default=4)
    parser.add_argument("--each", type=int, default=250)
    parser.add_argument("--killed-scripts", type=int, default=250)
    parser.add_argument("--pace", type=float, default=10.0)
    args = parser.parse_args()
    result: dict[str, Any] = {"poll_interval_seconds": POLL}
    result["outage"] = outage(args.shells, args.each)
    print(json.dumps(result["outage"], indent=2), flush=True)
    result["killed"] = killed(args.killed_scripts, args.pace)
    print(json.dumps(result["killed"], indent=2), flush=True)
    print(write_result("agent_faults", result))


if __name__ == "__main__":
    main()
