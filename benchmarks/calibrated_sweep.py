"""The calibrated sweep: every park_early policy on the realistic synthetic workload, caps 60/300/600 s, in the
simulator through the real Router.

    nice -n 19 .venv/bin/python -m benchmarks.calibrated_sweep [--seeds 1,2,3] [--park-caps 60,300,600]

The built-in synthetic workload (48 h, 64 GPUs) with time limits as users set them
(``fellows_fsm.sim.realistic_time_limits``: a few round values, most a few times the run time, 3 % at the QoS's
maximum). Policies as in benchmarks/park_early_sweep.py: off, own-cap, estimate, estimate with the last rung too,
calibrated (the default threshold and minimum history), the oracles. Candidate thresholds (CANDIDATES, rows
marked ``candidate``) play calibrated with another CALIBRATED_LEAVE_BELOW, at the default cap only. The other
seeds are played at the default cap as a check. Writes benchmarks/results/calibrated_sweep.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.common import write_result
from benchmarks.park_early_sweep import DEFAULT_CAP, POLICIES, _record
from fellows_fsm.core import policy
from fellows_fsm.sim.run import simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import TraceJob, realistic_time_limits, synthetic_trace

CANDIDATES = (0.01, 0.02, 0.1, 0.2)
"""Other thresholds for leaving the last rung, played at the default cap."""


@contextmanager
def _threshold(value: float) -> Iterator[None]:
    """For the run inside, calibrated leaves the last rung below ``value`` instead of the shipped threshold."""
    shipped = policy.CALIBRATED_LEAVE_BELOW
    policy.CALIBRATED_LEAVE_BELOW = value
    try:
        yield
    finally:
        policy.CALIBRATED_LEAVE_BELOW = shipped


def play(trace: tuple[TraceJob, ...], caps: list[float], gpus: int, poll: float) -> list[dict[str, Any]]:
    """Every policy at every cap (the oracle first for the ratios), then the candidate thresholds at 600 s."""
    rows = []
    for cap in caps:
        results = {}
        for name, strategy, last_rung in POLICIES:
            params = SimParams(gpus=gpus, poll_interval_seconds=poll, park_early_last_rung=last_rung)
            results[name] = simulate(trace, strategy, cap, params)
        rows += [_record(name, result, results["oracle"]) for name, result in results.items()]
        if cap == DEFAULT_CAP:
            params = SimParams(gpus=gpus, poll_interval_seconds=poll)
            for value in CANDIDATES:
                with _threshold(value):
                    result = simulate(trace, "calibrated-last", cap, params)
                name = f"calibrated, leave below {value:g}"
                rows.append({**_record(name, result, results["oracle"]), "candidate": True, "threshold": value})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3", help="the first is the main sweep; the others are checks at 600 s")
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--park-caps", default="60,300,600")
    parser.add_argument("--poll", type=float, default=10.0)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    caps = [float(c) for c in args.park_caps.split(",")]
    t0 = time.perf_counter()
    workloads: list[dict[str, Any]] = []
    for seed in seeds:
        trace = realistic_time_limits(synthetic_trace(seed=seed, hours=args.hours, gpus=args.gpus), seed=seed)
        mine = [j for j in trace if j.mine]
        rows = play(trace, caps if seed == seeds[0] else [DEFAULT_CAP], args.gpus, args.poll)
        workloads.append(
            {
                "seed": seed,
                "limits": "realistic",
                "requested_over_used": round(sum(j.limit for j in trace) / sum(j.duration for j in trace), 2),
                "distinct_limits": len({j.limit for j in trace}),
                "jobs": len(trace),
                "my_jobs": len(mine),
                "my_gpu_hours": round(sum(j.gpu_hours for j in mine), 1),
                "rows": rows,
            }
        )
        for row in rows:
            print(seed, *row.values(), flush=True)
    seconds = time.perf_counter() - t0
    path = write_result(
        "calibrated_sweep",
        {
            "seeds": seeds,
            "hours": args.hours,
            "gpus": args.gpus,
            "poll_interval_seconds": args.poll,
            "park_caps": caps,
            "threshold": policy.CALIBRATED_LEAVE_BELOW,
            "min_history": policy.CALIBRATED_MIN_FINISHED,
            "sweep_seconds": round(seconds, 1),
            "workloads": workloads,
        },
        module="calibrated_sweep",
    )
    print(f"wrote {path} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
