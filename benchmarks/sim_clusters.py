"""What a second free cluster in the order does (issue 26): every policy on the built-in synthetic workload, played
once on fellows alone and once with a second cluster after it, side by side.

    .venv/bin/python -m benchmarks.sim_clusters [--seed 1] [--hours 48] [--park-caps 600] [--cluster inst:32:0.4]
        [--tier inst/inst-high:100000:16 --tier inst/inst-low:10000:-]

Writes benchmarks/results/sim_clusters.json (both runs' records, tables and how long each took); the two-cluster
figures are what ``fellows-fsm simulate --cluster inst:32:0.4 --tier inst/inst-high:100000:16 --tier
inst/inst-low:10000:- --park-caps 600 --strategies ...`` prints.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import write_result
from fellows_fsm.sim.clusters import parse_cluster_options
from fellows_fsm.sim.jobs import FELLOWS_TIERS
from fellows_fsm.sim.report import format_table, to_records
from fellows_fsm.sim.run import run_sweep
from fellows_fsm.sim.strategies import STRATEGIES, SimParams
from fellows_fsm.sim.trace import synthetic_trace

TIERS = ("inst/inst-high:100000:16", "inst/inst-low:10000:-")
"""The second cluster's tiers unless told: a capped first rung and an uncapped second, as fellows' ladder."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--park-caps", default="600")
    parser.add_argument("--poll", type=float, default=10.0)
    parser.add_argument("--cluster", action="append", default=None)
    parser.add_argument("--tier", action="append", default=None)
    args = parser.parse_args()
    clusters = args.cluster or ["inst:32:0.4"]
    _, more = parse_cluster_options(clusters, args.tier or TIERS, seed=args.seed)
    trace = synthetic_trace(seed=args.seed, hours=args.hours, gpus=args.gpus)
    caps = [float(c) for c in args.park_caps.split(",")]
    runs = {}
    for label, params in (
        ("one", SimParams(gpus=args.gpus, poll_interval_seconds=args.poll, tiers=FELLOWS_TIERS)),
        ("two", SimParams(gpus=args.gpus, poll_interval_seconds=args.poll, tiers=FELLOWS_TIERS, clusters=more)),
    ):
        t0 = time.perf_counter()
        results = run_sweep(trace, strategies=STRATEGIES, park_caps=caps, params=params)
        seconds = time.perf_counter() - t0
        table = format_table(results)
        print(table, end="")
        runs[label] = {"sweep_seconds": round(seconds, 2), "table": table.splitlines(), "results": to_records(results)}
    mine = [j for j in trace if j.mine]
    path = write_result(
        "sim_clusters",
        {
            "seed": args.seed,
            "hours": args.hours,
            "gpus": args.gpus,
            "poll_interval_seconds": args.poll,
            "clusters": [
                {"name": c.name, "gpus": c.gpus, "load": c.load, "tiers": [[t.name, t.priority, t.max_gpus_per_user]
                 for t in c.tiers]}
                for c in more
            ],
            "cluster_options": [*(f"--cluster {c}" for c in clusters), *(f"--tier {t}" for t in args.tier or TIERS)],
            "jobs": len(trace),
            "my_jobs": len(mine),
            "my_gpu_hours": round(sum(j.gpu_hours for j in mine), 1),
            **runs,
        },
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
