"""Benchmark: an agent's loop on the real local SLURM (issue 40), through the CLI as a program runs it.

1. latency: a background driver at ``poll_interval_seconds = 10``; 50 ``fellows-fsm submit --detach`` one after
   another (each its own process, timed start to exit; the first one also starts the driver, so it is reported
   apart), then ``fellows-fsm cancel`` of 20 of those dispatches (pending: the cluster is full), timed the same way.
2. burst: 4 shells at once, each ``fellows-fsm submit`` of 250 scripts (one dispatch each): the wall time from the
   first start to the last command's exit (each returns once every one of its jobs is queued), every dispatch
   journaled once, one job each in squeue, no duplicate.
Both count the SLURM commands the driver runs (wrapper scripts first on the submitting shell's PATH, which the
driver journals and uses): squeue calls against the poll intervals the run spanned.

Run it with a cluster of its own:

    scripts/in-netns bench40 bash -c 'scripts/dev-slurm up && eval "$(scripts/dev-slurm env)" && \
        nice -n 10 .venv/bin/python -m benchmarks.agent_loop'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import realslurm
from benchmarks.background_driver import CLI, env_of, owner, stop_driver, wrappers
from benchmarks.common import percentiles, write_result

POLL = 10.0


def write_config(state_dir: Path) -> Path:
    path = state_dir / "fellows.toml"
    path.write_text(
        f'state_dir = "{state_dir}"\n\n[fellows]\nqos = "high-eur"\nqos_ladder = ["normal-eur", "low-eur"]\n'
        f'park_cap_seconds = 3600\npoll_interval_seconds = {POLL:g}\npark_early = "off"\n\n'
        '[router]\norder = ["fellows"]\ncontroller_deadline = false\ndriver_idle_seconds = 60\n',
        encoding="utf-8",
    )
    return path


def setup(prefix: str) -> tuple[Path, Path, dict[str, str]]:
    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    config = write_config(state_dir)
    bin_dir = state_dir / "bin"
    bin_dir.mkdir()
    counter = state_dir / "calls.txt"
    wrappers(bin_dir, counter)
    return state_dir, counter, env_of(config, str(bin_dir))


def driver_calls(counter: Path, pid: int) -> list[tuple[str, float]]:
    out = []
    for line in counter.read_text(encoding="utf-8").splitlines():
        cmd, at, ppid = line.split()
        if int(ppid) == pid:
            out.append((cmd, float(at)))
    return out


def squeue_rate(calls: list[tuple[str, float]], start: float, end: float) -> dict[str, Any]:
    """squeue calls by the driver between ``start`` and ``end``, per poll interval (the most in any window)."""
    times = sorted(a for c, a in calls if c == "squeue" and start <= a <= end)
    most = max((sum(1 for u in times if t <= u < t + POLL) for t in times), default=0)
    return {"squeue": len(times), "poll_intervals": round((end - start) / POLL, 1), "most_in_one_interval": most}


def submit_argv(scripts: list[str], *flags: str) -> list[str]:
    return [CLI, "submit", *flags, "--gpus", "1", "--time", "10:00", *scripts, "--", *realslurm.job_args()]


def latency(runs: int, cancels: int) -> dict[str, Any]:
    state_dir, counter, env = setup("agent-latency-")
    blockers = [realslurm.sbatch("high-eur", 8, 600, name="agent-block", time_limit=1800) for _ in range(2)]
    try:
        realslurm.wait_state(blockers, "RUNNING")
        times, ids = [], []
        t_start = time.time()
        for _ in range(runs + 1):
            t0 = time.monotonic()
            proc = subprocess.run(
                submit_argv([realslurm.script(600)], "--detach"), env=env, capture_output=True, text=True, check=False
            )
            times.append(time.monotonic() - t0)
            if proc.returncode != 0:
                raise RuntimeError(f"submit failed ({proc.returncode}): {proc.stderr}")
            ids.append(proc.stdout.strip())
        rec = owner(state_dir)
        assert rec is not None
        pid = int(rec["pid"])
        cancel_times = []
        for dispatch_id in ids[1 : 1 + cancels]:
            t0 = time.monotonic()
            proc = subprocess.run([CLI, "cancel", dispatch_id], env=env, capture_output=True, text=True, check=False)
            cancel_times.append(time.monotonic() - t0)
            if proc.returncode != 0:
                raise RuntimeError(f"cancel failed ({proc.returncode}): {proc.stderr}")
        t_end = time.time()
        calls = driver_calls(counter, pid)
        stop_driver(state_dir / "fellows.toml")
    finally:
        realslurm.cancel([*blockers, *realslurm.live_ids()])
        realslurm.wait_empty()
    return {
        "poll_interval_seconds": POLL,
        "first_submit_seconds_starting_the_driver": round(times[0], 3),
        "submit_detach_seconds": percentiles(times[1:]),
        "cancel_seconds": percentiles(cancel_times),
        "driver_calls": dict(Counter(c for c, _ in calls)),
        "squeue_rate": squeue_rate(calls, t_start, t_end),
        "note": "each cancel asks squeue for its own jobs (Withdrawal.withdraw), as before this issue",
    }


def journaled(state_dir: Path) -> list[tuple[str, str | None]]:
    path = state_dir / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return [(str(i), j) for i, j in db.execute("SELECT id, job_id FROM dispatches").fetchall()]


def burst(shells: int, each: int) -> dict[str, Any]:
    state_dir, counter, env = setup("agent-burst-")
    try:
        argvs = [submit_argv([realslurm.script(600) for _ in range(each)]) for _ in range(shells)]
        t0 = time.time()
        procs = [subprocess.Popen(a, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs]
        done = [p.communicate(timeout=1800) for p in procs]
        t1 = time.time()
        failed = [err for p, (_, err) in zip(procs, done, strict=True) if p.returncode != 0]
        printed = [i for out, _ in done for i in out.split()]
        rows = journaled(state_dir)
        rec = owner(state_dir)
        assert rec is not None
        calls = driver_calls(counter, int(rec["pid"]))
        queue = subprocess.run(["squeue", "-h", "-o", "%k"], capture_output=True, text=True, check=False).stdout
        tokens = Counter(line.strip().rsplit("-r", 1)[0] for line in queue.splitlines() if line.startswith("fsm-"))
        stop_driver(state_dir / "fellows.toml")
    finally:
        realslurm.cancel(realslurm.live_ids())
        realslurm.wait_empty(timeout=300)
    return {
        "shells": shells,
        "scripts_each": each,
        "wall_seconds_first_start_to_last_queued": round(t1 - t0, 3),
        "failed_commands": failed,
        "printed_ids": len(printed),
        "distinct_printed_ids": len(set(printed)),
        "journaled_dispatches": len(rows),
        "journaled_with_job": sum(j is not None for _, j in rows),
        "jobs_in_squeue_with_a_token": sum(tokens.values()),
        "dispatches_with_more_than_one_job": sum(1 for n in tokens.values() if n > 1),
        "driver_calls": dict(Counter(c for c, _ in calls)),
        "squeue_rate": squeue_rate(calls, t0, t1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--cancels", type=int, default=20)
    parser.add_argument("--shells", type=int, default=4)
    parser.add_argument("--each", type=int, default=250)
    parser.add_argument("--skip-burst", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {}
    if not args.skip_latency:
        result["latency"] = latency(args.runs, args.cancels)
        print(json.dumps(result["latency"], indent=2), flush=True)
    if not args.skip_burst:
        result["burst"] = burst(args.shells, args.each)
        print(json.dumps(result["burst"], indent=2), flush=True)
    print(write_result("agent_loop_burst" if args.skip_latency else "agent_loop", result, module="agent_loop"))


if __name__ == "__main__":
    main()
