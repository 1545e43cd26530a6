"""Benchmark: ``fellows-fsm spend`` over a journal of 100,000 finished paid dispatches, the journal read included.

benchmarks/spend.py times the arithmetic alone (core/budget.py: ``spend`` on runs already in memory); this one
times what a user waits for: the journal's one query of the paid runs handed since the earliest window began
(api.py: ``read_spend``), each row made a ``PaidRun``, and the arithmetic; then the whole command,
``fellows-fsm spend --json`` in a process of its own (Python's start, the imports, the config, the output).

The journal is built once per case in a temporary directory: 100,000 dispatches (``Journal.add_dispatch``, as the
driver journals them) and their paid runs (benchmarks/spend.py: ``build_runs``, the same seeded runs, written in one
transaction straight into ``paid_runs``: the rows the driver's steps leave, without walking 100,000 ladders). The
command reads the wall clock, so the runs are handed before the benchmark's own start (not benchmarks/spend.py's
fixed ``NOW``): over the 13 weeks before it (``three-months``: a journal that grew for a quarter, of which spend
reads the windows' runs), since this month's start (``all-this-month``), since today's (``all-today``).

    .venv/bin/python -m benchmarks.spend_read [--runs 100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from benchmarks.spend import build_runs, timed
from fellows_fsm.api import read_spend
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.budget import Windows
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import JobSpec

UTC = datetime.UTC
CASES = ("three-months", "all-this-month", "all-today")


def first_handoff(case: str, now: float) -> float:
    """The earliest handoff of ``case``'s runs (they are handed between it and ``now``)."""
    windows = Windows.at(now, UTC)
    return {"three-months": now - 91 * 86400.0, "all-this-month": windows.month, "all-today": windows.day}[case]


LADDER = Ladder((Rung(0, "high-eur", 600.0), Rung(1, "normal-eur", 600.0), Rung(2, "low-eur", 600.0)))


def build_journal(path: Path, case: str, count: int, now: float) -> None:
    """A journal of ``count`` dispatches, each with its finished paid run of ``case``, handed before ``now``."""
    runs = build_runs(count, first_handoff(case, now), now)
    journal = Journal(path)
    try:
        for run in runs:
            spec = JobSpec(name="train", script="train.sbatch", gpus=run.gpus, time_limit_seconds=run.limit_seconds)
            journal.add_dispatch(run.dispatch_id, spec, LADDER, pinned=False, intent="prod", at=run.handed_at - 1800)
    finally:
        journal.close()
    db = sqlite3.connect(path)
    with db:
        db.executemany(
            "INSERT INTO paid_runs (dispatch_id, lane, handed_at, gpus, limit_seconds, price_per_gpu_hour, status,"
            " running_at, ended_at) VALUES (?,?,?,?,?,?,?,?,?)",
            [
                (r.dispatch_id, r.lane, r.handed_at, r.gpus, r.limit_seconds, r.price_per_gpu_hour, r.status, *ends)
                for r in runs
                for ends in [(r.running_at, r.ended_at)]
            ],
        )
    db.close()


def measure(case: str, count: int, repeats: int) -> dict[str, Any]:
    """Build the case's journal, then time ``read_spend`` on it and the command end to end."""
    now = time.time()
    budget = BudgetConfig(timezone="UTC")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        started = time.perf_counter()
        build_journal(state / "journal.sqlite3", case, count, now)
        built = time.perf_counter() - started
        journal = Journal(state / "journal.sqlite3", readonly=True)
        try:
            result = read_spend(journal, budget, now)
            read = timed(lambda: read_spend(journal, budget, now), repeats)
        finally:
            journal.close()
        config = Path(tmp) / "fellows.toml"
        config.write_text(f'state_dir = "{state}"\n\n[budget]\ntimezone = "UTC"\n', encoding="utf-8")
        env = {**os.environ, "FELLOWS_FSM_CONFIG": str(config)}
        command = [sys.executable, "-m", "fellows_fsm", "spend", "--json"]
        shown = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        whole = timed(lambda: subprocess.run(command, env=env, capture_output=True, check=True), repeats)
    return {
        "case": case,
        "runs": count,
        "runs_in": {"day": result.day.total.runs, "week": result.week.total.runs, "month": result.month.total.runs},
        "command_runs_in": {key: json.loads(shown)[key]["total"]["runs"] for key in ("day", "week", "month")},
        "build_seconds": round(built, 1),
        "read_spend": read,
        "command": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000, help="paid dispatches per case")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per figure (the median is reported)")
    args = parser.parse_args()
    cases = [measure(case, args.runs, args.repeats) for case in CASES]
    print(json.dumps(cases, indent=2))
    target = "fellows-fsm spend over a journal of 100,000 finished paid dispatches in under 1 s"
    path = write_result("spend_read", {"target": target, "cases": cases})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
