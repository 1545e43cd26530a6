"""Benchmark: the commands on a journal of 1,000,000 finished dispatches against an empty one (issue 40, item 3).

**The journal.** A block of ``--block`` finished dispatches is written by the real Router on the shipped
FakeScheduler and an in-memory paid lane (testing.FakePaidLane), on a simulated clock, in batches of 200 spread
over ``--block-days`` days before now: 3 in 5 start on their first rung (final RUNNING), 1 in 5 are withdrawn by
their user (``Router.withdraw``: WITHDRAWN), 1 in 5 are pinned to the paid lane, run 30 minutes and end succeeded
(PAID_DONE, with their paid run). Every row is written by the executor, the paid follower and the withdrawal in
their own transactions, as in production. Writing 1,000,000 that way takes hours, so the block is then copied
(``--dispatches`` / ``--block`` copies in all) by SQL inside the journal: copy k has every row of the block, the
same columns, with the dispatch id suffixed ``k`` (4 digits) and every time (created, updated, each step, each job,
the handoff, the paid run) moved back by k times the block's span. So the journal holds ``--dispatches`` finished
dispatches with the rows the Router writes, over k spans of days back from now. ``--keep DIR`` keeps it (a later
run measures it again).

**The measure** (on the real local SLURM, run in its own network namespace): three state dirs, each with its
config (``poll_interval_seconds = 10``; the cluster's high-eur occupied by two 8-GPU jobs of our own, so every
dispatch stays pending): *empty* (a new journal), *full* (a copy of the 1,000,000, ``[journal] keep_days`` so large
that nothing moves) and *compacted* (another copy after ``fellows-fsm journal compact`` at the default 14 days:
the journal keeps the last 14 days, the archive the rest). In each, repeated ``--repeats`` times, the three states
taking turns: ``submit --detach`` (a driver running), ``status``, ``spend --json``, ``cancel`` of the dispatch
just submitted, each a process timed from its start to its exit; and a driver start: the driver stopped
(``driver stop``: it ends cleanly), then ``python -m fellows_fsm.driver.process JOURNAL`` spawned and timed until
its owner record says it has polled once (the first squeue answered). Shown apart: a driver start after a driver
was killed (SIGKILL), which reads every page of the journal first.

    .venv/bin/python -m benchmarks.journal_scale build --keep /tmp/journal-bench [--dispatches 1000000]
    scripts/in-netns journal bash -c 'scripts/dev-slurm up && eval "$(scripts/dev-slurm env)" && \\
        .venv/bin/python -m benchmarks.journal_scale measure --keep /tmp/journal-bench'
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import spread, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.testing import FakePaidLane

DAY = 86_400.0
PER_BATCH = 200
POLL = 10.0
TIMES = {
    "dispatches": ("created_at", "updated_at"),
    "transitions": ("at",),
    "jobs": ("at",),
    "handoffs": ("started_at", "finished_at"),
    "paid_runs": ("handed_at", "running_at", "ended_at"),
}
"""Every time column of every table: what a copy moves back."""


def build_block(state_dir: Path, count: int, days: float, now: float) -> dict[str, Any]:
    """Write ``count`` finished dispatches through the real Router over ``days`` days before ``now``."""
    clock = SimClock(now - days * DAY)
    gcp = CommandSettings(name="gcp", command=("true",), price_per_gpu_hour=3.2)
    lane = FakePaidLane(gcp, price_per_gpu_hour=3.2)
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=600.0, poll_interval_seconds=POLL),
        lanes=(gcp,),
        router=RouterConfig(order=("fellows",), max_rung_changes_per_tick=PER_BATCH * 2),
        state_dir=state_dir,
    )
    fake = FakeScheduler(clock)
    journal = Journal(config.journal_path)
    router = Router(config, fake, journal, clock=clock, lanes={"gcp": lane}).start()
    spec = JobSpec("train", "train.sbatch", gpus=1, time_limit_seconds=3600)
    batches = max(1, count // PER_BATCH)
    gap = days * DAY / batches
    started = time.perf_counter()
    for b in range(batches):
        clock.advance_to(max(clock.now(), now - days * DAY + b * gap))
        kinds = [("start", "start", "start", "withdraw", "paid")[i % 5] for i in range(PER_BATCH)]
        handles = [(kind, router.dispatch(spec, pin="gcp" if kind == "paid" else None)) for kind in kinds]
        for kind, handle in handles:
            if kind == "start" and handle.slurm_job_id is not None:
                fake.start(handle.slurm_job_id)
        clock.advance_to(clock.now() + POLL)
        router.poll()
        for kind, handle in handles:
            if kind == "withdraw":
                router.withdraw(handle.dispatch_id)
            elif kind == "paid":
                lane.move(handle.dispatch_id, PaidStatus.RUNNING)
        clock.advance_to(clock.now() + POLL)
        router.poll()
        clock.advance_to(clock.now() + 1800.0)
        for kind, handle in handles:
            if kind == "paid":
                lane.move(handle.dispatch_id, PaidStatus.SUCCEEDED, "exit 0")
        clock.advance_to(clock.now() + POLL)
        router.poll()
    seconds = time.perf_counter() - started
    states = Counter(r.state for r in journal.dispatches())
    live = len(journal.dispatches(live_only=True))
    journal.close()
    return {"block": batches * PER_BATCH, "states": dict(states), "live": live, "build_seconds": round(seconds, 1)}


def replicate(path: Path, copies: int, span: float) -> float:
    """Copy the journal's block ``copies - 1`` times, each with ids suffixed and times moved back (see above)."""
    started = time.perf_counter()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    columns = {t: [r[1] for r in db.execute(f"PRAGMA table_info({t})")] for t in TIMES}
    for k in range(1, copies):
        shift = k * span
        db.execute("BEGIN")
        for table, times in TIMES.items():
            key = "id" if table == "dispatches" else "dispatch_id"
            cols = [c for c in columns[table] if c != "seq"]
            picked = [
                f"{c} || printf('%04d', {k})" if c == key else (f"{c} - {shift}" if c in times else c) for c in cols
            ]
            source = f"(SELECT * FROM {table} WHERE length({key}) = 12)"  # the block: ids of 12 characters
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(picked)} FROM {source}")
        db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return time.perf_counter() - started


def build(keep: Path, dispatches: int, block: int, block_days: float) -> dict[str, Any]:
    base = keep / "base"
    base.mkdir(parents=True, exist_ok=True)
    now = time.time()
    made = build_block(base, block, block_days, now)
    copies = max(1, dispatches // made["block"])
    replicated = replicate(base / "journal.sqlite3", copies, block_days * DAY)
    with sqlite3.connect(base / "journal.sqlite3") as db:
        total = db.execute("SELECT count(*), sum(final) FROM dispatches").fetchone()
        oldest = db.execute("SELECT min(created_at) FROM dispatches").fetchone()[0]
    record = {
        **made,
        "copies": copies,
        "replicate_seconds": round(replicated, 1),
        "dispatches": total[0],
        "final": total[1],
        "oldest": datetime.datetime.fromtimestamp(oldest, datetime.UTC).isoformat(),
        "journal_mb": round((base / "journal.sqlite3").stat().st_size / 1e6, 1),
        "built": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "now": now,
    }
    (keep / "build.json").write_text(json.dumps(record), encoding="utf-8")
    return record


# --------------------------------------------------------------------------- the measure (real SLURM)
CLI = str(Path(sys.executable).with_name("fellows-fsm"))


def write_config(state_dir: Path, keep_days: float | None) -> Path:
    path = state_dir / "fellows.toml"
    journal = f"\n[journal]\nkeep_days = {keep_days:g}\n" if keep_days is not None else ""
    path.write_text(
        f'state_dir = "{state_dir}"\n\n[fellows]\nqos = "high-eur"\nqos_ladder = ["normal-eur", "low-eur"]\n'
        f'park_cap_seconds = 3600\npoll_interval_seconds = {POLL:g}\npark_early = "off"\n\n'
        '[router]\norder = ["fellows"]\ncontroller_deadline = false\ndriver_idle_seconds = 600\n' + journal,
        encoding="utf-8",
    )
    return path


def run(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, check=False, timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed ({done.returncode}): {done.stderr}")
    return seconds, done


def owner(state_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((state_dir / "journal.sqlite3.lock").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def driver_start(state_dir: Path, env: dict[str, str], *, kill: bool = False) -> float:
    """Stop the driver (cleanly, or SIGKILL with ``kill``), then time a new one from its spawn to its first poll."""
    record = owner(state_dir)
    if kill and record is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(record["pid"]), signal.SIGKILL)
        time.sleep(0.5)
    else:
        subprocess.run([CLI, "driver", "stop"], env=env, capture_output=True, check=False, timeout=120)
    started = time.time()
    t0 = time.perf_counter()
    subprocess.Popen(
        [sys.executable, "-m", "fellows_fsm.driver.process", str(state_dir / "journal.sqlite3")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    while True:
        record = owner(state_dir)
        if record is not None and record.get("since", 0) >= started - 1 and (record.get("last_tick") or 0) >= started:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"no driver polled in {state_dir}")
        time.sleep(0.01)


def measure(keep: Path, repeats: int, *, reuse: bool = False) -> dict[str, Any]:
    from benchmarks import realslurm  # noqa: PLC0415 - only the measure needs a cluster

    built = json.loads((keep / "build.json").read_text(encoding="utf-8"))
    work = keep / "work"
    shutil.rmtree(work, ignore_errors=True)
    states: dict[str, Path] = {}
    saved = keep / "compacted-base"
    reuse = reuse and (saved / "compact.json").exists()
    for name in ("empty", "full", "compacted"):
        states[name] = work / name / "state"
        states[name].mkdir(parents=True)
        if name == "full" or (name == "compacted" and not reuse):
            shutil.copyfile(keep / "base" / "journal.sqlite3", states[name] / "journal.sqlite3")
        elif name == "compacted":  # the journal and archive an earlier run's compact left
            for file in ("journal.sqlite3", "journal-archive.sqlite3"):
                shutil.copyfile(saved / file, states[name] / file)
    configs = {
        "empty": write_config(states["empty"], None),
        "full": write_config(states["full"], 1_000_000),
        "compacted": write_config(states["compacted"], None),
    }
    envs = {n: {**os.environ, "FELLOWS_FSM_CONFIG": str(c)} for n, c in configs.items()}
    first_open = {}
    for name in ("full", "compacted"):  # the schema is current: nothing to upgrade; timed once
        t0 = time.perf_counter()
        Journal(states[name] / "journal.sqlite3").close()
        first_open[name] = round(time.perf_counter() - t0, 3)
    if reuse:
        kept = json.loads((saved / "compact.json").read_text(encoding="utf-8"))
        compact_seconds, compacted_json = kept["seconds"], {**kept["out"], "reused_from": kept["date"]}
    else:
        compact_seconds, compacted = run(envs["compacted"], "journal", "compact", "--json")
        compacted_json = json.loads(compacted.stdout)
        saved.mkdir(exist_ok=True)
        for file in ("journal.sqlite3", "journal-archive.sqlite3"):
            with contextlib.closing(sqlite3.connect(states["compacted"] / file)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.copyfile(states["compacted"] / file, saved / file)
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        record = {"seconds": compact_seconds, "out": compacted_json, "date": date}
        (saved / "compact.json").write_text(json.dumps(record), encoding="utf-8")
    sizes = {
        n: {f.name: round(f.stat().st_size / 1e6, 1) for f in sorted(states[n].glob("journal*.sqlite3"))}
        for n in states
    }
    blockers = [realslurm.sbatch("high-eur", 8, 3000, name="journal-block", time_limit=3600) for _ in range(2)]
    figures: dict[str, dict[str, list[float]]] = {n: {} for n in states}
    try:
        realslurm.wait_state(blockers, "RUNNING")
        script = realslurm.script(600)
        submit = ["submit", "--detach", "--gpus", "1", "--time", "10:00", script, "--", *realslurm.job_args()]
        for name in states:  # one live dispatch each, and its driver
            run(envs[name], *submit)
        for _ in range(repeats):
            for name, state_dir in states.items():
                env, mine = envs[name], figures[name]
                seconds, done = run(env, *submit)
                mine.setdefault("submit --detach", []).append(seconds)
                dispatch_id = done.stdout.strip()
                mine.setdefault("status", []).append(run(env, "status")[0])
                mine.setdefault("spend --json", []).append(run(env, "spend", "--json")[0])
                mine.setdefault("cancel", []).append(run(env, "cancel", dispatch_id)[0])
                mine.setdefault("driver start", []).append(driver_start(state_dir, env))
        killed = {name: round(driver_start(states[name], envs[name], kill=True), 3) for name in states}
        for name in states:
            subprocess.run([CLI, "driver", "stop"], env=envs[name], capture_output=True, check=False, timeout=120)
    finally:
        realslurm.cancel([*blockers, *realslurm.live_ids()])
        realslurm.wait_empty(timeout=300)
    table = {n: {cmd: spread(v) for cmd, v in f.items()} for n, f in figures.items()}
    ratios = {
        n: {cmd: round(statistics.median(v) / statistics.median(figures["empty"][cmd]), 3) for cmd, v in f.items()}
        for n, f in figures.items()
        if n != "empty"
    }
    return {
        "journal": built,
        "first_open_to_write_seconds": first_open,
        "compact": {"seconds": round(compact_seconds, 1), **compacted_json},
        "files_mb": sizes,
        "seconds": table,
        "ratio_of_medians_to_empty": ratios,
        "driver_start_after_a_kill_seconds": killed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("build", "measure"))
    parser.add_argument("--keep", type=Path, required=True, help="where the built journal is kept")
    parser.add_argument("--dispatches", type=int, default=1_000_000)
    parser.add_argument("--block", type=int, default=20_000, help="dispatches written by the Router (then copied)")
    parser.add_argument("--block-days", type=float, default=10.0, help="the days the block spans")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--reuse-compacted", action="store_true", help="measure the journal and archive an earlier measure compacted"
    )
    args = parser.parse_args()
    if args.step == "build":
        print(json.dumps(build(args.keep, args.dispatches, args.block, args.block_days), indent=2))
        return
    result = measure(args.keep, args.repeats, reuse=args.reuse_compacted)
    print(json.dumps(result, indent=2))
    target = "on 1,000,000 finished dispatches: submit --detach, status, spend, cancel, a driver start within 1.2x"
    print(f"wrote {write_result('journal_scale', {'target': target, **result})}")


if __name__ == "__main__":
    main()
