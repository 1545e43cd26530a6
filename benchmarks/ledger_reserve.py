"""Benchmark: the shared ledger's reservation round trip on loopback (issue 42), on the real PostgreSQL of
scripts/dev-postgres.

(a) One driver (``driver/ledger.py``: ``LedgerGate.refusal``, as the last free rung's guard asks it), ``--asks``
handoffs one after another, each a new dispatch, against a budget they all fit in: wall time of each ask (the whole
transaction: two budget rows locked, the sums, the insert, the commit), p50 / p95 / max.
(b) ``--machines`` processes (one driver each: its own journal) of one team, ``--per-machine`` handoffs each, all
released at once, against a team budget of ``--jobs`` one-GPU-hour jobs a day: how many passed (never more than
``--jobs``), and the wall time of each ask under that contention, p50 / p95 / max.

A fresh database per run (dropped after). Needs the server up and its env:

    scripts/dev-postgres start && eval "$(scripts/dev-postgres env)"
    .venv/bin/python -m benchmarks.ledger_reserve [--asks 1000] [--machines 4] [--per-machine 250] [--jobs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import percentiles, write_result
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.driver.ledger import LedgerGate
from fellows_fsm.scheduler.port import JobSpec

_WORKER = """
import json, sys, time
from pathlib import Path
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.driver.ledger import LedgerGate
from fellows_fsm.scheduler.port import JobSpec
url, journal, count, jobs, go = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), Path(sys.argv[5])
gate = LedgerGate(LedgerConfig(url=url, user=journal.parent.name, team="lab"), journal)
gate.ledger.check()
(journal.parent / "ready").touch()
while not go.exists():
    time.sleep(0.001)
spec = JobSpec(name="job", script="job.sh", gpus=1, time_limit_seconds=3600)
limits = BudgetConfig(paid_gpu_hours_per_day=jobs, scope="team")
times, passed = [], 0
for i in range(count):
    t0 = time.perf_counter()
    passed += gate.refusal(f"{journal.parent.name}-{i}", spec, 2.0, limits) is None
    times.append(time.perf_counter() - t0)
gate.close()
print(json.dumps({"passed": passed, "times": times}))
"""


def _quantiles(times: list[float]) -> dict[str, Any]:
    """p50 / p95 / max of the asks, in milliseconds."""
    return {"ask_ms": percentiles([1000 * t for t in times])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--asks", type=int, default=1000)
    parser.add_argument("--machines", type=int, default=4)
    parser.add_argument("--per-machine", type=int, default=250)
    parser.add_argument("--jobs", type=float, default=10)
    args = parser.parse_args()

    base = os.environ.get("FELLOWS_PG_URL")
    if not base:
        sys.exit('no FELLOWS_PG_URL: run scripts/dev-postgres start && eval "$(scripts/dev-postgres env)"')
    name = f"bench_{uuid.uuid4().hex[:10]}"
    url = base.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        results: dict[str, Any] = {"a": _one_driver(url, args.asks), "b": _machines(url, args)}
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    with psycopg.connect(base, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    results["server"] = f"PostgreSQL {version[0] if version else '?'} on loopback (scripts/dev-postgres: fsync=off)"
    print(write_result("ledger_reserve", results))


def _one_driver(url: str, asks: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        gate = LedgerGate(LedgerConfig(url=url, user="solo"), Path(tmp) / "journal.sqlite3")
        gate.ledger.check()
        spec = JobSpec(name="job", script="job.sh", gpus=1, time_limit_seconds=3600)
        limits = BudgetConfig(paid_gpu_hours_per_day=10 * asks)
        times = []
        for i in range(asks):
            t0 = time.perf_counter()
            assert gate.refusal(f"d{i}", spec, 2.0, limits) is None
            times.append(time.perf_counter() - t0)
        gate.close()
    return {"asks": asks, **_quantiles(times)}


def _machines(url: str, args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        procs = []
        for m in range(args.machines):
            journal = Path(tmp) / f"m{m}" / "journal.sqlite3"
            journal.parent.mkdir()
            argv = [sys.executable, "-c", _WORKER, url, str(journal), str(args.per_machine), str(args.jobs), str(go)]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
        while not all((Path(tmp) / f"m{m}" / "ready").exists() for m in range(args.machines)):
            time.sleep(0.01)
        t0 = time.perf_counter()
        go.touch()
        outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
        wall = time.perf_counter() - t0
    times = [t for out in outs for t in out["times"]]
    return {
        "machines": args.machines,
        "handoffs": len(times),
        "budget_jobs": args.jobs,
        "passed": sum(out["passed"] for out in outs),
        "wall_s": wall,
        **_quantiles(times),
    }


if __name__ == "__main__":
    main()
