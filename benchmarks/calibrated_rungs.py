"""calibrated on every rung (issue 28): every park_early policy on the realistic synthetic workload and on the
workload drawn from real SLURM data, caps 60/300/600 s, and the issue's three targets, in the simulator through the
real Router.

    nice -n 5 .venv/bin/python -m benchmarks.calibrated_rungs [--seeds 1,2,3,4,5] [--park-caps 60,300,600]

Policies: off (the plain ladder), own-cap, estimate, calibrated-last (issue 21: the last rung on the history),
calibrated (every rung on the history), the oracle. Workloads: ``synthetic`` (the built-in one with
``realistic_time_limits``) and ``real-graham`` (fellows_fsm/sim/real_workload.py: every job drawn from Graham's
2021 GPU jobs, the others' load offered at ``--real-load``). The first seed plays every cap, the others 600 s.
The targets: (1) at 600 s, on both workloads, calibrated's median time to start at most half of own-cap's, with no
more GCP GPU-hours and no less free share; (2) a node held for hours by jobs that run their limits, the user's caps
free: the paid lane within three polls of the submit; (3) blockers that end within the window while other users
wait below: the job starts on its rung. Writes benchmarks/results/calibrated_rungs.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.common import write_result
from benchmarks.park_early_sweep import _record
from fellows_fsm.core import policy
from fellows_fsm.sim.real_workload import REAL_LOAD, real_trace
from fellows_fsm.sim.results import by_index
from fellows_fsm.sim.run import simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import TraceJob, realistic_time_limits, synthetic_trace

POLICIES = (
    ("off", "ladder"),
    ("own-cap", "reason-aware"),
    ("estimate", "predictive"),
    ("calibrated-last", "calibrated-last"),
    ("calibrated, first cut", "calibrated"),
    ("calibrated", "calibrated"),
    ("oracle", "oracle"),
)
"""(row name, simulator strategy); the product's default park_early_last_rung (false) throughout. "calibrated,
first cut" is calibrated as first built for issue 28 (each rung's own window, 0.05 on every rung): FIRST_CUT."""
FIRST_CUT = {
    "CALIBRATED_EARLIER_HORIZON": "rung",
    "CALIBRATED_LEAVE_EARLIER_BELOW": 0.05,
    "CALIBRATED_LEAVE_LAST_BELOW": 0.05,
}


@contextmanager
def _as(name: str) -> Iterator[None]:
    """For the run inside, calibrated as the row ``name`` plays it (the shipped constants otherwise)."""
    values = FIRST_CUT if name == "calibrated, first cut" else {}
    shipped = {k: getattr(policy, k) for k in values}
    for k, v in values.items():
        setattr(policy, k, v)
    try:
        yield
    finally:
        for k, v in shipped.items():
            setattr(policy, k, v)


DEFAULT_CAP = 600.0
HOUR = 3600.0


def workload(name: str, seed: int, hours: float, gpus: int, real_load: float) -> tuple[TraceJob, ...]:
    """The named workload at ``seed``."""
    if name == "synthetic":
        return realistic_time_limits(synthetic_trace(seed=seed, hours=hours, gpus=gpus), seed=seed)
    return real_trace(seed=seed, hours=hours, gpus=gpus, background_load=real_load)


def play(trace: tuple[TraceJob, ...], caps: list[float], params: SimParams) -> list[dict[str, Any]]:
    """Every policy at every cap (the oracle first for the ratios)."""
    rows = []
    for cap in caps:
        oracle = simulate(trace, "oracle", cap, params)
        for name, strategy in POLICIES:
            with _as(name):
                result = oracle if strategy == "oracle" else simulate(trace, strategy, cap, params)
            rows.append(_record(name, result, oracle))
    return rows


def _history_then(blockers: list[TraceJob], me_at: float) -> tuple[TraceJob, ...]:
    """30 one-GPU jobs of another user that run their whole 10 min limits (the history), then ``blockers``, then
    one 8-GPU job of mine (1 h, 2 h limit) at ``me_at``."""
    past = [TraceJob(i, 20.0 * i, 1, 600.0, "user1", qos="normal-eur", time_limit=600.0) for i in range(30)]
    jobs = sorted([*past, *blockers, TraceJob(0, me_at, 8, HOUR, "me", time_limit=2 * HOUR)], key=lambda j: j.submit_at)
    return tuple(
        TraceJob(i, j.submit_at, j.gpus, j.duration, j.user, qos=j.qos, time_limit=j.limit) for i, j in enumerate(jobs)
    )


def scenarios(poll: float) -> list[dict[str, Any]]:
    """Targets 2 and 3 on traces of their own (300 s caps): each strategy's outcome for my one job."""
    held = [
        TraceJob(0, 1800.0 + i, 8, 6 * HOUR, f"user{2 + i}", qos="normal-eur", time_limit=6 * HOUR) for i in range(8)
    ]
    ending = [TraceJob(0, 1800.0 + i, 8, 400.0, f"user{2 + i}", qos="normal-eur", time_limit=400.0) for i in range(8)]
    below = [TraceJob(0, 1950.0 + i, 8, HOUR, "user9", qos="low-eur", time_limit=HOUR) for i in range(4)]
    cases = (
        ("node held for 6 h by jobs that run their limits, caps free", _history_then(held, 1900.0)),
        ("blockers end 200 s after the submit, others wait below on low-eur", _history_then([*ending, *below], 2000.0)),
    )
    params = SimParams(gpus=64, poll_interval_seconds=poll)
    out = []
    for what, trace in cases:
        mine = next(j.index for j in trace if j.mine)
        for name, strategy in POLICIES:
            with _as(name):
                o = by_index(simulate(trace, strategy, 300.0, params))[mine]
            out.append({"case": what, "policy": name, "lane": o.lane, "qos": o.qos, "start_seconds": o.start_seconds})
    return out


LOADS = (1.2, 1.5, 2.0, 3.0)
"""The others' offered loads of ``real-graham`` whose own-cap medians choose REAL_LOAD (real_workload.py)."""


def load_check(seeds: list[int], hours: float, gpus: int, params: SimParams) -> list[dict[str, Any]]:
    """own-cap's median time to start and GCP GPU-hours on ``real-graham`` at each of LOADS, every seed, 600 s."""
    out = []
    for load in LOADS:
        for seed in seeds:
            r = simulate(workload("real-graham", seed, hours, gpus, load), "reason-aware", DEFAULT_CAP, params)
            p50 = r.p50_start_seconds
            out.append(
                {
                    "load": load,
                    "seed": seed,
                    "p50_start_seconds": None if p50 is None else round(p50, 1),
                    "gcp_gpu_hours": round(r.gcp_gpu_hours, 1),
                }
            )
            print("load", *out[-1].values(), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3,4,5", help="the first plays every cap; the others 600 s")
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--park-caps", default="60,300,600")
    parser.add_argument("--poll", type=float, default=10.0)
    parser.add_argument("--real-load", type=float, default=REAL_LOAD, help="real-graham: the others' offered GPU load")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    caps = [float(c) for c in args.park_caps.split(",")]
    params = SimParams(gpus=args.gpus, poll_interval_seconds=args.poll)
    t0 = time.perf_counter()
    workloads: list[dict[str, Any]] = []
    for name in ("synthetic", "real-graham"):
        for seed in seeds:
            trace = workload(name, seed, args.hours, args.gpus, args.real_load)
            mine = [j for j in trace if j.mine]
            rows = play(trace, caps if seed == seeds[0] else [DEFAULT_CAP], params)
            workloads.append(
                {
                    "workload": name,
                    "seed": seed,
                    "jobs": len(trace),
                    "my_jobs": len(mine),
                    "my_gpu_hours": round(sum(j.gpu_hours for j in mine), 1),
                    "requested_over_used": round(sum(j.limit for j in trace) / sum(j.duration for j in trace), 2),
                    "rows": rows,
                }
            )
            for row in rows:
                print(name, seed, *row.values(), flush=True)
    loads = load_check(seeds, args.hours, args.gpus, params)
    cases = scenarios(args.poll)
    for case in cases:
        print(*case.values(), flush=True)
    seconds = time.perf_counter() - t0
    path = write_result(
        "calibrated_rungs",
        {
            "seeds": seeds,
            "hours": args.hours,
            "gpus": args.gpus,
            "poll_interval_seconds": args.poll,
            "park_caps": caps,
            "real_load": args.real_load,
            "threshold": policy.CALIBRATED_LEAVE_BELOW,
            "earlier_threshold": policy.CALIBRATED_LEAVE_EARLIER_BELOW,
            "last_threshold": policy.CALIBRATED_LEAVE_LAST_BELOW,
            "earlier_horizon": policy.CALIBRATED_EARLIER_HORIZON,
            "min_history": policy.CALIBRATED_MIN_FINISHED,
            "sweep_seconds": round(seconds, 1),
            "workloads": workloads,
            "load_check": loads,
            "scenarios": cases,
        },
        module="calibrated_rungs",
    )
    print(f"wrote {path} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
