"""Benchmark: ``spend`` over a real journal of 100,000 finished paid dispatches (issue 27: under 1 s).

The journal is written by the real driver, not by a bulk insert: the real Router, on the shipped FakeScheduler
(nothing ever starts) and four in-memory paid lanes (testing.FakePaidLane: ``gcp`` after the ladder, priced 3.2 a
GPU-hour; ``gcp-eu`` 2.9, ``sky`` 2.5 and ``runpod`` unpriced, each pinned), on a simulated clock. Dispatches come in
batches spread over the three months before ``now`` (a fixed seed; 1 to 16 GPUs; a time limit of 30 min to 24 h):
a ``gcp`` one walks every rung and is handed off, a pinned one is handed off at once. Each paid job runs as soon as
its lane has it, for a random part of its time limit, and ends succeeded (3 in 5), failed (1 in 5) or cancelled by
the user (1 in 5: ``Router.withdraw``, one delete). Every step (transitions, jobs, handoffs and paid_runs rows) is
written by the executor, the paid follower and the withdrawal, as in production; ends fall on a 5-minute grid of the
simulated clock (each one a poll), so the build polls about once per 5 minutes of the three months.

Then, on that journal (warm in the page cache), each ``--repeats`` times: (a) ``Journal(path, readonly=True)``
opened (as ``spend`` opens it) and ``Journal.paid_runs()`` read (every run; and only those handed since the earlier
of this week's and this month's start, all that the day, week and month windows need), and, shown beside it, the
journal opened to write (as a driver or a submit opens it); (b) ``core/budget.py: spend`` over every run read; (c)
the whole ``fellows-fsm spend --json`` as a process, when this checkout has that command (else recorded as absent),
or the command of another source tree (``--spend-src``: a branch's ``src/`` taken with ``git archive``, first on
PYTHONPATH). Median, min and max wall seconds of each. ``--keep DIR`` builds the journal in DIR and keeps it; a
later run with the same DIR measures that journal again instead of building one (its build figures are kept too).

    .venv/bin/python -m benchmarks.spend_read [--dispatches 100000] [--repeats 9] [--keep DIR] [--spend-src DIR]
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zoneinfo
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import spread, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.budget import spend
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.testing import FakePaidLane

UTC = zoneinfo.ZoneInfo("UTC")
LANES = (("gcp", 3.2), ("gcp-eu", 2.9), ("sky", 2.5), ("runpod", None))
"""The paid lanes and their price per GPU-hour (runpod: none configured). ``gcp`` comes after the ladder."""
LIMITS = (1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)
GPUS = (1, 2, 4, 8, 8, 16)
ENDS = ("succeeded", "succeeded", "succeeded", "failed", "cancelled")
POLL = 10.0
CAP = 30.0
GRID = 300.0
"""Run ends (and batch arrivals) fall on this grid of the simulated clock: at most one poll per 5 minutes idle."""
SPAN = 91 * 86400.0
PER_BATCH = 200


def build(state_dir: Path, count: int, now: float, seed: int = 27) -> dict[str, Any]:
    """Write ``count`` finished paid dispatches into the journal under ``state_dir`` through the real Router,
    every run ended before ``now``; return what was written and how long it took."""
    rng = random.Random(seed)
    first = (now - SPAN) // GRID * GRID
    last_start = now - 4 * GRID  # the last batch 20 minutes before now (its runs cut to end by now)
    clock = SimClock(first)
    lanes_config = tuple(CommandSettings(name=n, command=("true",), price_per_gpu_hour=p) for n, p in LANES)
    lanes = {c.name: FakePaidLane(c, price_per_gpu_hour=p) for c, (_, p) in zip(lanes_config, LANES, strict=True)}
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=POLL),
        lanes=lanes_config,
        router=RouterConfig(max_rung_changes_per_tick=PER_BATCH * 2),
        state_dir=state_dir,
    )
    journal = Journal(config.journal_path)
    router = Router(config, FakeScheduler(clock, total_gpus=0), journal, clock=clock, lanes=lanes).start()
    gap = (last_start - first) / max(1, count // PER_BATCH)
    batches = [first + GRID * round(i * gap / GRID) for i in range(count // PER_BATCH)]
    batches.reverse()
    ends: list[tuple[float, str, str, str]] = []  # (when, dispatch id, lane, how it ends)
    seen = dict.fromkeys(lanes, 0)
    planned: dict[str, tuple[str, float]] = {}  # dispatch id -> (how it ends, for how long it runs)
    polls, started = 0, time.perf_counter()
    while batches or ends or router.busy:
        walking = bool(router.live) or bool(router.running) or bool(router.pending_handoffs)
        due = [t for t in (batches[-1] if batches else None, ends[0][0] if ends else None) if t is not None]
        step = clock.now() + POLL if walking or not due else min(due)
        clock.advance_to(max(clock.now(), min([step, *due])))
        while batches and batches[-1] <= clock.now():
            batches.pop()
            for _ in range(PER_BATCH):
                lane, _price = LANES[rng.randrange(len(LANES))]
                spec = JobSpec(
                    name="train", script="train.sbatch", gpus=rng.choice(GPUS), time_limit_seconds=rng.choice(LIMITS)
                )
                dispatch_id = router.dispatch(spec, pin=None if lane == "gcp" else lane).dispatch_id
                limit = float(spec.time_limit_seconds or 0)
                planned[dispatch_id] = (rng.choice(ENDS), rng.uniform(0.02, 1.0) * (limit - GRID))
        while ends and ends[0][0] <= clock.now():
            _, dispatch_id, lane, how = heapq.heappop(ends)
            if how == "cancelled":
                router.withdraw(dispatch_id)
            else:
                status = PaidStatus.SUCCEEDED if how == "succeeded" else PaidStatus.FAILED
                lanes[lane].move(dispatch_id, status, "exit 0" if how == "succeeded" else "exit 1")
        router.poll()
        polls += 1
        for name, fake in lanes.items():
            for dispatch_id in fake.created[seen[name] :]:
                fake.move(dispatch_id, PaidStatus.RUNNING)  # the next poll sees it run
                how, ran = planned.pop(dispatch_id)
                end = min((clock.now() + POLL + ran) // GRID * GRID + GRID, (now - 1) // GRID * GRID)
                heapq.heappush(ends, (end, dispatch_id, name, how))
            seen[name] = len(fake.created)
    built = time.perf_counter() - started
    rows = journal.dispatches()
    runs = journal.paid_runs()
    journal.close()
    return {
        "dispatches": len(rows),
        "states": dict(Counter(r.state for r in rows)),
        "paid_runs": len(runs),
        "paid_run_status": dict(Counter(r.status for r in runs)),
        "handed_from": datetime.datetime.fromtimestamp(min(r.handed_at for r in runs), UTC).isoformat(),
        "handed_to": datetime.datetime.fromtimestamp(max(r.handed_at for r in runs), UTC).isoformat(),
        "polls": polls,
        "build_seconds": round(built, 1),
        "journal_mb": round(sum(p.stat().st_size for p in state_dir.glob("journal.sqlite3*")) / 1e6, 1),
    }


def windows_start(now: float) -> float:
    """The earlier of the start of this week (Monday) and of this month, in UTC: all the three windows read."""
    day = datetime.datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    week = day - datetime.timedelta(days=day.weekday())
    return min(week, day.replace(day=1)).timestamp()


def timed(call: Callable[[], object], repeats: int) -> dict[str, Any]:
    """Wall seconds of ``repeats`` calls: min / median / max."""
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        walls.append(time.perf_counter() - started)
    return spread(walls, 4)


def cli_env(source: Path | None) -> dict[str, str] | None:
    """The environment the command runs in: this checkout's fellows_fsm, or the one under ``source`` first on
    PYTHONPATH (a branch's ``src/``, taken with ``git archive``)."""
    if source is None:
        return None
    return {**os.environ, "PYTHONPATH": str(source.resolve())}


def has_spend_command(env: dict[str, str] | None) -> bool:
    """Whether the CLI has ``fellows-fsm spend``."""
    listed = subprocess.run(
        [sys.executable, "-m", "fellows_fsm", "--help"], capture_output=True, text=True, check=True, timeout=60, env=env
    )
    return any(line.split()[:1] == ["spend"] for line in listed.stdout.splitlines())


def measure(state_dir: Path, now: float, repeats: int, source: Path | None = None, note: str = "") -> dict[str, Any]:
    """Time the read, the arithmetic and the command over the journal under ``state_dir``."""
    path = state_dir / "journal.sqlite3"
    since = windows_start(now)

    def open_and_read(since: float | None) -> Callable[[], object]:
        def call() -> object:
            with Journal(path, readonly=True) as journal:  # as `spend` and `status` open it
                return journal.paid_runs(since=since)

        return call

    def open_to_write() -> None:
        Journal(path).close()  # as a driver or a submit opens it: quick_check and every row read first

    with Journal(path) as journal:
        runs = journal.paid_runs()
        recent = journal.paid_runs(since=since)
        read_all = timed(journal.paid_runs, repeats)
        read_recent = timed(lambda: journal.paid_runs(since=since), repeats)
    totals = spend(runs, now, UTC)
    result: dict[str, Any] = {
        "now": datetime.datetime.fromtimestamp(now, UTC).isoformat(),
        "runs_read": len(runs),
        "runs_since_windows_start": len(recent),
        "windows_start": datetime.datetime.fromtimestamp(since, UTC).isoformat(),
        "runs_in": {"day": totals.day.total.runs, "week": totals.week.total.runs, "month": totals.month.total.runs},
        "month_gpu_hours": round(totals.month.total.gpu_hours, 1),
        "month_cost": round(totals.month.total.cost or 0.0, 1),
        "read_seconds": {
            "paid_runs_all": read_all,
            "paid_runs_since_windows_start": read_recent,
            "open_and_paid_runs_all": timed(open_and_read(None), repeats),
            "open_and_paid_runs_since_windows_start": timed(open_and_read(since), repeats),
            "open_to_write": timed(open_to_write, 3),
        },
        "spend_seconds": {
            "all_runs": timed(lambda: spend(runs, now, UTC), repeats),
            "runs_since_windows_start": timed(lambda: spend(recent, now, UTC), repeats),
        },
        "read_and_spend_seconds": timed(lambda: spend(open_and_read(None)(), now, UTC), repeats),  # type: ignore[arg-type]
    }
    env = cli_env(source)
    if has_spend_command(env):
        (state_dir / "fellows.toml").write_text(
            f'state_dir = "{state_dir}"\n'
            + "".join(
                f'[lanes.{name}]\ncommand = ["true"]\n' + (f"price_per_gpu_hour = {p}\n" if p else "")
                for name, p in LANES
            ),
            encoding="utf-8",
        )
        argv = [sys.executable, "-m", "fellows_fsm", "--config", str(state_dir / "fellows.toml"), "spend", "--json"]
        walls, out = [], ""
        for _ in range(repeats):
            started = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120, env=env)
            walls.append(time.perf_counter() - started)
            out = done.stdout
        result["cli"] = {
            "argv": ["fellows-fsm", *argv[3:]],
            "source": None if source is None else str(source),
            "source_note": note,
            "wall_seconds": spread(walls, 4),
            "stdout": out[:3000],
        }
    else:
        result["cli"] = None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dispatches", type=int, default=100_000, help="finished paid dispatches in the journal")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per figure")
    parser.add_argument(
        "--keep", type=Path, help="build the journal here and keep it (if one was built there: reuse it)"
    )
    parser.add_argument(
        "--spend-src", type=Path, help="run the command from this fellows_fsm source tree (a branch's src/) instead"
    )
    parser.add_argument("--spend-src-note", default="", help="what --spend-src is (a branch and commit), recorded")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fellows-spend-") as scratch:
        state_dir = args.keep or Path(scratch)
        stamp = state_dir / "build.json"
        if stamp.exists():  # built by an earlier run with --keep: measured again, as it was built
            built = json.loads(stamp.read_text(encoding="utf-8"))
            now, journal = built["now"], {**built["journal"], "reused_from": built["date"]}
        else:
            now = time.time()
            journal = build(state_dir, args.dispatches, now)
            date = datetime.datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            stamp.write_text(json.dumps({"now": now, "journal": journal, "date": date}), encoding="utf-8")
        print(json.dumps(journal))
        figures = measure(state_dir, now, args.repeats, args.spend_src, args.spend_src_note)
    print(json.dumps(figures, indent=2))
    target = "`fellows-fsm spend` over a journal of 100,000 finished dispatches in under 1 s"
    path = write_result("spend_read", {"target": target, "journal": journal, **figures})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
