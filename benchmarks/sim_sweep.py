"""The simulator's what-if table on the built-in synthetic workload: every strategy at every park cap.

    .venv/bin/python -m benchmarks.sim_sweep [--seed 1] [--park-caps 60,300,600] [--gpus 64] [--hours 48]

Writes benchmarks/results/sim_sweep.json (the records of fellows_fsm.sim.to_json, the table, and how long
the sweep took); the same figures come from ``fellows-fsm simulate --synthetic`` once the CLI is wired.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import write_result
from fellows_fsm.sim.report import format_table, to_records
from fellows_fsm.sim.run import run_sweep
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import synthetic_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--park-caps", default="60,300,600")
    parser.add_argument("--poll", type=float, default=10.0)
    args = parser.parse_args()
    trace = synthetic_trace(seed=args.seed, hours=args.hours, gpus=args.gpus)
    caps = [float(c) for c in args.park_caps.split(",")]
    t0 = time.perf_counter()
    results = run_sweep(trace, park_caps=caps, params=SimParams(gpus=args.gpus, poll_interval_seconds=args.poll))
    seconds = time.perf_counter() - t0
    table = format_table(results)
    print(table, end="")
    mine = [j for j in trace if j.mine]
    print(f"{len(trace)} jobs ({len(mine)} mine); {len(results)} runs in {seconds:.1f} s")
    path = write_result(
        "sim_sweep",
        {
            "seed": args.seed,
            "hours": args.hours,
            "gpus": args.gpus,
            "poll_interval_seconds": args.poll,
            "jobs": len(trace),
            "my_jobs": len(mine),
            "my_gpu_hours": round(sum(j.gpu_hours for j in mine), 1),
            "sweep_seconds": round(seconds, 2),
            "table": table.splitlines(),
            "results": to_records(results),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
