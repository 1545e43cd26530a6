"""Benchmark: the spend arithmetic (core/budget.py: ``spend``, and the budget gate's count) over 100,000 paid runs.

No SLURM, no journal: 100,000 finished ``PaidRun`` values are built in memory (four lanes, three of them priced at
different prices and one unpriced; 1 to 16 GPUs; handed at random times over three months; each ran up to its time
limit), the same every run (a fixed seed). Then ``spend(runs, now, tz)`` is timed, the median (and min / max) of
``--repeats`` calls, wall and CPU time, in two cases:

- ``three-months``: the runs spread over September to November 2026, ``now`` late on Sunday 29 November: the
  month holds about a third of them, the week 7 days' worth, the day one day's;
- ``all-this-month``: every run handed in November: every run is in the month's window;
- ``all-today``: every run handed on 29 November: every run is in all three windows, the pass's worst case.

``BudgetGate(...)`` (one pass over the same runs: today's GPU-hours, the month's cost) is timed the same way. Only
the arithmetic is timed here, on values already in memory: reading the runs from the journal is a figure of its own
(``read`` in the result stays None until that is measured).

    .venv/bin/python -m benchmarks.spend [--runs 100000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import time
import zoneinfo
from collections.abc import Callable
from typing import Any

from benchmarks.common import write_result
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.budget import BudgetGate, spend
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import PaidStatus

UTC = zoneinfo.ZoneInfo("UTC")
LANES = (("gcp", 3.2), ("gcp-eu", 2.9), ("sky", 2.5), ("runpod", None))
"""The lanes the runs are spread over, with their price per GPU-hour (runpod: none configured)."""
ENDED = (PaidStatus.SUCCEEDED, PaidStatus.SUCCEEDED, PaidStatus.SUCCEEDED, PaidStatus.FAILED, PaidStatus.CANCELLED)
NOW = datetime.datetime(2026, 11, 29, 23, 30, tzinfo=UTC)
"""A Sunday evening: its week began on Monday 23 November, its month on 1 November."""
CASES = {
    "three-months": datetime.datetime(2026, 9, 1, tzinfo=UTC),
    "all-this-month": datetime.datetime(2026, 11, 1, tzinfo=UTC),
    "all-today": datetime.datetime(2026, 11, 29, tzinfo=UTC),
}
"""Each case: the earliest handoff (the runs are handed between it and ``NOW``, each ended by ``NOW``)."""


def build_runs(count: int, first: float, now: float, seed: int = 27) -> list[PaidRun]:
    """``count`` paid runs handed between ``first`` and ``now`` and ended by ``now``, in random order."""
    rng = random.Random(seed)
    runs = []
    for number in range(count):
        lane, price = LANES[rng.randrange(len(LANES))]
        limit = rng.choice((1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 24 * 3600.0))
        handed = rng.uniform(first, now - 120.0)
        ran = rng.uniform(0.0, min(limit, now - handed - 60.0))
        runs.append(
            PaidRun(
                dispatch_id=f"{number:012x}",
                lane=lane,
                handed_at=handed,
                gpus=rng.choice((1, 2, 4, 8, 8, 16)),
                limit_seconds=limit,
                price_per_gpu_hour=price,
                status=rng.choice(ENDED),
                running_at=handed + 60.0,
                ended_at=handed + 60.0 + ran,
            )
        )
    return runs


def timed(call: Callable[[], object], repeats: int) -> dict[str, Any]:
    """Wall and CPU seconds of ``repeats`` calls: median, min and max of each."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "wall_seconds": {"median": round(statistics.median(walls), 4), "min": round(min(walls), 4),
                         "max": round(max(walls), 4)},
        "cpu_seconds": {"median": round(statistics.median(cpus), 4), "min": round(min(cpus), 4),
                        "max": round(max(cpus), 4)},
        "repeats": repeats,
    }  # fmt: skip


def measure(case: str, count: int, repeats: int) -> dict[str, Any]:
    """Build the runs of ``case`` and time ``spend`` and the gate's count over them."""
    first, now = CASES[case].timestamp(), NOW.timestamp()
    started = time.perf_counter()
    runs = build_runs(count, first, now)
    built = time.perf_counter() - started
    result = spend(runs, now, UTC)
    budget = BudgetConfig(paid_gpu_hours_per_day=1000.0, paid_cost_per_month=1e9, timezone="UTC")
    return {
        "case": case,
        "runs": count,
        "now": NOW.isoformat(),
        "runs_in": {"day": result.day.total.runs, "week": result.week.total.runs, "month": result.month.total.runs},
        "month_gpu_hours": round(result.month.total.gpu_hours, 1),
        "month_cost": round(result.month.total.cost or 0.0, 1),
        "month_unpriced_gpu_hours": round(result.month.total.unpriced_gpu_hours, 1),
        "build_seconds": round(built, 2),
        "arithmetic": {
            "spend": timed(lambda: spend(runs, now, UTC), repeats),
            "gate": timed(lambda: BudgetGate(budget, runs, now, {}, 3.2), repeats),
        },
        "read": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000, help="paid runs per case")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per figure (the median is reported)")
    args = parser.parse_args()
    cases = [measure(case, args.runs, args.repeats) for case in CASES]
    print(json.dumps(cases, indent=2))
    path = write_result("spend", {"target": "spend over 100,000 finished paid runs in under 1 s", "cases": cases})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
